package lease

import (
	"github.com/leasehold/leasehold/protocol"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// admin runs the golden commands of an operator (see golden_test.go's
// language): drain, undrain (drain --cancel), forget, and owners, which
// prints the Owners' replicated records. It reports whether d was one.
func (g *golden) admin(t *testing.T, d *datadriven.TestData) bool {
	t.Helper()
	var err error
	switch d.Cmd {
	case "drain":
		err = g.c.Drain(g.at(), protocol.DefaultNamespace, g.arg(t, d, "owner"))
	case "undrain":
		err = g.c.Undrain(g.at(), protocol.DefaultNamespace, g.arg(t, d, "owner"))
	case "forget":
		err = g.c.Forget(g.at(), protocol.DefaultNamespace, g.arg(t, d, "owner"))
	case "owners":
		recs := g.c.State().Owners(protocol.DefaultNamespace)
		if len(recs) == 0 {
			g.printf("no owners recorded\n")
		}
		for _, id := range sortedOwnerIDs(recs) {
			g.printf("%s\n", g.describeChange(Change{Op: OpOwner, NS: protocol.DefaultNamespace, Owner: id, Record: recs[id]}, 0))
		}
	default:
		return false
	}
	if err != nil {
		g.printf("error: %v\n", err)
	}
	return true
}
