package owner

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/keyspace"
)

// TestCheckStandbyWrite: the standby's fence accepts a write only from the
// holder, lease and SGN it knows for the key's range, and says which of
// the three was wrong otherwise.
func TestCheckStandbyWrite(t *testing.T) {
	lease := LeaseNum{Epoch: 1, LGN: 7}
	r := &roles{holders: []Holder{
		{Range: keyspace.Range{Start: 0x10, End: 0x20}, ID: "kv-1", Lease: lease, SGN: 3},
		{Range: keyspace.Range{Start: 0x40, End: 0x50}, ID: "kv-2", Lease: LeaseNum{Epoch: 1, LGN: 9}, SGN: 1},
	}}
	for _, c := range []struct {
		name  string
		key   keyspace.Key
		from  string
		lease LeaseNum
		sgn   SGN
		want  StandbyRefusalReason // "" accepted
	}{
		{"current", 0x10, "kv-1", lease, 3, ""},
		{"last key", 0x1f, "kv-1", lease, 3, ""},
		{"past the range", 0x20, "kv-1", lease, 3, NotStandby},
		{"before every range", 0x0f, "kv-1", lease, 3, NotStandby},
		{"between ranges", 0x30, "kv-1", lease, 3, NotStandby},
		{"another holder", 0x15, "kv-3", lease, 3, StaleHolder},
		{"the holder's old lease", 0x15, "kv-1", LeaseNum{Epoch: 1, LGN: 6}, 3, StaleHolder},
		{"another epoch", 0x15, "kv-1", LeaseNum{Epoch: 2, LGN: 7}, 3, StaleHolder},
		{"an old SGN", 0x15, "kv-1", lease, 2, StaleSGN},
		{"a newer SGN", 0x15, "kv-1", lease, 4, StaleSGN},
		{"second range", 0x45, "kv-2", LeaseNum{Epoch: 1, LGN: 9}, 1, ""},
		{"second range, first holder", 0x45, "kv-1", lease, 3, StaleHolder},
	} {
		err := checkStandbyWrite(r, c.key, c.from, c.lease, c.sgn)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
			}
			continue
		}
		ref, ok := errors.AsType[*StandbyRefusal](err)
		if !ok || ref.Reason != c.want {
			t.Errorf("%s: got %v, want a refusal %s", c.name, err, c.want)
			continue
		}
		if ref.Error() == "" {
			t.Errorf("%s: an empty message", c.name)
		}
	}
	if err := checkStandbyWrite(&roles{}, 0x15, "kv-1", lease, 3); err == nil {
		t.Error("an Owner standby of nothing accepted a write")
	}
}

func TestCheckZone(t *testing.T) {
	for _, z := range []string{"", "eu-west-1a", "rack 7"} {
		if err := checkZone(z); err != nil {
			t.Errorf("zone %q refused: %v", z, err)
		}
	}
	long := string(make([]byte, MaxZoneLen+1))
	for _, z := range []string{long, "a\nb", "\xff"} {
		if err := checkZone(z); err == nil {
			t.Errorf("zone %q accepted", z)
		}
	}
}
