package owner

import (
	"errors"
	"github.com/leasehold/leasehold/internal/faults"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// TestCheckStandbyWriteRuntime: the runtime's fence, on the published
// pairings, accepts a write only from the holder, lease and SGN it knows
// for the key's lease, and none on a key held here, as Core's does.
func TestCheckStandbyWriteRuntime(t *testing.T) {
	lease := LeaseNum{Epoch: 1, LGN: 7}
	of := []Pairing{
		{Range: keyspace.Range{Start: 0x10, End: 0x20}, Peer: "kv-1", Lease: lease, SGN: 3},
		{Range: keyspace.Range{Start: 0x40, End: 0x50}, Peer: "kv-2", Lease: LeaseNum{Epoch: 1, LGN: 9}, SGN: 1},
	}
	for _, c := range []struct {
		name   string
		key    keyspace.Key
		held   bool
		from   string
		lease  LeaseNum
		sgn    protocol.SGN
		accept bool
	}{
		{"current", 0x10, false, "kv-1", lease, 3, true},
		{"last key", 0x1f, false, "kv-1", lease, 3, true},
		{"past the range", 0x20, false, "kv-1", lease, 3, false},
		{"between ranges", 0x30, false, "kv-1", lease, 3, false},
		{"another holder", 0x15, false, "kv-3", lease, 3, false},
		{"the holder's old lease", 0x15, false, "kv-1", LeaseNum{Epoch: 1, LGN: 6}, 3, false},
		{"another epoch", 0x15, false, "kv-1", LeaseNum{Epoch: 2, LGN: 7}, 3, false},
		{"an old SGN", 0x15, false, "kv-1", lease, 2, false},
		{"a key held here (promoted)", 0x15, true, "kv-1", lease, 3, false},
		{"second range", 0x45, false, "kv-2", LeaseNum{Epoch: 1, LGN: 9}, 1, true},
		{"second range, first holder", 0x45, false, "kv-1", lease, 3, false},
	} {
		err := checkStandbyWrite(of, c.held, c.key, c.from, c.lease, c.sgn)
		switch {
		case c.accept && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case !c.accept && !errors.Is(err, ErrNotStandby):
			t.Errorf("%s: got %v, want a refusal wrapping ErrNotStandby", c.name, err)
		}
		if ref, ok := errors.AsType[*StandbyRefusal](err); ok && ref.Reason == "" {
			t.Errorf("%s: a refusal without a reason", c.name)
		}
	}
}

func TestCheckZone(t *testing.T) {
	for _, z := range []string{"", "eu-west-1a", "rack 7"} {
		if err := checkZone(z); err != nil {
			t.Errorf("zone %q refused: %v", z, err)
		}
	}
	long := string(make([]byte, protocol.MaxZoneLen+1))
	for _, z := range []string{long, "a\nb", "\xff"} {
		if err := checkZone(z); err == nil {
			t.Errorf("zone %q accepted", z)
		}
	}
}

// TestRuntimeFenceIsTheCore's: the runtime's CheckStandbyWrite, on the
// pairings the loop publishes, answers as Core.CheckStandbyWrite does for
// the same state, write by write.
func TestRuntimeFenceIsTheCore(t *testing.T) {
	c := standbyCore(t, faults.Set{})
	m := resp(2, 1, renew(rng(0, 100), 5))
	m.StandbyFor = []protocol.Standby{
		{Range: rng(100, 200), LGN: 8, SGN: 4, Owner: "h", Addr: "h:1", Incarnation: 3},
		{Range: rng(150, 180), LGN: 9, SGN: 6, Owner: "h2", Addr: "h2:1", Incarnation: 4},
		{Range: rng(300, 400), LGN: 3, SGN: 2, Owner: "g", Addr: "g:1", Incarnation: 5},
	}
	c.Step(at(20*ms), m)
	now := at(30 * ms)
	for _, key := range []keyspace.Key{50, 99, 100, 149, 150, 179, 180, 250, 300, 399, 400} {
		for _, holder := range []string{"h", "h2", "g", "x"} {
			for _, lgn := range []keyspace.LGN{3, 5, 7, 8, 9} {
				for _, sgn := range []protocol.SGN{2, 3, 4, 6} {
					_, held := findLease(c.held, key)
					want := c.CheckStandbyWrite(now, key, holder, num(lgn), sgn)
					got := checkStandbyWrite(c.sb.of, held, key, holder, num(lgn), sgn)
					if (want == nil) != (got == nil) || want != nil && want.Error() != got.Error() {
						t.Errorf("key %d from %s under #%d, SGN %d: runtime %v, core %v", key, holder, lgn, sgn, got, want)
					}
				}
			}
		}
	}
}
