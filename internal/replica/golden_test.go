package replica

// The golden interaction tests: scripts under testdata/golden of messages and
// clock readings in, and the Manager core's messages and replicated changes
// out, in the style of etcd raft's interaction tests. Each file is a story a
// reader can learn the protocol from; its comments say what each step shows.
//
//	go test ./manager -run TestGolden             # check every script
//	go test ./manager -run TestGolden/race -v     # one script, echoing it
//	go test ./manager -run TestGolden -rewrite    # rewrite the expected output
//
// After -rewrite, read the diff of testdata/golden before committing it: the
// expected output is the assertion. The scripts' comments cite the protocol
// rules of docs/design.md by number ("rule 7").
//
// # The language
//
// Times are virtual, from 0 at the Manager's start; the timing is the fast
// profile (OwnerLease 2s, Renew 500ms, ManagerLease 2.2s). A range is written
// in sixteenths of the key space: 4-8 is [4·2⁶⁰, 8·2⁶⁰), 12-16 runs to the end;
// a key off that grid is written in hex (0x…). A lease is a range and its
// LGN: 4-8#3.
//
//	core [epoch=N] [pieces=N] [handover=off|DUR] [membership=DUR] [seed=N]
//	    A new Manager (NewCore) at t=0 with no state. The policy is
//	    assign.Fixed: pieces (default 4) dealt round-robin to the members in
//	    ID order. handover (default one OwnerLease) is how long a planned
//	    move waits for the state; off recalls instead. membership paces the
//	    planning of joins and leaves (default: at once).
//	tick +DUR | tick to=DUR
//	    Advance the clock and run the Core's timers (Core.Tick).
//	request owner=ID [seq=N] [ack=N] [held=(L, …)] [compact] [leaving]
//	        [handed=(L>TO, …)] [draining] [inc=N]
//	    The Owner sends a LeaseRequest (Core.StepLease). By default it is the
//	    Owner's next request: the next Seq, acknowledging the last response it
//	    heard, listing everything it holds. Each argument overrides one field;
//	    compact sends HeldAsAcked instead of the list; handed reports the
//	    handover of lease L to Owner TO's current run.
//	deliver [owner=ID] [n=N | seq=N]
//	    Deliver the Manager's messages in flight to the Owner (all Owners if
//	    none is named), in the order sent; or only the first n; or only the
//	    one numbered seq, overtaking those sent before it.
//	drop owner=ID [n=N | seq=N]
//	    Lose the Owner's messages in flight (or the first n, or one).
//	restart owner=ID
//	    The Owner's process restarts: a new incarnation that holds nothing.
//	resume term=T
//	    A new leader takes over: the Manager core is rebuilt by Resume from
//	    the replicated State, its sessions numbering their messages from
//	    BT = T·2³² + 2²⁴, as a Replica's first takeover in term T does. The
//	    old leader is gone; its messages in flight are still delivered.
//	table
//	    Print the lease table.
//	drain owner=ID | undrain owner=ID | forget owner=ID | owners
//	    An operator's requests (golden_admin_test.go): leasehold drain,
//	    drain --cancel and forget; owners prints the replicated records.
//
// Every command prints what it made the Manager do, in the order a driver
// must do it: first the replicated changes ("change …", with the LSN each
// table change gets), then the messages sent ("M → a …"). Messages to an
// Owner wait in flight until delivered or dropped. A sequence number of the
// leader resumed in term T is written BT+n.
//
// # The Owners
//
// The Owners are models, reduced to their messages, of the rules an
// owner.Core follows: a response is taken only if it is addressed to this
// run, its Seq is above every Seq heard, and it acknowledges the Owner's
// latest request (otherwise it raced: its Seq is still recorded as heard, and
// its grants of ranges the Owner does not hold are taken up, since the
// Owner's next request acknowledges it). A RenewHeld response is expanded with the Held of the request it
// acknowledges. A taken response's list becomes what the Owner holds: grants
// are taken, a renewal only of a lease held under the same LGN over the whole
// range (otherwise it is refused), and what the list omits is given up
// (recalled). The models have no clock: a script lets a lease run out by not
// renewing it.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/leasetable"
	"github.com/leasehold/leasehold/protocol"
)

func TestGolden(t *testing.T) {
	datadriven.Walk(t, "testdata/golden", func(t *testing.T, path string) {
		g := &golden{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return g.run(t, d)
		})
	})
}

// goldenStart is t=0 of every script.
var goldenStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// golden is one script's world: a Manager core, the replicated State its
// changes are applied to (as a replica applies committed entries), and the
// Owners with the messages in flight to them.
type golden struct {
	cfg      CoreConfig
	c        *Core
	applied  *State // the replicated State: every change the core made, applied
	now      time.Duration
	bases    map[uint64]uint64 // the session base of each resumed leader, by term
	owners   map[string]*goldenOwner
	inflight map[string][]*protocol.LeaseResponse
	out      *strings.Builder
}

// goldenOwner is an Owner reduced to its messages (see the file comment).
type goldenOwner struct {
	id    string
	inc   uint64
	seq   uint64 // the last request sent
	heard uint64 // the highest response Seq heard
	epoch uint64 // the epoch of the last response heard
	held  []protocol.Lease
	sent  map[uint64][]protocol.Lease // the Held of each request, by Seq
}

func (g *golden) run(t *testing.T, d *datadriven.TestData) string {
	t.Helper()
	g.out = &strings.Builder{}
	if d.Cmd != "core" && g.c == nil {
		d.Fatalf(t, "%s before core", d.Cmd)
	}
	switch d.Cmd {
	case "core":
		g.core(t, d)
	case "tick":
		g.tick(t, d)
	case "request":
		g.request(t, d)
	case "deliver":
		g.deliver(t, d, true)
	case "drop":
		g.deliver(t, d, false)
	case "restart":
		o := g.owner(g.arg(t, d, "owner"))
		*o = goldenOwner{id: o.id, inc: o.inc + 1}
		g.printf("%s restarts as incarnation %d, holding nothing\n", o.id, o.inc)
	case "resume":
		g.resume(t, d)
	case "table":
		g.printTable()
	default:
		if !g.admin(t, d) { // golden_admin_test.go
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
	}
	if g.c != nil {
		g.ready(t, d)
	}
	return g.out.String()
}

func (g *golden) printf(format string, args ...any) { fmt.Fprintf(g.out, format, args...) }

func (g *golden) at() time.Time { return goldenStart.Add(g.now) }

// arg returns the single value of a required argument.
func (g *golden) arg(t *testing.T, d *datadriven.TestData, key string) string {
	t.Helper()
	a, ok := d.Arg(key)
	if !ok || len(a.Vals) != 1 {
		d.Fatalf(t, "%s needs %s=VALUE", d.Cmd, key)
	}
	return a.Vals[0]
}

func (g *golden) core(t *testing.T, d *datadriven.TestData) {
	t.Helper()
	cfg := CoreConfig{Timing: protocol.Fast(), Epoch: 1, Seed: 1, MembershipEvery: -1}
	pieces := 4
	for _, a := range d.CmdArgs {
		v := a.SingleVal(t)
		var err error
		switch a.Key {
		case "epoch":
			cfg.Epoch, err = strconv.ParseUint(v, 10, 64)
		case "seed":
			cfg.Seed, err = strconv.ParseUint(v, 10, 64)
		case "pieces":
			pieces, err = strconv.Atoi(v)
		case "handover":
			if v == "off" {
				cfg.Handover = -1
			} else {
				cfg.Handover, err = time.ParseDuration(v)
			}
		case "membership":
			cfg.MembershipEvery, err = time.ParseDuration(v)
		default:
			d.Fatalf(t, "core: unknown argument %q", a.Key)
		}
		if err != nil {
			d.Fatalf(t, "core %s: %v", a.Key, err)
		}
	}
	cfg.Policy = assign.Fixed{Pieces: pieces}
	g.cfg = cfg
	g.c = NewCore(cfg, goldenStart)
	g.applied = NewState(cfg.Timing.LogRetention)
	g.owners = map[string]*goldenOwner{}
	g.inflight = map[string][]*protocol.LeaseResponse{}
	tm := cfg.Timing
	g.printf("timing: OwnerLease %v, Renew %v, ManagerLease %v\n", tm.OwnerLease, tm.Renew, tm.ManagerLease)
	g.printf("policy: %d pieces dealt round-robin to the members\n", pieces)
	switch {
	case cfg.Handover < 0:
		g.printf("planned moves off: a moving range is recalled\n")
	case cfg.Handover == 0:
		g.printf("planned moves: a handover is given %v\n", tm.OwnerLease)
	default:
		g.printf("planned moves: a handover is given %v\n", cfg.Handover)
	}
}

func (g *golden) tick(t *testing.T, d *datadriven.TestData) {
	t.Helper()
	if len(d.CmdArgs) != 1 {
		d.Fatalf(t, "tick +DURATION or tick to=DURATION")
	}
	a := d.CmdArgs[0]
	var to time.Duration
	switch {
	case strings.HasPrefix(a.Key, "+") && len(a.Vals) == 0:
		dur, err := time.ParseDuration(a.Key[1:])
		if err != nil {
			d.Fatalf(t, "tick: %v", err)
		}
		to = g.now + dur
	case a.Key == "to":
		dur, err := time.ParseDuration(a.SingleVal(t))
		if err != nil {
			d.Fatalf(t, "tick: %v", err)
		}
		to = dur
	default:
		d.Fatalf(t, "tick +DURATION or tick to=DURATION")
	}
	if to < g.now {
		d.Fatalf(t, "tick to %v: the clock is at %v already", to, g.now)
	}
	g.now = to
	g.printf("t=%v\n", g.now)
	g.c.Tick(g.at())
}

func (g *golden) owner(id string) *goldenOwner {
	o := g.owners[id]
	if o == nil {
		o = &goldenOwner{id: id, inc: 1}
		g.owners[id] = o
	}
	return o
}

func (g *golden) request(t *testing.T, d *datadriven.TestData) {
	t.Helper()
	o := g.owner(g.arg(t, d, "owner"))
	req := &protocol.LeaseRequest{
		Namespace: DefaultNamespace, Owner: o.id, Addr: o.id + ":7000", Incarnation: o.inc,
		Seq: o.seq + 1, AckEpoch: o.epoch, AckSeq: o.heard, Held: slices.Clone(o.held),
	}
	for _, a := range d.CmdArgs {
		var err error
		switch a.Key {
		case "owner":
		case "seq":
			req.Seq, err = g.parseSeq(a.SingleVal(t))
		case "ack":
			req.AckSeq, err = g.parseSeq(a.SingleVal(t))
		case "inc":
			req.Incarnation, err = strconv.ParseUint(a.SingleVal(t), 10, 64)
		case "held":
			req.Held = nil
			for _, v := range a.Vals {
				if v == "" {
					continue
				}
				l, err := parseLease(v)
				if err != nil {
					d.Fatalf(t, "held: %v", err)
				}
				req.Held = append(req.Held, l)
			}
		case "compact":
			req.HeldAsAcked, req.Held = true, nil
		case "leaving":
			req.Leaving = true
		case "draining":
			req.Draining = true
		case "handed":
			for _, v := range a.Vals {
				lease, to, ok := strings.Cut(v, ">")
				if !ok {
					d.Fatalf(t, "handed: %q is not LEASE>OWNER", v)
				}
				l, err := parseLease(lease)
				if err != nil {
					d.Fatalf(t, "handed: %v", err)
				}
				req.Handed = append(req.Handed, protocol.Handed{Range: l.Range, LGN: l.LGN, To: to, Incarnation: g.owner(to).inc})
			}
		default:
			d.Fatalf(t, "request: unknown argument %q", a.Key)
		}
		if err != nil {
			d.Fatalf(t, "request %s: %v", a.Key, err)
		}
	}
	if req.Incarnation == o.inc {
		o.seq = max(o.seq, req.Seq)
		if o.sent == nil {
			o.sent = map[uint64][]protocol.Lease{}
		}
		held := req.Held
		if req.HeldAsAcked {
			held = o.held // what the Owner holds, which the flag stands for
		}
		o.sent[req.Seq] = slices.Clone(held)
	}
	g.printf("%s → M  %s\n", o.id, g.describeRequest(req))
	if err := g.c.StepLease(g.at(), req); err != nil {
		g.printf("error: %v\n", err)
	}
}

func (g *golden) describeRequest(req *protocol.LeaseRequest) string {
	var b strings.Builder
	if req.Incarnation != 1 || g.owner(req.Owner).inc != 1 {
		fmt.Fprintf(&b, "inc=%d ", req.Incarnation)
	}
	fmt.Fprintf(&b, "seq=%s ack=%s", g.seqString(req.Seq), g.seqString(req.AckSeq))
	if req.HeldAsAcked {
		b.WriteString(" HeldAsAcked")
	} else {
		fmt.Fprintf(&b, " held=(%s)", leaseList(req.Held, false))
	}
	for _, h := range req.Handed {
		fmt.Fprintf(&b, " handed %s#%d to %s", rangeString(h.Range), h.LGN, h.To)
	}
	if req.Leaving {
		b.WriteString(" leaving")
	}
	if req.Draining {
		b.WriteString(" draining")
	}
	return b.String()
}

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

func (g *golden) resume(t *testing.T, d *datadriven.TestData) {
	t.Helper()
	var term uint64
	d.ScanArgs(t, "term", &term)
	if term == 0 || term >= 1<<31 {
		d.Fatalf(t, "resume: term %d out of range", term)
	}
	if g.bases[term] != 0 {
		d.Fatalf(t, "resume: term %d has a leader already", term)
	}
	if g.bases == nil {
		g.bases = map[uint64]uint64{}
	}
	g.bases[term] = term<<32 | 1<<24
	g.printf("leader of term %d takes over the replicated state at LSN %d; its sessions number from B%d\n",
		term, g.applied.Table(DefaultNamespace).LSN(), term)
	g.c = Resume(g.cfg, g.applied, g.bases[term], g.at())
}

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
	if ch.NS != DefaultNamespace {
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
		return s
	case OpForget:
		return fmt.Sprintf("forget owner %s%s", ch.Owner, ns)
	case OpDesired:
		return fmt.Sprintf("desired assignment%s: %d segments", ns, len(ch.Desired))
	case OpPeer:
		return fmt.Sprintf("replica %d at %q", ch.Peer, ch.Addr)
	}
	return fmt.Sprintf("%+v", ch)
}

func (g *golden) printTable() {
	for _, s := range g.c.Table(DefaultNamespace).Segments() {
		g.printf("%s %s\n", rangeString(s.Range), entryString(s.Entry))
	}
	g.printf("LSN %d\n", g.c.Table(DefaultNamespace).LSN())
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

const sixteenth = 1 << 60

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
