package owner

import (
	"errors"
	"slices"
	"testing"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// standbyCore is a Core that sent its first request at 0 and holds
// [0,100) under LGN 5 from the answer.
func standbyCore(t *testing.T, broken faults.Set) *Core {
	t.Helper()
	c := newCore(t)
	c.broken = broken
	tick(c, at(0))
	c.Step(at(10*ms), resp(1, 1, grant(rng(0, 100), 5)))
	readyOf(c)
	return c
}

// TestHolderKeepsNewestSGN (rule 24): the holder's pairing of a lease is
// the one of the largest SGN heard; a delayed message cannot bring back a
// standby that was replaced or dropped, and an acknowledgement checked
// against an old pairing fails.
func TestHolderKeepsNewestSGN(t *testing.T) {
	c := standbyCore(t, faults.Set{})
	named := resp(2, 1, renew(rng(0, 100), 5))
	named.Standbys = []protocol.Standby{{Range: rng(0, 100), LGN: 5, SGN: 3, Owner: "s1", Addr: "s1:1", Incarnation: 9}}
	c.Step(at(20*ms), named)
	p, ok := c.StandbyOf(at(30*ms), 50)
	if !ok || p.Peer != "s1" || p.SGN != 3 || p.Lease != num(5) {
		t.Fatalf("StandbyOf = %+v, %v; want s1 under SGN 3", p, ok)
	}
	if chs := readyOf(c).chs; len(chs) != 1 || len(chs[0].Paired) != 1 || chs[0].Paired[0].Peer != "s1" {
		t.Fatalf("changes %+v, want the pairing with s1 reported", chs)
	}
	dropped := resp(3, 1, renew(rng(0, 100), 5))
	dropped.Standbys = []protocol.Standby{{Range: rng(0, 100), LGN: 5, SGN: 4}}
	c.Step(at(40*ms), dropped)
	if c.CheckReplicated(at(50*ms), 50, p) {
		t.Fatal("a write replicated under SGN 3 is acknowledged after the pairing was dropped under SGN 4")
	}
	stale := resp(4, 1, renew(rng(0, 100), 5))
	stale.Standbys = named.Standbys // the Manager's older pairing, listed again by a late message
	c.Step(at(60*ms), stale)
	if q, _ := c.StandbyOf(at(70*ms), 50); q.Peer != "" || q.SGN != 4 {
		t.Fatalf("after an older pairing arrived StandbyOf = %+v, want none under SGN 4", q)
	}
	if none, _ := c.StandbyOf(at(70*ms), 50); !c.CheckReplicated(at(70*ms), 50, none) {
		t.Fatal("a write on the lease's own copy is refused while the pairing is none")
	}
	if c.CheckReplicated(at(tm.OwnerLease+ms), 50, Pairing{Lease: num(5), SGN: 4}) {
		t.Fatal("acknowledged after the lease ran out")
	}
}

// TestStandbyFencesStaleHolder (rule 24): the standby stores a write only
// from the holder, lease and SGN of its pairing, and none on a key it
// holds itself; faults.StandbyAcceptsStale breaks it.
func TestStandbyFencesStaleHolder(t *testing.T) {
	check := func(broken faults.Set) error {
		c := standbyCore(t, broken)
		m := resp(2, 1, renew(rng(0, 100), 5))
		m.StandbyFor = []protocol.Standby{{Range: rng(100, 200), LGN: 8, SGN: 4, Owner: "h", Addr: "h:1", Incarnation: 3}}
		c.Step(at(20*ms), m)
		if err := c.CheckStandbyWrite(at(30*ms), 150, "h", num(8), 4); err != nil {
			t.Fatalf("the current holder's write is refused: %v", err)
		}
		for _, w := range []struct {
			key    keyspace.Key
			holder string
			lease  LeaseNum
			sgn    protocol.SGN
		}{
			{150, "h", num(8), 3},   // an older SGN
			{150, "old", num(6), 4}, // a stale holder's lease
			{150, "x", num(8), 4},   // not the holder
			{50, "h", num(8), 4},    // a key this Owner holds
			{250, "h", num(8), 4},   // outside the lease
		} {
			err := c.CheckStandbyWrite(at(30*ms), w.key, w.holder, w.lease, w.sgn)
			var r *StandbyRefusal
			if err == nil {
				return errors.New("accepted a write it should refuse")
			}
			if !errors.Is(err, ErrNotStandby) || !errors.As(err, &r) || r.Reason == "" {
				t.Fatalf("refusal %v is not a *StandbyRefusal wrapping ErrNotStandby", err)
			}
		}
		return nil
	}
	if err := check(faults.Set{}); err != nil {
		t.Fatal(err)
	}
	if check(faults.Set{StandbyAcceptsStale: true}) == nil {
		t.Fatal("with faults.StandbyAcceptsStale the check passes")
	}
}

// TestInSyncReported (rule 23): the standby's report goes in every request
// until the Manager says the pairing is in sync.
func TestInSyncReported(t *testing.T) {
	c := standbyCore(t, faults.Set{})
	m := resp(2, 1, renew(rng(0, 100), 5))
	sf := protocol.Standby{Range: rng(100, 200), LGN: 8, SGN: 4, Owner: "h"}
	m.StandbyFor = []protocol.Standby{sf}
	c.Step(at(20*ms), m)
	c.InSync(at(30*ms), num(8), 4, []keyspace.Range{keyspace.Full})
	c.InSync(at(30*ms), num(8), 3, []keyspace.Range{keyspace.Full}) // not its pairing: ignored
	reqs := tick(c, at(30*ms)).reqs
	if len(reqs) != 1 || len(reqs[0].InSync) != 1 || reqs[0].InSync[0].SGN != 4 {
		t.Fatalf("requests %+v, want one reporting #8 in sync under SGN 4", reqs)
	}
	sf.InSync = true
	m = resp(3, 2, renew(rng(0, 100), 5))
	m.StandbyFor = []protocol.Standby{sf}
	c.Step(at(40*ms), m)
	if reqs := tick(c, at(600*ms)).reqs; len(reqs) != 1 || len(reqs[0].InSync) != 0 {
		t.Fatalf("requests %+v, want no report once recorded", reqs)
	}
}

// TestPromotedGrant: a grant marked Promoted reaches the application so.
func TestPromotedGrant(t *testing.T) {
	c := newCore(t)
	tick(c, at(0))
	c.Step(at(10*ms), resp(1, 1, protocol.Lease{Range: rng(0, 100), LGN: 9, Grant: true, Migrated: true, Promoted: true}))
	chs := readyOf(c).chs
	if len(chs) == 0 || len(chs[0].Granted) != 1 || !chs[0].Granted[0].Promoted || !chs[0].Granted[0].Migrated {
		t.Fatalf("changes %+v, want a grant marked Promoted and Migrated", chs)
	}
}

// TestStandbyRefusesOlderLease (rule 24): a piece of a lease moved to a
// new holder whose standby is this Owner too takes no more writes of the
// old lease, even before the old lease's pairing stops listing it.
func TestStandbyRefusesOlderLease(t *testing.T) {
	c := standbyCore(t, faults.Set{})
	m := resp(2, 1, renew(rng(0, 100), 5))
	m.StandbyFor = []protocol.Standby{
		{Range: rng(100, 200), LGN: 8, SGN: 4, Owner: "h"},
		{Range: rng(150, 160), LGN: 12, SGN: 6, Owner: "h2"},
	}
	c.Step(at(20*ms), m)
	if err := c.CheckStandbyWrite(at(30*ms), 120, "h", num(8), 4); err != nil {
		t.Fatalf("the old lease's write on a key it still has is refused: %v", err)
	}
	if err := c.CheckStandbyWrite(at(30*ms), 155, "h", num(8), 4); !errors.Is(err, ErrNotStandby) {
		t.Fatalf("the old lease's write on a key a later lease covers: %v, want a refusal", err)
	}
	if err := c.CheckStandbyWrite(at(30*ms), 155, "h2", num(12), 6); err != nil {
		t.Fatalf("the later lease's write is refused: %v", err)
	}
}

// TestInSyncNamesPieces (rule 23): the standby reports in sync exactly the
// pieces of the pairing the holder's fill covered, each clipped to the
// fill, and keeps a report until the piece it names is recorded in sync: a
// fill that did not cover a piece of the lease (dropped by its holder
// before the copy) reports nothing of it.
func TestInSyncNamesPieces(t *testing.T) {
	c := standbyCore(t, faults.Set{})
	m := resp(2, 1, renew(rng(0, 100), 5))
	a := protocol.Standby{Range: rng(100, 150), LGN: 8, SGN: 4, Owner: "h"}
	b := protocol.Standby{Range: rng(150, 200), LGN: 8, SGN: 4, Owner: "h"}
	m.StandbyFor = []protocol.Standby{a, b}
	c.Step(at(20*ms), m)
	c.InSync(at(30*ms), num(8), 4, []keyspace.Range{rng(90, 140)}) // the fill covered [100, 140) of a only
	reqs := tick(c, at(30*ms)).reqs
	want := []protocol.StandbySync{{Range: rng(100, 140), LGN: 8, SGN: 4}}
	if len(reqs) != 1 || !slices.Equal(reqs[0].InSync, want) {
		t.Fatalf("requests %+v, want one reporting %v", reqs, want)
	}
	c.InSync(at(40*ms), num(8), 4, []keyspace.Range{rng(0, 100), rng(200, 300)}) // no piece of #8
	a.InSync = true
	m = resp(3, 2, renew(rng(0, 100), 5))
	m.StandbyFor = []protocol.Standby{a, b}
	c.Step(at(50*ms), m)
	if reqs := tick(c, at(600*ms)).reqs; len(reqs) != 1 || len(reqs[0].InSync) != 0 {
		t.Fatalf("requests %+v, want no report: the piece reported is recorded, the other never filled", reqs)
	}
}
