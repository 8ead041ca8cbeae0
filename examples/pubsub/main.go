// Command pubsub serves PRS's publish-subscribe service (package
// github.com/leasehold/leasehold/examples/pubsub/pubsub) until SIGINT or
// SIGTERM, then drains: its ranges move to the other servers with their
// subscriptions. Flags: pubsub -h.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/examples/pubsub/pubsub"
)

func main() {
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM) // until os.Exit
	os.Exit(pubsub.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
