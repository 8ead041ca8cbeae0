// The golden commands "restart" (an Owner) and "resume" (a new leader).

package lease

import (
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/leasehold/leasehold/protocol"
)

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
		term, g.applied.Table(protocol.DefaultNamespace).LSN(), term)
	g.c = Resume(g.cfg, g.applied, g.bases[term], g.at())
}

// restart is the command "restart owner=ID": the Owner restarts as its next
// incarnation, holding nothing.
func (g *golden) restart(t *testing.T, d *datadriven.TestData) {
	o := g.owner(g.arg(t, d, "owner"))
	*o = goldenOwner{id: o.id, inc: o.inc + 1}
	g.printf("%s restarts as incarnation %d, holding nothing\n", o.id, o.inc)
}
