// Command leasehold-bench runs the evaluation experiments of the Centrifuge
// and PRS papers on the deterministic simulation and writes CSV, PNG plots
// and a summary: 'leasehold-bench scale', 'leasehold-bench rack' and so on.
// Run 'leasehold-bench --help' for the scenarios.
//
// It is a command of its own so that the leasehold binary, which runs the
// Manager in production, links neither the simulation nor the plotting
// stack.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/cmd/leasehold-bench/internal/benchcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // a second signal kills at once
	code := benchcli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
