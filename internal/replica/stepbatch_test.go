package replica

import (
	"testing"

	"github.com/leasehold/leasehold/internal/lease"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/leasehold/leasehold/assign"
)

// TestStepBatchLimit: StepBatch steps at most its limit (MaxStepBatch when
// the limit is out of range), takes nothing more from the queue, and
// drives once after the batch.
func TestStepBatchLimit(t *testing.T) {
	r, err := NewReplica(ReplicaConfig{ID: 1, Bootstrap: []Peer{{ID: 1, Addr: "m1:7400"}},
		Settings: Settings{Lease: lease.Settings{Timing: groupTiming, Policy: assign.Fixed{Pieces: 4}, Epoch: epoch, Seed: 1}, RaftTick: 25 * ms}}, base)
	if err != nil {
		t.Fatal(err)
	}
	d := &testDriver{now: base, send: func(*Ready) {}}
	if err := Drive(r, d); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ queued, limit, want int }{
		{300, 0, MaxStepBatch}, {300, MaxStepBatch + 1, MaxStepBatch}, {300, 5, 5}, {3, 10, 3}, {0, 10, 0},
	} {
		queued := c.queued
		n, err := StepBatch(r, d, c.limit, func() (raftpb.Message, bool) {
			if queued == 0 {
				return raftpb.Message{}, false
			}
			queued--
			// From a replica outside the group: refused, and still a
			// message stepped.
			return raftpb.Message{Type: raftpb.MsgHeartbeat, From: 9, To: 1, Term: 1}, true
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != c.want || queued != c.queued-c.want {
			t.Errorf("%d queued, limit %d: stepped %d and left %d, want %d and %d", c.queued, c.limit, n, queued, c.want, c.queued-c.want)
		}
	}
}
