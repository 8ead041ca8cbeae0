package manager

import (
	"fmt"

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
