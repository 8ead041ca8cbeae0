package owner_test

import (
	"context"
	"fmt"
	"net"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// startManager runs a Manager on a free loopback port, as 'leasehold
// manager --timings fast' would, and returns its address and a stop func.
func startManager() (string, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast()})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, lis); close(done) }()
	return lis.Addr().String(), func() { cancel(); <-done }
}

func Example() {
	addr, stop := startManager()
	defer stop()
	ctx := context.Background()

	o, err := owner.New(ctx, owner.Config{Connection: leasehold.Connection{Insecure: true, Manager: addr}, ID: "kv-1", Addr: "127.0.0.1:8080"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Close(ctx) // leave at once: the ranges move without waiting for the lease

	// A new Manager grants nothing for one manager lease, so at first this
	// server owns no key and turns requests away; the frontend retries.
	k := keyspace.KeyOf("alice")
	if _, ok := o.CheckLeaseNow(k); !ok {
		fmt.Println("not the owner of alice: the frontend retries after a short backoff")
	}
	// Output: not the owner of alice: the frontend retries after a short backoff
}

func ExampleConfig_validation() {
	_, err := owner.New(context.Background(), owner.Config{Connection: leasehold.Connection{Insecure: true, Manager: "127.0.0.1:7400"}, ID: "kv-1"})
	fmt.Println(err)
	// Output: owner: Config.Addr (where frontends reach this owner) is required
}
