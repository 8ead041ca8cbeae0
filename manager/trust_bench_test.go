package manager_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// BenchmarkLiveReads measures CheckLeaseNow and Lookup on an Owner and a
// Lookup that hold a live session with a Manager over TCP, with and
// without mutual TLS: both are local reads of a published copy, so the
// transport must not show in them (compare with BenchmarkCheckLeaseNow and
// BenchmarkLookup, which have no session at all).
//
//	go test ./manager -run '^$' -bench LiveReads
func BenchmarkLiveReads(b *testing.B) {
	for _, mode := range []string{"plaintext", "tls"} {
		b.Run(mode, func(b *testing.B) {
			var dir string
			var src *certs.Source
			if mode == "tls" {
				dir = b.TempDir()
				ca, err := certs.CreateCA(dir, "", 0, false)
				if err != nil {
					b.Fatal(err)
				}
				for _, id := range []certs.Identity{{Role: certs.Replica, Name: "1"},
					{Role: certs.Owner, Name: "a", Namespaces: []string{"default"}}, {Role: certs.Lookup, Name: "l"}} {
					if _, err := certs.Create(dir, ca, id, []string{"127.0.0.1"}, 0); err != nil {
						b.Fatal(err)
					}
				}
				if src, err = certs.Open(dir, certs.Replica, "1"); err != nil {
					b.Fatal(err)
				}
			}
			tm := protocol.Fast()
			srv, err := manager.NewServer(manager.Config{Timing: tm, Certs: src})
			if err != nil {
				b.Fatal(err)
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, lis) }()
			defer func() { cancel(); <-done }()
			addr := lis.Addr().String()
			o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{Manager: addr, Timing: tm, CertsDir: dir}, ID: "a", Addr: "127.0.0.1:1"})
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close(context.Background())
			l, err := lookup.New(ctx, lookup.Config{Connection: leasehold.Connection{Manager: addr, Timing: tm, CertsDir: dir}})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			k := keyspace.KeyOf("k")
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				_, held := o.CheckLeaseNow(k)
				if _, routed := l.Lookup(k); held && routed {
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("no lease and route after 15s")
				}
			}
			b.Run("CheckLeaseNow", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					o.CheckLeaseNow(k)
				}
			})
			b.Run("Lookup", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					l.Lookup(k)
				}
			})
		})
	}
}
