// Command leasehold-demo runs the tours of leasehold on 127.0.0.1: with no
// argument the main one (a Manager, KV servers of examples/kv, a crash, a
// loss notification, a new server; tour.go), and the tours of the example
// services with pubsub, presence or mail (tours.go), and agent (Python
// servers beside leasehold agent; tour_agent.go). Each runs a Manager in
// this process and the servers as child processes of this program, and
// exits 0 only if what it shows held:
//
//	go run ./cmd/leasehold-demo
//	go run ./cmd/leasehold-demo pubsub
//
// It lives apart from the leasehold command so that the production binary
// links none of the examples.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // a second signal kills at once
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is where the commands write.
type env struct {
	stdout, stderr io.Writer
}

// execute runs the command line args (without the program name) and
// returns the exit code: 0 success (or a clean stop on SIGINT/SIGTERM), 1 a
// failed tour, 2 bad usage, as the leasehold command's.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(&env{stdout: stdout, stderr: stderr})
	root.SilenceUsage, root.SilenceErrors = true, true
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var failed tourError
	if errors.As(err, &failed) {
		fmt.Fprintf(stderr, "leasehold-demo: %s\n", oneLine(err.Error()))
		return 1
	}
	if cmd == nil {
		cmd = root
	}
	fmt.Fprintf(stderr, "leasehold-demo: %s (see '%s --help')\n", oneLine(err.Error()), cmd.CommandPath())
	return 2
}

// tourError marks a failure of a tour (exit code 1), as opposed to bad
// usage, which cobra's own errors are.
type tourError struct{ error }

func (e tourError) Unwrap() error { return e.error }

// usageError marks bad usage (exit code 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run adapts a command body to cobra's RunE: what it returns is a failure
// (exit code 1) unless marked as bad usage.
func run(body func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := body(cmd.Context(), args)
		var ue usageError
		if err == nil || errors.As(err, &ue) {
			return err
		}
		return tourError{err}
	}
}

// oneLine folds a multi-line message into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
