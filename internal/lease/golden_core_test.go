// The golden command "core": a new Manager core.

package lease

import (
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/leasehold/leasehold/assign"
	"github.com/leasehold/leasehold/protocol"
)

func (g *golden) core(t *testing.T, d *datadriven.TestData) {
	t.Helper()
	cfg := Settings{Timing: protocol.Fast(), Epoch: 1, Seed: 1, MembershipEvery: -1}
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
		case "standbys":
			var k int
			k, err = strconv.Atoi(v)
			cfg.Standbys = map[string]int{protocol.DefaultNamespace: k}
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
	if k := cfg.Standbys[protocol.DefaultNamespace]; k > 0 {
		g.printf("standbys: %d per range\n", k)
	}
	switch {
	case cfg.Handover < 0:
		g.printf("planned moves off: a moving range is recalled\n")
	case cfg.Handover == 0:
		g.printf("planned moves: a handover is given %v\n", tm.OwnerLease)
	default:
		g.printf("planned moves: a handover is given %v\n", cfg.Handover)
	}
}
