package owner

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// raceManager is the Manager's side of one Owner's lease stream, as
// internal/lease answers it (request.go): a request that acknowledges the
// Manager's latest message is answered at once, renewing the Owner's
// lease; one that raced it (it acknowledges an older message) is dropped,
// its in-sync reports taken in all the same, and the Manager's message is
// sent again, renewing, after a random backoff. Every message takes delay
// each way.
type raceManager struct {
	t       *testing.T
	c       *Core
	delay   time.Duration
	rng     *rand.Rand
	seq     uint64 // the Manager's latest message
	heard   uint64 // the Owner's latest request
	resend  time.Time
	lease   protocol.Lease
	of      []protocol.Standby // the leases the Owner stands by for
	toOwner []timed[*protocol.LeaseResponse]
	toMgr   []timed[*protocol.LeaseRequest]
}

type timed[M any] struct {
	at time.Time
	m  M
}

func (rm *raceManager) message(now time.Time) {
	rm.seq++
	m := resp(rm.seq, rm.heard, renew(rm.lease.Range, rm.lease.LGN))
	m.StandbyFor = slices.Clone(rm.of)
	rm.toOwner = append(rm.toOwner, timed[*protocol.LeaseResponse]{now.Add(rm.delay), m})
}

func (rm *raceManager) receive(now time.Time, req *protocol.LeaseRequest) {
	if req.Seq <= rm.heard {
		return
	}
	rm.heard = req.Seq
	for _, r := range req.InSync {
		for i := range rm.of {
			if rm.of[i].LGN == r.LGN && rm.of[i].SGN == r.SGN {
				rm.of[i].InSync = true
			}
		}
	}
	if req.AckSeq != rm.seq {
		if rm.resend.IsZero() {
			rm.resend = now.Add(tm.BackoffMin + time.Duration(rm.rng.Int64N(int64(tm.BackoffMax-tm.BackoffMin))))
		}
		return
	}
	rm.resend = time.Time{}
	rm.message(now)
}

// run advances the stream by 1 ms steps from from to until, calling each
// at every step before the Owner's timers run.
func (rm *raceManager) run(from, until time.Time, each func(now time.Time)) {
	for now := from; now.Before(until); now = now.Add(ms) {
		each(now)
		for len(rm.toMgr) > 0 && !rm.toMgr[0].at.After(now) {
			req := rm.toMgr[0].m
			rm.toMgr = rm.toMgr[1:]
			rm.receive(now, req)
		}
		if !rm.resend.IsZero() && !rm.resend.After(now) {
			rm.resend = time.Time{}
			rm.message(now)
		}
		for len(rm.toOwner) > 0 && !rm.toOwner[0].at.After(now) {
			m := rm.toOwner[0].m
			rm.toOwner = rm.toOwner[1:]
			rm.c.Step(now, m)
		}
		rm.c.Tick(now)
		reqs, _ := rm.c.Ready()
		for _, r := range reqs {
			rm.toMgr = append(rm.toMgr, timed[*protocol.LeaseRequest]{now.Add(rm.delay), r})
		}
	}
}

// TestInSyncReportsKeepRenewals: an Owner named standby for many leases at
// once (a zone lost, its leases' standbys named anew) reports each copy
// filled as it is, one every few milliseconds, for longer than its own
// lease. Its renewals must still go through. A report sent at once while a
// request is unanswered races the Manager's answer: the Manager drops the
// request (it acknowledges an older message) and the Owner drops the
// answer (it answers an older request), so no renewal is taken up, and the
// Owner's own leases, live and renewed on the Manager's side, run out on
// its side and are released — a live holder's ranges freed with their
// state and reported lost.
func TestInSyncReportsKeepRenewals(t *testing.T) {
	const n = 400 // leases stood by for, one filled every 5 ms: 2 s of reports
	c := newCore(t)
	rm := &raceManager{t: t, c: c, delay: 20 * ms, rng: rand.New(rand.NewPCG(1, 2)), lease: grant(rng(0, 100), 5)}
	for i := range n {
		k := keyspace.Key(1000 + 10*i)
		rm.of = append(rm.of, protocol.Standby{Range: rng(k, k+10), LGN: keyspace.LGN(100 + i), SGN: 1,
			Owner: "h", Addr: "h:1", Incarnation: 3})
	}
	// The grant, in order, with the pairings.
	tick(c, at(0))
	rm.seq, rm.heard = 1, c.seq
	first := resp(1, c.seq, rm.lease)
	first.StandbyFor = slices.Clone(rm.of)
	c.Step(at(40*ms), first)
	readyOf(c)
	if _, ok := c.CheckLeaseNow(at(50*ms), 50); !ok {
		t.Fatal("the grant was not taken up")
	}
	filled := 0
	fill := func(now time.Time) {
		if now.Before(at(500*ms)) || filled == n || now.Sub(at(500*ms))%(5*ms) != 0 {
			return
		}
		c.InSync(now, num(keyspace.LGN(100+filled)), 1, []keyspace.Range{keyspace.Full})
		filled++
	}
	end := at(500*ms + n*5*ms + tm.OwnerLease)
	rm.run(at(41*ms), end, fill)
	if c.Expired() > 0 {
		t.Fatalf("the Owner's own lease ran out while it reported %d copies filled, one every 5 ms with a %s round trip: "+
			"no renewal was taken up", n, 2*rm.delay)
	}
	if _, ok := c.CheckLeaseNow(end, 50); !ok {
		t.Fatal("the Owner's own lease is not held at the end")
	}
	for _, s := range rm.of {
		if !s.InSync {
			t.Fatalf("the copy of lease %d was never reported in sync", s.LGN)
		}
	}
}
