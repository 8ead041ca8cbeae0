package bench

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
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

// TestSmokeLoopbackReadReplicas: with --read-replicas 2 the Lookups, thin
// ones sharing connections among them, are served by the read replicas
// only and the leader serves none; every process's use is reported; and
// the changes the leader applied under churn reach the Lookups through the
// read replicas, whose applies of them are found in their logs.
func TestSmokeLoopbackReadReplicas(t *testing.T) {
	smokeOnlyWithAll(t)
	t.Parallel()
	ctx := context.Background()
	bin, err := buildLeasehold(ctx, t.TempDir(), "./cmd/leasehold")
	if err != nil {
		t.Fatal(err)
	}
	plan := loopbackPlanFor(Options{Size: Smoke, Owners: 4, Lookups: 2 * loopbackFull, LookupsPerConn: 5, Churn: "on", ReadReplicas: 2})
	rs, err := runLoopbackPoint(ctx, bin, "", plan, plan.points[0])
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	var names []string
	served := 0.0
	for _, p := range r.procs {
		names = append(names, p.name)
		if p.cpu <= 0 || p.rss <= 0 {
			t.Errorf("%s: CPU %v, RSS %d", p.name, p.cpu, p.rss)
		}
		switch {
		case p.name == "leader" && p.lookups != 0:
			t.Errorf("the leader serves %v Lookups, want none", p.lookups)
		case p.name != "leader" && p.lookups > 0:
			served += p.lookups
		}
		if p.name == "leader" || p.name[:4] == "read" {
			if p.msgs <= 0 {
				t.Errorf("%s: %v msgs/s: its gRPC counters were not read", p.name, p.msgs)
			}
		}
	}
	want := []string{"leader", "read replica 2", "read replica 3", "driver (Lookups)", "driver (Owners)"}
	if !slices.Equal(names, want) {
		t.Fatalf("processes %v, want %v", names, want)
	}
	if served == 0 {
		t.Fatal("the read replicas serve no Lookups")
	}
	if len(r.propagation) == 0 {
		t.Fatalf("no change with a loss notification reached the Lookups (%d owner stops, %d not reached)", r.ownerEvents, r.unreached)
	}
	if len(r.replicaLag) == 0 {
		t.Fatalf("no read replica's apply was found for the %d changes the leader applied", len(r.propagation))
	}
}
