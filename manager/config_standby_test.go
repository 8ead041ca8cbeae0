package manager

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/protocol"
)

// TestStandbysValidate: Standbys names served namespaces only, with 0 or
// 1 standby per range, and an error naming the field and the limit.
func TestStandbysValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    map[string]int
		want string // "" when valid
	}{
		{"default", map[string]int{protocol.DefaultNamespace: 1}, ""},
		{"another served", map[string]int{"queues": 1}, ""},
		{"off", map[string]int{"queues": 0}, ""},
		{"not served", map[string]int{"nope": 1}, `namespace "nope" is not served`},
		{"two", map[string]int{"queues": 2}, "want 0 to 1 (lease.MaxStandbys)"},
		{"negative", map[string]int{"queues": -1}, "want 0 to 1"},
	} {
		c := &Config{Insecure: true, Timing: protocol.Fast(), Namespaces: []string{"queues"}, Standbys: tc.s}
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Standbys")):
			t.Errorf("%s: got %v, want an error on Standbys containing %q", tc.name, err, tc.want)
		}
	}
}

// TestCountStandbys: status counts, per Owner, the leases it is standby
// for and how many of them are in sync.
func TestCountStandbys(t *testing.T) {
	t.Parallel()
	owners := []protocol.OwnerInfo{{ID: "a"}, {ID: "b"}}
	countStandbys(owners, []protocol.StandbyInfo{{LGN: 1, Holder: "a", Standby: "b", InSync: true},
		{LGN: 2, Holder: "a", Standby: "b"}, {LGN: 3, Holder: "b", Standby: "a"}, {LGN: 4, Holder: "b"}})
	if a, b := owners[0], owners[1]; a.StandbyRanges != 1 || a.StandbyInSync != 0 || b.StandbyRanges != 2 || b.StandbyInSync != 1 {
		t.Fatalf("counted %+v", owners)
	}
}
