package gateway

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
)

// TestValidate: Validate refuses what New would, naming the field in a
// *leasehold.ConfigError, and checks a copy: the caller's routes and
// limits keep their empty defaults.
func TestValidate(t *testing.T) {
	ok := Config{Insecure: true, Manager: "127.0.0.1:7400", Routes: []Route{{Key: "path:1"}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if ok.Routes[0].Prefix != "" || ok.MaxKeyBytes != 0 || ok.Logger != nil {
		t.Errorf("Validate changed its receiver: %+v", ok)
	}
	with := func(f func(*Config)) Config {
		c := Config{Insecure: true, Manager: "127.0.0.1:7400", Routes: []Route{{Key: "path:1"}}}
		f(&c)
		return c
	}
	for _, tc := range []struct {
		cfg   Config
		field string
		want  string
	}{
		{with(func(c *Config) { c.Routes = nil }), "Routes", "gateway: Config.Routes is empty"},
		{with(func(c *Config) { c.Manager = "" }), "Manager", "gateway: Config.Manager is required"},
		{with(func(c *Config) { c.MaxQueue = -1 }), "MaxQueue", "gateway: Config.MaxQueue -1 must not be negative"},
		{with(func(c *Config) { c.MaxBodyBytes = -1 }), "MaxBodyBytes", "must not be negative"},
		{with(func(c *Config) { c.MaxCopyAge = -1 }), "MaxCopyAge", "must not be negative"},
		{with(func(c *Config) { c.Webhooks = []string{"https://a/", "ftp://x"} }), "Webhooks[1]", "want an http:// or https:// URL"},
		{with(func(c *Config) { c.Routes = append(c.Routes, Route{Key: "header:x", Prefix: "kv"}) }), "Routes[1]", `prefix "kv" must start with /`},
		{with(func(c *Config) { c.Routes = append(c.Routes, Route{Key: "header:x"}) }), "Routes[1]", `repeats another route's host "" and prefix "/"`},
	} {
		err := tc.cfg.Validate()
		var ce *leasehold.ConfigError
		if !errors.As(err, &ce) || ce.Package != "gateway" || ce.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v; want a *leasehold.ConfigError on %s saying %q", err, tc.field, tc.want)
		}
	}
	if err := with(func(c *Config) { c.Insecure = false }).Validate(); err == nil || !strings.Contains(err.Error(), "no TLS setting") {
		t.Errorf("Validate without a TLS setting: %v", err)
	}
}
