package owner_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/owner"
)

// TestValidate: Validate refuses what New would, naming the field in a
// *leasehold.ConfigError, and checks a copy: the caller's Config keeps its
// empty defaults.
func TestValidate(t *testing.T) {
	conn := leasehold.Connection{Manager: "127.0.0.1:7400", Insecure: true}
	ok := owner.Config{Connection: conn, ID: "kv-1", Addr: "10.0.0.7:8080"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v): %v", ok, err)
	}
	if ok.Namespace != "" || ok.Logger != nil {
		t.Errorf("Validate changed its receiver: %+v", ok)
	}
	for _, tc := range []struct {
		cfg   owner.Config
		field string
		want  string
	}{
		{owner.Config{Connection: conn, Addr: "a:1"}, "ID", "owner: Config.ID is required"},
		{owner.Config{Connection: conn, ID: "kv-1"}, "Addr", "owner: Config.Addr (where frontends reach this owner) is required"},
		{owner.Config{Connection: conn, ID: strings.Repeat("x", 5000), Addr: "a:1"}, "ID", "must be valid UTF-8 of at most"},
		{owner.Config{Connection: conn, ID: "kv-1", Addr: "a:1", Capacity: -1}, "Capacity", "owner: Config.Capacity -1: want a number in [0, "},
		{owner.Config{Connection: conn, ID: "kv-1", Addr: "a:1", Capacity: math.NaN()}, "Capacity", "owner: Config.Capacity NaN"},
		{owner.Config{Connection: conn, ID: "kv-1", Addr: "a:1", Zone: strings.Repeat("z", 65)}, "Zone", "owner: Config.Zone is 65 bytes long; at most 64 allowed (protocol.MaxZoneLen)"},
		{owner.Config{Connection: leasehold.Connection{Insecure: true}, ID: "kv-1", Addr: "a:1"}, "Manager", "owner: Config.Manager (the Manager's address"},
	} {
		err := tc.cfg.Validate()
		var ce *leasehold.ConfigError
		if !errors.As(err, &ce) || ce.Package != "owner" || ce.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(ID %.10q, Addr %q, Capacity %v): %v; want a *leasehold.ConfigError on %s saying %q", tc.cfg.ID, tc.cfg.Addr, tc.cfg.Capacity, err, tc.field, tc.want)
		}
	}
	if err := (owner.Config{Connection: leasehold.Connection{Manager: "a:1"}, ID: "kv-1", Addr: "a:1"}).Validate(); err == nil || !strings.Contains(err.Error(), "no TLS setting") {
		t.Errorf("Validate without a TLS setting: %v", err)
	}
}
