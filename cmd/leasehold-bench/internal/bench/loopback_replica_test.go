package bench

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
)

// TestLoopbackReadReplica starts the loopback point's Manager and a read
// replica beside it, in plaintext and with TLS, as the loopback ladder with
// read replicas will: cluster status names it a read replica of the
// Manager's group.
func TestLoopbackReadReplica(t *testing.T) {
	smokeOnlyWithAll(t)
	ctx := context.Background()
	bin, err := buildLeasehold(ctx, t.TempDir(), "./cmd/leasehold")
	if err != nil {
		t.Fatal(err)
	}
	for _, tls := range []bool{false, true} {
		var trust *loopbackTrust
		if tls {
			if trust, err = newLoopbackTrust(0, 0); err != nil {
				t.Fatal(err)
			}
			defer trust.close()
		}
		leader, err := startManager(ctx, bin, "", "fast", trust, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rr, err := startReadReplica(ctx, bin, "", "fast", trust, "127.0.0.1:0", leader, 2)
		if err != nil {
			leader.stop()
			t.Fatal(err)
		}
		out, err := exec.Command(bin, append([]string{"cluster", "status", "--json", "--manager", leader.addr}, trust.managerArgs()...)...).Output()
		rr.stop()
		leader.stop()
		if err != nil {
			t.Fatalf("tls %v: cluster status: %v", tls, err)
		}
		var s struct {
			Managers []struct {
				ID   uint64 `json:"id"`
				Role string `json:"role"`
			} `json:"managers"`
		}
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatal(err)
		}
		roles := map[uint64]string{}
		for _, m := range s.Managers {
			roles[m.ID] = m.Role
		}
		if roles[1] != "leader" || roles[2] != "read-replica" {
			t.Fatalf("tls %v: cluster status: %s", tls, out)
		}
	}
}
