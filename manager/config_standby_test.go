package manager

import (
	"strings"
	"testing"

	"github.com/leasehold/leasehold/protocol"
)

// TestStandbysValidate: Standbys names served namespaces only, with 0 or
// 1 standby per range, and an error naming the field and the limit.
func TestStandbysValidate(t *testing.T) {
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
