package lookup_test

import (
	"context"
	"fmt"
	"net"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/manager"
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

	l, err := lookup.New(ctx, lookup.Config{
		Connection: leasehold.Connection{Insecure: true, Manager: addr},
		OnLoss: func(loss lookup.Loss) {
			// Ask the clients whose state lay in loss.Ranges to republish it.
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	if err := l.WaitSynced(ctx); err != nil { // the first copy of the table
		fmt.Println(err)
		return
	}
	// No server has joined, so no key has an owner yet.
	if _, ok := l.Lookup(keyspace.KeyOf("alice")); !ok {
		fmt.Println("no owner for alice yet: retry after a short backoff")
	}
	fmt.Println("copy of the table at LSN", l.LSN())
	// Output:
	// no owner for alice yet: retry after a short backoff
	// copy of the table at LSN 0
}
