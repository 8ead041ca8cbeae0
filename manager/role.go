package manager

import (
	"fmt"
	"log/slog"

	"github.com/leasehold/leasehold"
)

// The roles a replica is started in (Config.Role, leasehold manager
// --role). RoleReadReplica is also the role a read replica reports in its
// status (ClusterInfo.Role), where the others report Raft's state.
const RoleVoter = "voter"

// validateRole checks Config.Role: a known role, and a read replica that
// joins a running group (it cannot found one: a group needs a voter).
func (c *Config) validateRole() error {
	switch c.Role {
	case "", RoleVoter:
		return nil
	case RoleReadReplica:
		if !c.Join {
			return &leasehold.ConfigError{Package: "manager", Field: "Role", Err: fmt.Errorf("a %s joins a running group (set Join and list the group in Peers): it never votes, so it cannot found one", RoleReadReplica)}
		}
		return nil
	}
	return &leasehold.ConfigError{Package: "manager", Field: "Role", Err: fmt.Errorf("%q: want %q or %q", c.Role, RoleVoter, RoleReadReplica)}
}

// checkRole logs, once each time it changes, a disagreement between the
// role this replica was started in and the one its group gave it: started
// with --role read-replica but added as a voter (cluster add without
// --read-replica: the leader promotes it), or started as a voter but added
// as a read replica. The group's is the one that holds; the log says how
// to make them agree.
func (l *loop) checkRole(ci ClusterInfo) {
	var member, voter, rr bool
	for _, p := range ci.Peers {
		if p.ID == l.s.cfg.ID {
			member, voter, rr = true, p.Voter, p.ReadReplica
		}
	}
	said := ""
	switch {
	case !member:
	case l.s.cfg.Role == RoleReadReplica && !rr:
		said = "started with --role read-replica, but the group has it as a voter (or a learner to promote): it votes once promoted. " +
			"To make it a read replica: leasehold cluster remove ID, then start it empty under a new ID and leasehold cluster add --read-replica"
	case l.s.cfg.Role != RoleReadReplica && rr && !voter:
		said = "the group has this replica as a read replica (leasehold cluster add --read-replica); start it with --role read-replica, " +
			"or promote it with leasehold cluster add ID ADDR (without --read-replica)"
	}
	if said != "" && said != l.roleSaid {
		l.s.cfg.Logger.Warn("replica role", slog.Uint64("id", l.s.cfg.ID), slog.String("why", said))
	}
	l.roleSaid = said
}
