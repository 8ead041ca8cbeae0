// What the golden scripts print and parse: each step's changes (ready), the
// table (the command "table"), ranges, keys, leases and sequence numbers.

package lease

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

// ready prints what the core asks of its driver: the changes to replicate,
// applied here as a replica applies them once committed, then the messages,
// which go in flight. It then checks the replicated State against the core's.
func (g *golden) ready(t *testing.T, d *datadriven.TestData) {
	t.Helper()
	rd := g.c.Ready()
	for _, ch := range rd.Changes {
		var before keyspace.LSN
		if ch.Op == OpSet {
			before = g.applied.Table(ch.NS).LSN()
		}
		if err := g.applied.Apply(g.at(), []Change{ch}); err != nil {
			d.Fatalf(t, "applying %+v: %v", ch, err)
		}
		g.printf("change %s\n", g.describeChange(ch, before))
	}
	for _, m := range rd.Owners {
		if m.To != m.Msg.Owner {
			d.Fatalf(t, "message to %q addressed to %q", m.To, m.Msg.Owner)
		}
		g.printf("M → %s  %s\n", m.To, g.describeResponse(m.Msg))
		g.inflight[m.To] = append(g.inflight[m.To], m.Msg)
	}
	for _, ns := range g.c.Namespaces() {
		want, got := g.c.Table(ns), g.applied.Table(ns)
		if want.LSN() != got.LSN() || !slices.Equal(want.Segments(), got.Segments()) {
			d.Fatalf(t, "namespace %s: the replicated table (LSN %d) differs from the core's (LSN %d)", ns, got.LSN(), want.LSN())
		}
	}
}

func (g *golden) describeChange(ch Change, before keyspace.LSN) string {
	ns := ""
	if ch.NS != protocol.DefaultNamespace {
		ns = " in " + ch.NS
	}
	switch ch.Op {
	case OpEpoch:
		return fmt.Sprintf("epoch %d", ch.Epoch)
	case OpNamespace:
		return fmt.Sprintf("namespace %s", ch.NS)
	case OpSet:
		lsn := g.applied.Table(ch.NS).LSN()
		at := fmt.Sprintf("LSN %d", lsn)
		if lsn == before {
			at = "no table change"
		}
		return fmt.Sprintf("%s: %s → %s%s", at, rangeString(ch.Range), entryString(ch.Entry), ns)
	case OpOwner:
		r := ch.Record
		s := fmt.Sprintf("owner %s%s: incarnation %d", ch.Owner, ns, r.Incarnation)
		if r.Member {
			s += ", member"
		} else {
			s += ", not a member"
		}
		if r.Draining {
			s += ", draining"
		}
		if r.Capacity != 0 {
			s += fmt.Sprintf(", capacity %g", r.Capacity)
		}
		if r.Zone != "" {
			s += ", zone " + r.Zone
		}
		return s
	case OpForget:
		return fmt.Sprintf("forget owner %s%s", ch.Owner, ns)
	case OpDesired:
		return fmt.Sprintf("desired assignment%s: %d segments", ns, len(ch.Desired))
	case OpPeer:
		return fmt.Sprintf("replica %d at %q", ch.Peer, ch.Addr)
	case OpStandby:
		r := ch.Standby
		switch {
		case r.SGN == 0:
			return fmt.Sprintf("standby of #%d forgotten%s", r.LGN, ns)
		case r.Owner == "":
			return fmt.Sprintf("standby of %s#%d: none s%d%s", r.Holder, r.LGN, r.SGN, ns)
		case r.InSync:
			return fmt.Sprintf("standby of %s#%d: %s s%d in sync%s", r.Holder, r.LGN, r.Owner, r.SGN, ns)
		}
		zone := ""
		if r.Zone != "" {
			zone = " zone " + r.Zone
		}
		return fmt.Sprintf("standby of %s#%d: %s%s s%d%s", r.Holder, r.LGN, r.Owner, zone, r.SGN, ns)
	case OpPromoted:
		p := ch.Promoted
		if p.Seq == 0 {
			return fmt.Sprintf("promotion of #%d forgotten%s", p.LGN, ns)
		}
		return fmt.Sprintf("promoted %s#%d, first listed in seq=%s%s", p.Owner, p.LGN, g.seqString(p.Seq), ns)
	}
	return fmt.Sprintf("%+v", ch)
}

func (g *golden) printTable() {
	for _, s := range g.c.Table(protocol.DefaultNamespace).Segments() {
		g.printf("%s %s\n", rangeString(s.Range), entryString(s.Entry))
	}
	g.printf("LSN %d\n", g.c.Table(protocol.DefaultNamespace).LSN())
}

func entryString(e leasetable.Entry) string {
	if e.Free() {
		return "free"
	}
	s := fmt.Sprintf("%s#%d", e.Owner, e.LGN)
	if e.Migrated {
		s += fmt.Sprintf(" migrated from #%d", e.MigratedFrom)
	}
	return s
}

// seqString writes a sequence number of the leader resumed in term T as
// BT+n.
func (g *golden) seqString(s uint64) string {
	var term, base uint64
	for t, b := range g.bases {
		if s >= b && b > base {
			term, base = t, b
		}
	}
	if base == 0 {
		return strconv.FormatUint(s, 10)
	}
	return fmt.Sprintf("B%d+%d", term, s-base)
}

func (g *golden) parseSeq(v string) (uint64, error) {
	if rest, ok := strings.CutPrefix(v, "B"); ok {
		term, n, ok := strings.Cut(rest, "+")
		tn, err := strconv.ParseUint(term, 10, 64)
		if !ok || err != nil || g.bases[tn] == 0 {
			return 0, fmt.Errorf("%q: want BT+n, T the term of a resumed leader", v)
		}
		k, err := strconv.ParseUint(n, 10, 32)
		return g.bases[tn] + k, err
	}
	return strconv.ParseUint(v, 10, 64)
}

// The notation of ranges and leases (see the file comment).

func keyString(k keyspace.Key, end bool) string {
	switch {
	case end && k == 0:
		return "16"
	case k%sixteenth == 0:
		return strconv.FormatUint(uint64(k)/sixteenth, 10)
	}
	return fmt.Sprintf("0x%x", uint64(k))
}

func rangeString(r keyspace.Range) string {
	return keyString(r.Start, false) + "-" + keyString(r.End, true)
}

func leaseList(ls []protocol.Lease, marks bool) string {
	var parts []string
	for _, l := range ls {
		s := fmt.Sprintf("%s#%d", rangeString(l.Range), l.LGN)
		if marks {
			switch {
			case l.Grant && l.Promoted:
				s = "grant " + s + " promoted"
			case l.Grant && l.Migrated:
				s = "grant " + s + " migrated"
			case l.Grant:
				s = "grant " + s
			default:
				s = "renew " + s
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func parseKey(s string) (keyspace.Key, error) {
	if hex, ok := strings.CutPrefix(s, "0x"); ok {
		k, err := strconv.ParseUint(hex, 16, 64)
		return keyspace.Key(k), err
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > 16 {
		return 0, fmt.Errorf("key %q: want 0 to 16 (sixteenths) or 0x…", s)
	}
	if n == 16 {
		return 0, nil // the end of the key space, 2⁶⁴, is written 0
	}
	return keyspace.Key(n * sixteenth), nil
}

func parseRange(s string) (keyspace.Range, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return keyspace.Range{}, fmt.Errorf("range %q: want START-END", s)
	}
	start, err := parseKey(a)
	if err != nil {
		return keyspace.Range{}, err
	}
	end, err := parseKey(b)
	if err != nil {
		return keyspace.Range{}, err
	}
	r := keyspace.Range{Start: start, End: end}
	if !r.Valid() {
		return keyspace.Range{}, fmt.Errorf("range %q is empty", s)
	}
	return r, nil
}

func parseLease(s string) (protocol.Lease, error) {
	r, lgn, ok := strings.Cut(strings.TrimSpace(s), "#")
	if !ok {
		return protocol.Lease{}, fmt.Errorf("lease %q: want RANGE#LGN", s)
	}
	rg, err := parseRange(r)
	if err != nil {
		return protocol.Lease{}, err
	}
	n, err := strconv.ParseUint(lgn, 10, 64)
	if err != nil || n == 0 {
		return protocol.Lease{}, fmt.Errorf("lease %q: LGN must be a positive number", s)
	}
	return protocol.Lease{Range: rg, LGN: keyspace.LGN(n)}, nil
}
