package manager_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold"
	"net"
	"time"

	"github.com/leasehold/leasehold/manager"
	"github.com/leasehold/leasehold/protocol"
)

// Example runs a one-replica Manager on a loopback port with the fast
// timings, as 'leasehold manager --insecure --timings fast' would, and
// reads its status once it leads.
func Example() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := manager.NewServer(manager.Config{Insecure: true, Timing: protocol.Fast()})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, lis); close(done) }()
	defer func() { cancel(); <-done }()

	for i := 0; i < 200; i++ { // a bounded wait for the election
		if snap := srv.Snapshot(); snap != nil && snap.Cluster.Role == "leader" {
			fmt.Println("leader of", len(snap.Cluster.Peers), "replica, serving", snap.Namespaces[0].Name)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("no leader")
	// Output: leader of 1 replica, serving default
}

// ExampleConfig_Validate shows the typed error of a Config that is refused.
func ExampleConfig_Validate() {
	cfg := manager.Config{Insecure: true, MaxOwners: -1}
	err := cfg.Validate()
	var fe *leasehold.ConfigError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field)
	}
	fmt.Println(err)
	// Output:
	// MaxOwners
	// manager: Config.MaxOwners: -1 is negative
}
