// Command leasehold runs a leasehold Manager and talks to one: manager,
// status, lookup, watch. Run 'leasehold --help' for the subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/cmd/internal/cli"
)

// version is set by the build (-ldflags "-X main.version=…"); leasehold
// --version prints it.
var version string

func main() {
	if version != "" {
		cli.Version = version
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // a second signal kills at once
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
