package owner

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/faults"
	"github.com/leasehold/leasehold/protocol"
)

// TestHandoverDoneAfterDeadline: a handover reported done at or after its
// deadline counts as given up. The range stays held until the Manager
// recalls it, and no request reports it handed: past the deadline the
// application takes writes on the range again, which the copy it sent
// does not have, so a migrated grant would lose them unreported. Just
// before the deadline the handover goes through.
func TestHandoverDoneAfterDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		after  time.Duration // from the deadline
		faults *faults.Set
		handed bool
	}{
		{"just before", -time.Millisecond, nil, true},
		{"at", 0, nil, false},
		{"after", 300 * time.Millisecond, nil, false},
		{"after, rule broken", 300 * time.Millisecond, &faults.Set{LateHandoverDone: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := withHandovers(t, true)
			if tc.faults != nil {
				c.broken = *tc.faults
			}
			req := one(t, tick(c, at(tm.Renew)).reqs)
			r := step(c, at(tm.Renew+10*ms), asking(resp(2, req.Seq, renew(lo, 3), renew(hi, 4)), handover(hi, 4)))
			h := r.chs[0].Handovers[0]
			done := h.Deadline.Add(tc.after)
			c.HandoverDone(done, h, true)
			req = one(t, tick(c, done).reqs)
			_, kept := c.CheckLeaseNow(done, hi.Start)
			if tc.handed {
				if kept || !slices.Equal(req.Handed, []protocol.Handed{{Range: hi, LGN: 4, To: "o2", Incarnation: 9}}) {
					t.Fatalf("held %v, handed %v: want hi handed over", kept, req.Handed)
				}
				return
			}
			if !kept || len(req.Handed) != 0 {
				t.Fatalf("held %v, handed %v: want hi kept, nothing handed", kept, req.Handed)
			}
			if got := listed(t, c, req); !slices.Equal(got, []protocol.Lease{held(lo, 3), held(hi, 4)}) {
				t.Fatalf("request lists %v, want both leases", got)
			}
		})
	}
}
