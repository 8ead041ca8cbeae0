package manager

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

func TestReadLeaseValidate(t *testing.T) {
	t.Parallel()
	fast := func(l ReadLease) *Config { return &Config{Insecure: true, Timing: protocol.Fast(), ReadLease: l} }
	for _, tc := range []struct {
		name string
		c    *Config
		want string // "" when valid
	}{
		{"off", fast(ReadLease{}), ""},
		{"all, defaults", fast(ReadLease{All: true}), ""},
		{"subset", fast(ReadLease{Holders: []uint64{1, 3}}), ""},
		{"lengths without holders", fast(ReadLease{Duration: time.Second}), "no replica holds"},
		{"all and holders", fast(ReadLease{All: true, Holders: []uint64{1}}), "both set"},
		{"holder 0", fast(ReadLease{Holders: []uint64{0}}), "holder ID 0"},
		{"duplicate", fast(ReadLease{Holders: []uint64{2, 2}}), "named twice"},
		{"too short", fast(ReadLease{All: true, Duration: time.Millisecond}), "two Raft ticks"},
		{"renew too long", fast(ReadLease{All: true, Duration: time.Second, Renew: time.Second}), "shorter than Duration"},
		{"stalls past a lease", fast(ReadLease{All: true, Duration: 1500 * time.Millisecond}), "OwnerLease − Renew"},
	} {
		err := tc.c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	c := fast(ReadLease{All: true})
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if e := time.Duration(c.ElectionTicks) * c.RaftTick; c.ReadLease.Duration != e || c.ReadLease.Renew != e/4 {
		t.Errorf("defaults: Duration %s, Renew %s; want %s and %s", c.ReadLease.Duration, c.ReadLease.Renew, e, e/4)
	}
}
