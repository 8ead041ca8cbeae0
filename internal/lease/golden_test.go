package lease

// The golden interaction tests: scripts under testdata/golden of messages and
// clock readings in, and the Manager core's messages and replicated changes
// out, in the style of etcd raft's interaction tests. Each file is a story a
// reader can learn the protocol from; its comments say what each step shows.
//
//	go test ./internal/lease -run TestGolden             # check every script
//	go test ./internal/lease -run TestGolden/race -v     # one script, echoing it
//	go test ./internal/lease -run TestGolden -rewrite    # rewrite the expected output
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
//	core [epoch=N] [pieces=N] [handover=off|DUR] [membership=DUR] [seed=N] [standbys=N]
//	    A new Manager (NewCore) at t=0 with no state. The policy is
//	    assign.Fixed: pieces (default 4) dealt round-robin to the members in
//	    ID order. handover (default one OwnerLease) is how long a planned
//	    move waits for the state; off recalls instead. membership paces the
//	    planning of joins and leaves (default: at once). standbys is the
//	    namespace's standbys per range (docs/design.md rules 21-24): pairings
//	    print as "standby of a#1: b zone y s1", sN being the standby number.
//	tick +DUR | tick to=DUR
//	    Advance the clock and run the Core's timers (Core.Tick).
//	request owner=ID [seq=N] [ack=N] [held=(L, …)] [compact] [leaving]
//	        [handed=(L>TO, …)] [draining] [inc=N] [zone=Z] [insync=(LGN/SGN, …)]
//	    The Owner sends a LeaseRequest (Core.StepLease). By default it is the
//	    Owner's next request: the next Seq, acknowledging the last response it
//	    heard, listing everything it holds. Each argument overrides one field;
//	    compact sends HeldAsAcked instead of the list; handed reports the
//	    handover of lease L to Owner TO's current run; zone gives the
//	    Owner's failure domain (kept for its later requests); insync reports
//	    the Owner's standby copy of lease LGN filled under standby number SGN.
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
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
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
	cfg      Settings
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
	zone  string                      // said in every request once given
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
		g.restart(t, d)
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

const sixteenth = 1 << 60
