// The golden commands "deliver" and "drop": the Manager's messages to an
// Owner arrive, which takes them as a well-behaved Owner would, or are
// lost.

package lease

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/protocol"
)

func (g *golden) describeResponse(m *protocol.LeaseResponse) string {
	var b strings.Builder
	if m.Incarnation != 1 || g.owner(m.Owner).inc != 1 {
		fmt.Fprintf(&b, "inc=%d ", m.Incarnation)
	}
	fmt.Fprintf(&b, "seq=%s ack=%s", g.seqString(m.Seq), g.seqString(m.AckSeq))
	switch {
	case m.RenewHeld:
		b.WriteString(" RenewHeld")
	case len(m.Leases) == 0:
		b.WriteString(" (no leases)")
	default:
		b.WriteString(" " + leaseList(m.Leases, true))
	}
	for _, h := range m.Handovers {
		fmt.Fprintf(&b, "; hand %s#%d over to %s within %v", rangeString(h.Range), h.LGN, h.To, h.Within)
	}
	for _, s := range m.Standbys {
		if s.Owner == "" {
			fmt.Fprintf(&b, "; #%d no standby s%d", s.LGN, s.SGN)
		} else {
			fmt.Fprintf(&b, "; #%d standby %s s%d%s", s.LGN, s.Owner, s.SGN, map[bool]string{true: " in sync"}[s.InSync])
		}
	}
	for _, s := range m.StandbyFor {
		fmt.Fprintf(&b, "; standby for %s#%d s%d%s", s.Owner, s.LGN, s.SGN, map[bool]string{true: " in sync"}[s.InSync])
	}
	switch m.Drain {
	case protocol.DrainActive:
		b.WriteString("; draining")
	case protocol.DrainWaiting:
		b.WriteString("; drain waits for the gate")
	}
	return b.String()
}

// deliver hands an Owner its messages in flight, or loses them.
func (g *golden) deliver(t *testing.T, d *datadriven.TestData, take bool) {
	t.Helper()
	n := -1
	if d.HasArg("n") {
		d.ScanArgs(t, "n", &n)
	}
	var ids []string
	if a, ok := d.Arg("owner"); ok {
		ids = []string{a.SingleVal(t)}
	} else if take {
		for id := range g.inflight {
			ids = append(ids, id)
		}
		slices.Sort(ids)
	} else {
		d.Fatalf(t, "drop needs owner=ID")
	}
	if a, ok := d.Arg("seq"); ok {
		// One message out of order: a late or overtaken delivery.
		want, err := g.parseSeq(a.SingleVal(t))
		if err != nil || len(ids) != 1 {
			d.Fatalf(t, "%s seq=N needs owner=ID and a sequence number (%v)", d.Cmd, err)
		}
		msgs := g.inflight[ids[0]]
		i := slices.IndexFunc(msgs, func(m *protocol.LeaseResponse) bool { return m.Seq == want })
		if i < 0 {
			d.Fatalf(t, "no message seq=%s in flight to %s", a.SingleVal(t), ids[0])
		}
		if take {
			g.take(g.owner(ids[0]), msgs[i])
		} else {
			g.printf("lost: M → %s  seq=%s\n", ids[0], g.seqString(msgs[i].Seq))
		}
		g.inflight[ids[0]] = slices.Delete(msgs, i, i+1)
		return
	}
	for _, id := range ids {
		msgs := g.inflight[id]
		k := len(msgs)
		if n >= 0 {
			k = min(n, k)
		}
		for _, m := range msgs[:k] {
			if take {
				g.take(g.owner(id), m)
			} else {
				g.printf("lost: M → %s  seq=%s\n", id, g.seqString(m.Seq))
			}
		}
		g.inflight[id] = msgs[k:]
		if len(g.inflight[id]) == 0 {
			delete(g.inflight, id)
		}
	}
}

// take is the Owner's handling of a response (see the file comment).
func (g *golden) take(o *goldenOwner, m *protocol.LeaseResponse) {
	name := fmt.Sprintf("%s ← M  seq=%s", o.id, g.seqString(m.Seq))
	switch {
	case m.Incarnation != o.inc:
		g.printf("%s: dropped, addressed to incarnation %d (this is %d)\n", name, m.Incarnation, o.inc)
		return
	case m.Epoch < o.epoch:
		g.printf("%s: dropped, from an older epoch\n", name)
		return
	case m.Seq <= o.heard:
		g.printf("%s: dropped, seq %s was heard already (duplicate or overtaken)\n", name, g.seqString(o.heard))
		return
	}
	leases := m.Leases
	if m.RenewHeld {
		held, ok := o.sent[m.AckSeq]
		if !ok {
			g.printf("%s: dropped as if lost, RenewHeld of request %s, which it does not know\n", name, g.seqString(m.AckSeq))
			return
		}
		leases = held // each a renewal
	}
	o.heard, o.epoch = m.Seq, m.Epoch
	if m.AckSeq != o.seq {
		g.printf("%s: raced, it acknowledges request %s but %s sent %s since (seq recorded as heard)",
			name, g.seqString(m.AckSeq), o.id, g.seqString(o.seq))
		// The next request acknowledges this message: a grant in it left
		// out of that request would read as released, so it is taken up.
		var adopted []protocol.Lease
		for _, l := range leases {
			if l.Grant && !slices.ContainsFunc(o.held, func(h protocol.Lease) bool { return h.Range.Overlaps(l.Range) }) {
				adopted = append(adopted, protocol.Lease{Range: l.Range, LGN: l.LGN})
			}
		}
		if len(adopted) > 0 {
			o.held = append(o.held, adopted...)
			slices.SortFunc(o.held, func(a, b protocol.Lease) int { return keyspace.Compare(a.Range, b.Range) })
			g.printf("; takes up its grants %s", leaseList(adopted, false))
		}
		g.printf("\n")
		return
	}
	var held, refused []protocol.Lease
	for _, l := range leases {
		if l.Grant || holds(o.held, l) {
			held = append(held, protocol.Lease{Range: l.Range, LGN: l.LGN})
		} else {
			refused = append(refused, l)
		}
	}
	var gone []protocol.Lease
	for _, h := range o.held {
		if !slices.ContainsFunc(held, func(l protocol.Lease) bool { return l.LGN == h.LGN && l.Range.Overlaps(h.Range) }) {
			gone = append(gone, h)
		}
	}
	o.held = held
	g.printf("%s: taken", name)
	if m.RenewHeld {
		g.printf(", RenewHeld = renew %s", leaseList(leases, false))
	}
	g.printf("; holds (%s)", leaseList(held, false))
	if len(gone) > 0 {
		g.printf("; gave up %s", leaseList(gone, false))
	}
	if len(refused) > 0 {
		g.printf("; refused renew %s (not held)", leaseList(refused, false))
	}
	g.printf("\n")
}

// holds reports whether held has lease l's LGN over the whole of l's range.
func holds(held []protocol.Lease, l protocol.Lease) bool {
	var cover keyspace.RangeSet
	for _, h := range held {
		if h.LGN == l.LGN {
			cover = cover.Add(h.Range)
		}
	}
	return cover.CoversRange(l.Range)
}
