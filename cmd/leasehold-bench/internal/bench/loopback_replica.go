package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Read replicas beside the loopback point's Manager (docs/operations.md,
// "Read replicas"), started as an operator starts one: leasehold manager
// --role read-replica, empty, naming the leader in --peers; then
// leasehold cluster add --read-replica against the leader, which returns
// once the read replica has caught up. The leader is the point's Manager,
// replica 1, a group of one; read replicas take IDs 2 to maxReplicaID
// (the IDs loopbackTrust issues replica certificates for). A Lookup given
// the leader's and the read replicas' addresses (Connection.Manager,
// comma-separated) spreads over them by its own rule (internal/client
// spread.go); one given only the read replicas' stays off the leader.

// maxReplicaID is the highest replica ID a loopback point may start.
const maxReplicaID = 9

// MaxReadReplicas is how many read replicas a loopback point may start.
const MaxReadReplicas = maxReplicaID - 1

// startReadReplica starts read replica id of leader's group, its metrics
// on metricsAddr, and adds it to the group. The caller stops it
// (managerProc.stop) before the leader.
func startReadReplica(ctx context.Context, bin, profDir, profile string, trust *loopbackTrust, metricsAddr string,
	leader *managerProc, id uint64) (*managerProc, error) {
	if id < 2 || id > maxReplicaID {
		return nil, fmt.Errorf("read replica ID %d: want 2 to %d (1 is the leader)", id, maxReplicaID)
	}
	args := append(append([]string{"manager", "--role", "read-replica", "--id", fmt.Sprint(id), "--peers", "1=" + leader.addr,
		"--listen", "127.0.0.1:0", "--metrics-listen", metricsAddr}, trust.managerArgs()...),
		"--timings", profile, "--log-format", "json", "--log-level", "info")
	m, err := launchManager(ctx, bin, profDir, args)
	if err != nil {
		return nil, fmt.Errorf("read replica %d: %w", id, err)
	}
	add := exec.CommandContext(ctx, bin, append([]string{"cluster", "add", "--read-replica", fmt.Sprint(id), m.addr,
		"--manager", leader.addr}, trust.managerArgs()...)...)
	if out, err := add.CombinedOutput(); err != nil {
		m.stop()
		return nil, fmt.Errorf("leasehold cluster add --read-replica %d %s: %v: %s", id, m.addr, err, strings.TrimSpace(string(out)))
	}
	return m, nil
}

// startLoopbackReplica starts read replica id beside leader with a
// metrics listener of its own, and returns it with a reader of its
// metrics.
func startLoopbackReplica(ctx context.Context, bin, profile string, trust *loopbackTrust, leader *managerProc, id uint64) (*managerProc, *managerMetrics, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, nil, err
	}
	mm, err := newManagerMetrics(addr, trust)
	if err != nil {
		return nil, nil, err
	}
	m, err := startReadReplica(ctx, bin, "", profile, trust, addr, leader, id)
	return m, mm, err
}
