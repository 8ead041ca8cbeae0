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

// replicate stands for the application's own request to its standby (kv
// uses POST /internal/standby over its peers' mutual TLS).
func replicate(addr, key string, value []byte, lease owner.LeaseNum, sgn protocol.SGN) error {
	return nil
}

// Example_standby shows the application's part of standby Owners
// (docs/standbys.md): the holder acknowledges a write only once its
// standby stored it under the pairing it checked, and the standby stores
// only what its fence accepts. It is compiled, not run: it needs a Manager
// with standbys and two Owners.
func Example_standby() {
	var o *owner.Owner // owner.New(ctx, owner.Config{…, Zone: "eu-west-1a"})
	store := map[string][]byte{}

	// Holder: a client's write on key.
	put := func(key string, value []byte) error {
		k := keyspace.KeyOf(key)
		n, ok := o.CheckLeaseNow(k)
		if !ok {
			return fmt.Errorf("not the owner")
		}
		p, ok := o.StandbyOf(k)
		if !ok || p.Lease != n {
			return fmt.Errorf("retry") // the lease changed meanwhile
		}
		store[key] = value // (3) stored here under n
		if p.Peer != "" {
			if err := replicate(p.Addr, key, value, p.Lease, p.SGN); err != nil {
				return fmt.Errorf("retry: the standby did not store it: %w", err)
			}
		}
		if !o.CheckReplicated(k, p) { // (4) the lease held and the pairing did not change
			return fmt.Errorf("retry")
		}
		return nil // acknowledge
	}

	// Standby: a write replicated by its holder.
	replicated := func(holder, key string, value []byte, lease owner.LeaseNum, sgn protocol.SGN) error {
		if err := o.CheckStandbyWrite(keyspace.KeyOf(key), holder, lease, sgn); err != nil {
			return err // a *owner.StandbyRefusal: a stale holder, lease or SGN
		}
		store[key] = value
		return nil
	}

	// Standby: the holder's fill of a newly named pairing is complete. The
	// fill names the pieces of the lease its holder held when it copied
	// them; only those are reported in sync, and only those are promoted.
	filled := func(lease owner.LeaseNum, sgn protocol.SGN, pieces []keyspace.Range) { o.InSync(lease, sgn, pieces) }

	// Promoted: a grant marked Promoted carries the copy kept as standby;
	// the application serves from it (OwnershipChange.Granted).
	_, _, _ = put, replicated, filled
}
