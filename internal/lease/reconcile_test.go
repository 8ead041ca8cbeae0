package lease

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// checkReconciled walks the whole table as reconcile once did on every
// change, and fails t if that walk would still find something to do after
// the step just taken, which flushed: a session to be sent a message or
// due a resend and not sent one, a range held past its reservation
// (not expired), a member holding a range another is desired to hold and
// neither recalled nor handing it over, a member holding a desired range
// its last message left out, or a free, unreserved range that a live,
// undraining member is desired to hold. It also fails t if the Core's
// NextDeadline is later than the first time that walk, or a walk of every
// session (resends, members falling silent), would act at.
//
// Incremental reconciliation visits only what changed; this is the walk it
// must agree with.
func checkReconciled(t *testing.T, c *Core, what string) {
	t.Helper()
	now := c.lastNow
	var wake time.Time
	at := func(x time.Time) {
		if !x.IsZero() && (wake.IsZero() || x.Before(wake)) {
			wake = x
		}
	}
	for _, name := range c.Namespaces() {
		n := c.ns[name]
		for id, o := range n.owners {
			if o.push {
				t.Fatalf("%s: %s is to be sent a message, but the flush did not send it", what, id)
			}
			if !o.resendAt.IsZero() && !o.resendAt.After(now) {
				t.Fatalf("%s: %s's resend was due at %v, but the flush did not send it", what, id, o.resendAt.Sub(base))
			}
			at(o.resendAt)
			if o.member {
				at(o.lastHeard.Add(c.cfg.Timing.ManagerLease))
			}
		}
		segs := n.s.table.Segments()
		for _, s := range segs {
			if s.Entry.Owner == "" {
				continue
			}
			gone, next := n.res.free(s.Range, now)
			if !gone.Empty() {
				t.Fatalf("%s: %v is held by %s but reserved no longer (%v): not expired", what, s.Range, s.Entry.Owner, gone)
			}
			at(next)
		}
		for _, s := range segs {
			n.eachDesired(s.Range, func(p keyspace.Range, want string) {
				switch holder := s.Entry.Owner; {
				case n.orphan(s.Entry):
					// An earlier run's: it expires at its reservation's end.
				case holder != "" && holder != want:
					o := n.owners[holder]
					if o == nil || !o.sent.OverlapsRange(p) {
						break
					}
					if !n.canTake(want) {
						break // kept until a membership round names a live Owner
					}
					if h, ok := o.handing[p]; ok && h.to == want && now.Before(h.deadline) {
						at(h.deadline)
						break
					}
					if o.member {
						t.Fatalf("%s: %s holds %v, desired for %q, and was neither told to give it up nor to hand it over", what, holder, p, want)
					}
				case holder != "":
					// A resend pending lists it (a member back by a raced
					// request after its goodbye was answered: the race filter
					// dropped the request, and the answer waits for the resend).
					if o := n.owners[holder]; o != nil && o.member && !o.sent.CoversRange(p) && o.resendAt.IsZero() {
						t.Fatalf("%s: %s holds %v, desired for it, but its last message left it out", what, holder, p)
					}
				case want != "":
					free, next := n.res.free(p, now)
					if o := n.owners[want]; !free.Empty() && o != nil && o.member && !o.draining {
						t.Fatalf("%s: %v is free and unreserved (%v) but not granted to %s, which is desired to hold it", what, p, free, want)
					}
					at(next)
				}
			})
		}
	}
	if !wake.IsZero() && c.NextDeadline().After(wake) {
		t.Fatalf("%s: NextDeadline is %v, but there is something to do at %v", what, c.NextDeadline().Sub(base), wake.Sub(base))
	}
}

// TestReconcileIncremental: after every step that flushes — requests
// (renewals, releases, handovers, leaves, restarts), drains and ticks at
// random times, with messages lost and delayed — a walk of the whole table
// finds nothing that reconciling only what changed has missed.
func TestReconcileIncremental(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 5
	}
	for seed := range uint64(seeds) {
		handover := time.Duration(0) // planned moves on
		if seed%2 == 1 {
			handover = -1
		}
		pacing := time.Duration(0) // membership changes paced by the default
		if seed%4 >= 2 {
			pacing = -1
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			reconcileRun(t, seed, Settings{Policy: assign.ConsistentHash{VNodes: 4}, Handover: handover, MembershipEvery: pacing}, 1500)
		})
	}
}

func reconcileRun(t *testing.T, seed uint64, cfg Settings, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5ec0))
	cfg.Timing, cfg.Epoch, cfg.Seed = tm, epoch, seed
	c := NewCore(cfg, base)
	var peers []*peer
	for i := range 6 {
		peers = append(peers, newPeer(fmt.Sprintf("owner-%d", i)))
	}
	// handovers asked of each peer by the last message it took.
	handovers := map[string][]protocol.Handover{}
	var inflight []OwnerMessage
	now := base
	for step := range steps {
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		p := peers[rng.IntN(len(peers))]
		flushed := true
		var what string
		switch x := rng.IntN(20); {
		case x < 10:
			req := p.request()
			what = fmt.Sprintf("step %d: request from %s", step, p.id)
			switch y := rng.IntN(20); {
			case y == 0:
				req.Leaving = true
				p.held = nil
				what += " (leaving)"
			case y < 3 && len(req.Held) > 0:
				// Give one lease up on its own (a refused renewal).
				i := rng.IntN(len(req.Held))
				req.Held = slices.Delete(req.Held, i, i+1)
				p.held = slices.Clone(req.Held)
				what += " (giving one up)"
			case y < 10 && len(handovers[p.id]) > 0:
				// Hand over what the last message asked for.
				for _, ho := range handovers[p.id] {
					i := slices.IndexFunc(req.Held, func(l protocol.Lease) bool { return l.Range == ho.Range && l.LGN == ho.LGN })
					if i < 0 {
						continue
					}
					req.Held = slices.Delete(req.Held, i, i+1)
					req.Handed = append(req.Handed, protocol.Handed{Range: ho.Range, LGN: ho.LGN, To: ho.To, Incarnation: ho.Incarnation})
				}
				p.held = slices.Clone(req.Held)
				handovers[p.id] = nil
				what += " (handing over)"
			case y < 11:
				req.AckSeq-- // raced: dropped, a resend scheduled
				what += " (raced)"
			}
			before := c.Stats()
			if err := c.StepLease(now, req); err != nil {
				t.Fatal(err)
			}
			after := c.Stats()
			flushed = after.RacesDropped == before.RacesDropped && after.StaleDropped == before.StaleDropped
		case x < 11:
			what = fmt.Sprintf("step %d: restart of %s", step, p.id)
			p.restart()
			handovers[p.id] = nil
			if err := c.StepLease(now, p.request()); err != nil {
				t.Fatal(err)
			}
		case x < 12:
			what = fmt.Sprintf("step %d: drain of %s", step, p.id)
			if err := c.Drain(now, protocol.DefaultNamespace, p.id); err != nil {
				flushed = false // refused: nothing done
			}
		default:
			what = fmt.Sprintf("step %d: tick", step)
			if rng.IntN(2) == 0 && c.NextDeadline().After(now) {
				now = c.NextDeadline() // as a driver would
			}
			c.Tick(now)
		}
		inflight = append(inflight, c.Ready().Owners...)
		// Deliver some of what is in flight, in order; lose a few.
		k := rng.IntN(len(inflight) + 1)
		for _, m := range inflight[:k] {
			if rng.IntN(10) == 0 {
				continue
			}
			for _, q := range peers {
				if q.id != m.To {
					continue
				}
				if m.Msg.Incarnation == q.inc && m.Msg.Seq > q.ack && m.Msg.AckSeq == q.seq {
					handovers[q.id] = m.Msg.Handovers
				}
				q.take(m.Msg)
			}
		}
		inflight = inflight[k:]
		if flushed {
			checkReconciled(t, c, what)
		}
	}
	if c.Stats().Grants == 0 || c.Stats().Expiries == 0 || c.Stats().Releases == 0 {
		t.Fatalf("the run did not exercise grants, expiries and releases: %+v", c.Stats())
	}
	if cfg.Handover >= 0 && c.Stats().Migrations == 0 {
		t.Fatalf("the run did not exercise handovers: %+v", c.Stats())
	}
}

// TestSetDesiredDiff: installing a desired assignment marks dirty exactly
// the keys whose desired owner changed, and leaves each owner's desired
// ranges (wants) as a rebuild from the whole assignment would, through
// joins, leaves, capacity changes and empty memberships.
func TestSetDesiredDiff(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0xd1ff))
			c := NewCore(Settings{Timing: tm, Epoch: epoch}, base)
			n := c.ns[protocol.DefaultNamespace]
			n.dirty = nil
			var policy assign.Policy = assign.ConsistentHash{VNodes: 8}
			if seed%4 == 3 {
				policy = assign.Fixed{Pieces: 16}
			}
			for round := range 60 {
				var ms []assign.Member
				for i := range 12 {
					if rng.IntN(3) != 0 {
						ms = append(ms, assign.Member{ID: fmt.Sprintf("o%02d", i), Capacity: float64(1 + rng.IntN(2))})
					}
				}
				if rng.IntN(10) == 0 {
					ms = nil
				}
				old, d := n.desired, policy.Assign(ms)
				c.setDesired(base, n, d)
				// The keys whose owner differs, from every boundary of either.
				var cuts []keyspace.Key
				for _, s := range append(slices.Clone(old), d...) {
					cuts = append(cuts, s.Range.Start)
				}
				cuts = append(cuts, 0)
				slices.Sort(cuts)
				cuts = slices.Compact(cuts)
				var want keyspace.RangeSet
				for i, k := range cuts {
					r := keyspace.Range{Start: k}
					if i+1 < len(cuts) {
						r.End = cuts[i+1]
					}
					if old.Owner(k) != d.Owner(k) {
						want = want.Add(r)
					}
				}
				got := keyspace.NewRangeSet(n.dirty...)
				if !got.Equal(want) {
					t.Fatalf("round %d: dirty %v, want %v", round, got, want)
				}
				n.dirty = nil
				rebuilt := map[string][]keyspace.Range{}
				for _, s := range d {
					rebuilt[s.Owner] = append(rebuilt[s.Owner], s.Range)
				}
				if len(rebuilt) != len(n.wants) {
					t.Fatalf("round %d: wants of %d owners, want %d", round, len(n.wants), len(rebuilt))
				}
				for id, w := range rebuilt {
					if !slices.Equal(n.wants[id], w) {
						t.Fatalf("round %d: wants[%s] = %v, want %v", round, id, n.wants[id], w)
					}
				}
			}
		})
	}
}
