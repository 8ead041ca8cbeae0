package manager

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/protocol"
)

// TestRoleValidate: a read replica must join a running group, and a role
// is one of the two; the error names Config.Role.
func TestRoleValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		role string
		join bool
		want string // "" when valid
	}{
		{"", false, ""},
		{RoleVoter, false, ""},
		{RoleReadReplica, true, ""},
		{RoleReadReplica, false, "joins a running group"},
		{"learner", true, `"learner": want "voter" or "read-replica"`},
	} {
		c := &Config{Insecure: true, Timing: protocol.Fast(), Role: tc.role, Join: tc.join}
		if tc.join {
			c.ID, c.Peers = 2, []Peer{{ID: 1, Addr: "127.0.0.1:7400"}}
		}
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("role %q join %v: %v", tc.role, tc.join, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Role")):
			t.Errorf("role %q join %v: got %v, want an error naming Role and containing %q", tc.role, tc.join, err, tc.want)
		}
	}
}
