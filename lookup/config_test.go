package lookup

import (
	"context"
	"github.com/leasehold/leasehold"
	"strings"
	"testing"
)

// TestNewRefusesWhatTheManagerWould: a configuration the Manager would
// refuse fails at New with the field named, instead of a Lookup that
// retries forever against a Manager that keeps ending its stream.
func TestNewRefusesWhatTheManagerWould(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.Manager"},
		{Config{Connection: leasehold.Connection{Manager: "127.0.0.1:7400", Namespace: strings.Repeat("n", 2000)}}, "Config.Namespace"},
		{Config{Connection: leasehold.Connection{Manager: "127.0.0.1:7400", Namespace: "\xff"}}, "Config.Namespace"},
	} {
		l, err := New(context.Background(), tc.cfg)
		if err == nil {
			l.Close()
			t.Fatalf("New(%+v) succeeded", tc.cfg)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want it to name %s", err, tc.want)
		}
	}
}
