package lookup

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/protocol"
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

// TestValidate: Validate refuses what New would, naming the field in a
// *leasehold.ConfigError (unsafe timings in a *protocol.TimingError), and
// checks a copy: the caller's Config keeps its empty defaults.
func TestValidate(t *testing.T) {
	ok := Config{Connection: leasehold.Connection{Manager: "127.0.0.1:7400", Insecure: true}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v): %v", ok, err)
	}
	if ok.Namespace != "" || ok.Logger != nil {
		t.Errorf("Validate changed its receiver: %+v", ok)
	}
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Connection: leasehold.Connection{Insecure: true}}, "Manager"},
		{Config{Connection: leasehold.Connection{Insecure: true, Manager: "a:1", Managers: []string{"b"}}}, "Managers[0]"},
		{Config{Connection: leasehold.Connection{Insecure: true, Manager: "a:1", Namespace: "\xff"}}, "Namespace"},
	} {
		var ce *leasehold.ConfigError
		if err := tc.cfg.Validate(); !errors.As(err, &ce) || ce.Package != "lookup" || ce.Field != tc.field {
			t.Errorf("Validate(%+v): %v, want a *leasehold.ConfigError on lookup's %s", tc.cfg, err, tc.field)
		}
	}
	tm := protocol.Fast()
	tm.Renew = 0
	var te *protocol.TimingError
	if err := (Config{Connection: leasehold.Connection{Insecure: true, Manager: "a:1", Timing: tm}}).Validate(); !errors.As(err, &te) {
		t.Errorf("Validate with Renew 0: %v, want a *protocol.TimingError", err)
	}
	if err := (Config{Connection: leasehold.Connection{Manager: "a:1"}}).Validate(); err == nil || !strings.Contains(err.Error(), "no TLS setting") {
		t.Errorf("Validate without a TLS setting: %v", err)
	}
}
