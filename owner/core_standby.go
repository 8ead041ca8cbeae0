// Standby Owners, the Owner's side (docs/design.md rule 24): the holder
// learns each lease's standby and the standby the leases it keeps a copy
// of; the library fences both ways, and the application moves the bytes.

package owner

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

// Pairing is a lease's pairing of holder and standby as this Owner knows
// it. OwnershipChange.Paired reports the holder's pairings that change: for
// a new standby the application copies the lease's state to it (the
// fill), sends it every write from then on, and acknowledges a write only
// once the standby stored it and CheckReplicated holds. To the holder (StandbyOf, OwnershipChange.Paired) Peer is the
// standby, "" when the lease has none; to the standby (StandbyFor) Peer is
// the holder.
type Pairing struct {
	Range       keyspace.Range // the holder's lease's range, as paired
	Lease       LeaseNum       // the holder's lease
	SGN         protocol.SGN   // the pairing's standby number
	Peer        string
	Addr        string
	Incarnation uint64
	// InSync says the Manager recorded the standby's copy as filled: the
	// standby would be promoted if the holder were lost now.
	InSync bool
}

// ErrNotStandby is wrapped by every StandbyRefusal.
var ErrNotStandby = errors.New("owner: not the standby for this write")

// StandbyRefusal is CheckStandbyWrite's refusal of a replicated write:
// it names what the write said and why it is refused. Current is the
// pairing this Owner has for the write's lease, if any.
type StandbyRefusal struct {
	Key     keyspace.Key
	Holder  string
	Lease   LeaseNum
	SGN     protocol.SGN
	Reason  string
	Current *Pairing
}

func (r *StandbyRefusal) Error() string {
	return fmt.Sprintf("owner: refusing a write on key %#x from %s under lease %d/#%d, SGN %d: %s",
		uint64(r.Key), r.Holder, r.Lease.Epoch, r.Lease.LGN, r.SGN, r.Reason)
}

func (r *StandbyRefusal) Unwrap() error { return ErrNotStandby }

// standbys is what the Core knows of the pairings.
type standbys struct {
	epoch uint64
	// mine are the pairings of leases this Owner holds, by LGN: for each,
	// the one of the largest SGN heard (a delayed message cannot bring an
	// older pairing back).
	mine map[keyspace.LGN]Pairing
	// of are the leases this Owner is the standby for, from the latest
	// message (a complete set), sorted by range.
	of []Pairing
	// reports are the in-sync reports the application made, sent in every
	// request until the Manager says the pairing is in sync or drops it.
	reports []protocol.StandbySync
	// waiting are the leases whose pairing is not reported yet: heard
	// before their grant was taken up (reportPairings).
	waiting []keyspace.LGN
	// deferred says a report was made while a request was unanswered: it
	// goes out with the next request, sent once the answer comes (InSync).
	deferred bool
}

// stepStandbys takes in a message's pairings (in sequence, raced or not:
// the pairings are fenced by their SGN, not by the race filter); with
// keepOf, the leases stood by for stay as they are (stepPairings).
func (c *Core) stepStandbys(m *protocol.LeaseResponse, keepOf bool) {
	sb := &c.sb
	if m.Epoch != sb.epoch {
		sb.epoch, sb.mine, sb.reports, sb.waiting = m.Epoch, nil, nil, nil
		if len(sb.of) > 0 {
			sb.of = nil
			c.changes = append(c.changes, OwnershipChange{StandbyForChanged: true})
		}
	}
	var paired []Pairing
	for _, s := range m.Standbys {
		p := pairingOf(m.Epoch, s)
		if old, ok := sb.mine[s.LGN]; ok && old.SGN >= s.SGN {
			if old.SGN == s.SGN && old.InSync != s.InSync && s.InSync {
				sb.mine[s.LGN] = p
				paired = append(paired, p)
			}
			continue
		}
		if sb.mine == nil {
			sb.mine = map[keyspace.LGN]Pairing{}
		}
		sb.mine[s.LGN] = p
		paired = append(paired, p)
	}
	// Forget the pairings of leases neither held nor listed.
	for lgn := range sb.mine {
		num := LeaseNum{Epoch: m.Epoch, LGN: lgn}
		if !slices.ContainsFunc(c.held, func(l Lease) bool { return l.Num == num }) &&
			!slices.ContainsFunc(m.Leases, func(l protocol.Lease) bool { return l.LGN == lgn }) {
			delete(sb.mine, lgn)
		}
	}
	of := make([]Pairing, 0, len(m.StandbyFor))
	for _, s := range m.StandbyFor {
		of = append(of, pairingOf(m.Epoch, s))
	}
	slices.SortFunc(of, func(a, b Pairing) int { return keyspace.Compare(a.Range, b.Range) })
	if keepOf {
		of = sb.of
	}
	changed := !slices.Equal(of, sb.of)
	if len(of) == 0 && len(sb.of) == 0 {
		changed = false
	}
	sb.of = of
	// A report is kept until the pieces it names are in sync or gone: while
	// a piece of its pairing that it overlaps is not in sync yet.
	sb.reports = slices.DeleteFunc(sb.reports, func(r protocol.StandbySync) bool {
		return !slices.ContainsFunc(of, func(p Pairing) bool {
			return p.Lease.LGN == r.LGN && p.SGN == r.SGN && !p.InSync && p.Range.Overlaps(r.Range)
		})
	})
	if len(paired) > 0 || changed {
		ch := OwnershipChange{Paired: paired}
		if changed {
			ch.StandbyFor, ch.StandbyForChanged = slices.Clone(of), true
		}
		c.changes = append(c.changes, ch)
	}
}

func pairingOf(epoch uint64, s protocol.Standby) Pairing {
	return Pairing{Range: s.Range, Lease: LeaseNum{Epoch: epoch, LGN: s.LGN}, SGN: s.SGN, Peer: s.Owner, Addr: s.Addr,
		Incarnation: s.Incarnation, InSync: s.InSync}
}

// StandbyOf returns, for a key this Owner holds at now, the pairing its
// writes go through (holder side, rule 24): Peer is the standby to send
// each write to, tagged with Lease and SGN, before acknowledging it; ""
// means the lease has no standby and the write is acknowledged on this
// copy alone (and lost, with a loss notification, if this Owner is). ok
// is false when the key is not held.
func (c *Core) StandbyOf(now time.Time, key keyspace.Key) (p Pairing, ok bool) {
	num, held := c.CheckLeaseNow(now, key)
	if !held {
		return Pairing{}, false
	}
	if q, ok := c.sb.mine[num.LGN]; ok && c.sb.epoch == num.Epoch {
		return q, true
	}
	return Pairing{Lease: num}, true
}

// CheckReplicated is the holder's check before it acknowledges a write on
// key that went through pairing p (as StandbyOf returned it, and, when
// p.Peer is not "", stored by the standby): the lease is still held at
// now, and the pairing is still p's (no standby named or dropped since).
// When it fails the write must not be acknowledged: retry it through the
// new pairing, or refuse it.
func (c *Core) CheckReplicated(now time.Time, key keyspace.Key, p Pairing) bool {
	cur, ok := c.StandbyOf(now, key)
	return ok && cur.Lease == p.Lease && cur.SGN == p.SGN && cur.Peer == p.Peer
}

// StandbyFor returns the leases this Owner is the standby for, each
// naming its holder: one entry per piece the lease has now (a piece
// recalled from it is gone), sorted by range.
func (c *Core) StandbyFor() []Pairing { return slices.Clone(c.sb.of) }

// CheckStandbyWrite is the standby's check before it stores a write on key
// replicated by holder under its lease and SGN (rule 24): it accepts only
// a write that names the holder, lease and SGN of the pairing it was last
// given for a lease covering key, never one on a key this Owner holds
// itself (promoted, the old holder's late writes are refused), and never
// one under a lease older than another it is standby for on the key (a
// piece moved to a new holder). Otherwise it returns a *StandbyRefusal
// wrapping ErrNotStandby.
func (c *Core) CheckStandbyWrite(now time.Time, key keyspace.Key, holder string, lease LeaseNum, sgn protocol.SGN) error {
	refuse := func(why string, cur *Pairing) error {
		return &StandbyRefusal{Key: key, Holder: holder, Lease: lease, SGN: sgn, Reason: why, Current: cur}
	}
	if c.broken.StandbyAcceptsStale {
		return nil
	}
	if _, ok := findLease(c.held, key); ok {
		return refuse("this Owner holds the key itself", nil)
	}
	if j := slices.IndexFunc(c.sb.of, func(p Pairing) bool {
		return p.Range.Contains(key) && p.Lease.Epoch == lease.Epoch && p.Lease.LGN > lease.LGN
	}); j >= 0 {
		newer := c.sb.of[j]
		return refuse(fmt.Sprintf("a later lease, #%d of %s, covers the key", newer.Lease.LGN, newer.Peer), &newer)
	}
	i := slices.IndexFunc(c.sb.of, func(p Pairing) bool { return p.Lease == lease && p.Range.Contains(key) })
	if i < 0 {
		return refuse("not the standby of that lease for this key", nil)
	}
	p := c.sb.of[i]
	switch {
	case p.Peer != holder:
		return refuse(fmt.Sprintf("the lease's holder is %s", p.Peer), &p)
	case p.SGN != sgn:
		return refuse(fmt.Sprintf("the pairing's SGN is %d", p.SGN), &p)
	}
	return nil
}

// InSync tells the Manager, in every request until it records it, that
// this Owner's copy of lease under the pairing sgn is filled on pieces:
// the ranges the holder's fill covered, which are the pieces it held when
// it copied them (rule 23). A fill covers no piece its holder had dropped
// before it, and the Manager promotes only the pieces reported, so a piece
// listed again under the lease after its holder dropped it is never
// promoted onto a copy that lacks it. The report names each piece of the
// pairing (StandbyFor) the fill overlaps, clipped to the fill; a report for
// a pairing this Owner does not have, or naming none of its pieces, is
// ignored.
//
// The report goes out at the next Tick if the latest request has been
// answered, and otherwise with the request sent once the answer comes (or
// the race resend, or the renewal, whichever is first). Sent at once while
// a request is unanswered, it would race the answer: the Manager drops a
// request that acknowledges an older message of its own, the Owner drops an
// answer to an older request of its own, and neither renews. An Owner
// named standby for many leases at once (a zone lost) reports a fill every
// few milliseconds for seconds; each report sent at once would start
// another such race, no renewal would be taken up, and its own leases,
// renewed on the Manager's side, would run out on its side and be released
// with their state (TestInSyncReportsKeepRenewals).
func (c *Core) InSync(now time.Time, lease LeaseNum, sgn protocol.SGN, pieces []keyspace.Range) {
	filled := keyspace.NewRangeSet(pieces...)
	added := false
	for _, p := range c.sb.of {
		if p.Lease != lease || p.SGN != sgn || p.InSync {
			continue
		}
		for _, q := range filled.Intersect(keyspace.NewRangeSet(p.Range)).Ranges() {
			r := protocol.StandbySync{Range: q, LGN: lease.LGN, SGN: sgn}
			if !slices.Contains(c.sb.reports, r) {
				c.sb.reports = append(c.sb.reports, r)
				added = true
			}
		}
	}
	if !added {
		return
	}
	if c.unanswered {
		c.sb.deferred = true
		return
	}
	c.sendNow(now)
}

// answered notes that the latest request was answered in order at now: a
// report deferred meanwhile (InSync) goes out at the next Tick.
func (c *Core) answered(now time.Time) {
	c.unanswered, c.inOrder, c.raced = false, now, 0
	if c.sb.deferred && len(c.sb.reports) > 0 {
		c.sendNow(now)
	}
	c.sb.deferred = false
}

// sendNow has the next Tick send a request, which may be now.
func (c *Core) sendNow(now time.Time) {
	if c.resendAt.IsZero() || now.Before(c.resendAt) {
		c.resendAt = now
	}
}

func (c *Core) inSyncReports() []protocol.StandbySync { return slices.Clone(c.sb.reports) }
