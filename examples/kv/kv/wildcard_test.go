package kv

import (
	"context"
	"strings"
	"testing"
)

// TestWildcardListenNeedsIDAndAdvertise: kv serve --listen :8080, as a
// container runs it, took the ID "[::]:8080" on every pod and advertised
// 127.0.0.1:8080, which no other pod reaches. It is refused before
// anything listens, naming what to give; with --id and --advertise from the
// pod it serves.
func TestWildcardListenNeedsIDAndAdvertise(t *testing.T) {
	for _, c := range []struct {
		cfg  ServerConfig
		want string // empty: accepted
	}{
		{ServerConfig{Listen: ":0"}, "needs an ID of its own"},
		{ServerConfig{Listen: "0.0.0.0:0", ID: "kv-0"}, "needs the address clients reach it at"},
		{ServerConfig{Listen: "[::]:0", Advertise: "10.0.0.7:8080"}, "needs an ID of its own"},
		{ServerConfig{Listen: "127.0.0.1:0", ID: "[::]:8080"}, "is a wildcard address"},
		{ServerConfig{Listen: "127.0.0.1:0", ID: ":8080"}, "is a wildcard address"},
		{ServerConfig{Listen: "127.0.0.1:0", Advertise: "0.0.0.0:8080"}, "is a wildcard"},
		{ServerConfig{Listen: "127.0.0.1:0"}, ""},
		{ServerConfig{Listen: ":0", ID: "kv-0", Advertise: "127.0.0.1:8080"}, ""},
	} {
		c.cfg.Manager, c.cfg.Insecure = "127.0.0.1:1", true
		s, err := NewServer(context.Background(), c.cfg)
		if s != nil {
			if strings.HasPrefix(s.ID(), "[::]") || strings.HasPrefix(s.Advertise(), "[::]") || strings.HasPrefix(s.Advertise(), "0.0.0.0") {
				t.Errorf("%+v: ID %q, advertising %q", c.cfg, s.ID(), s.Advertise())
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // no Manager to drain to: stop at once
			s.Close(ctx)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("listen %q id %q advertise %q: %v", c.cfg.Listen, c.cfg.ID, c.cfg.Advertise, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("listen %q id %q advertise %q: %v, want an error saying %q", c.cfg.Listen, c.cfg.ID, c.cfg.Advertise, err, c.want)
		}
	}
}
