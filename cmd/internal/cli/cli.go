// Package cli is the leasehold command: one cobra command tree whose
// subcommands run a Manager or talk to one. cmd/leasehold only calls
// Execute. It lives in cmd/internal because two other programs reuse a
// piece of it: leasehold-demo serves its Manager's dashboard with
// StartDashboard, and leasehold-bench's profiling build of the Manager
// (cmd/leasehold-bench/internal/bench/profiledmanager) runs Execute.
//
// Each subcommand lives in its own file and adds itself to the tree with
// register in an init function, so adding one (drain, backup …) is one
// new file:
//
//	func init() { register(newDrainCommand) }
//
//	func newDrainCommand(e *env) *cobra.Command {
//		o := &clientOptions{}
//		cmd := &cobra.Command{Use: "drain [flags] OWNER_ID", Short: "…", Args: cobra.ExactArgs(1),
//			RunE: run(func(ctx context.Context, args []string) error { … })}
//		… flags bound to o …
//		return cmd
//	}
//
// # Exit codes
//
//	0  success, or a clean stop on SIGINT/SIGTERM
//	1  a runtime failure: the manager cannot be reached, an address is in
//	   use, a key has no owner
//	2  bad usage: an unknown command or flag, a malformed value, unsafe
//	   timings
//
// Every error is printed to stderr as one line starting with "leasehold: ".
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes of Execute.
const (
	ExitOK      = 0
	ExitFailure = 1 // a runtime failure
	ExitUsage   = 2 // bad flags or arguments
)

// ManagerEnv names the environment variable that replaces the default
// --manager address (or comma-separated list) of the client subcommands.
const ManagerEnv = "LEASEHOLD_MANAGER"

// DefaultManager is the address the Manager listens on, and clients dial,
// unless told otherwise.
const DefaultManager = "127.0.0.1:7400"

// env is what every subcommand shares: where to write, and the process
// environment.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// defaultManager is the --manager default: $LEASEHOLD_MANAGER if set.
func (e *env) defaultManager() string {
	if a := e.getenv(ManagerEnv); a != "" {
		return a
	}
	return DefaultManager
}

// commands builds the subcommands, in the order their files registered them.
var commands []func(*env) *cobra.Command

// register adds a subcommand to the tree; call it from an init function.
func register(newCommand func(*env) *cobra.Command) {
	commands = append(commands, newCommand)
}

// Execute runs the leasehold command line args (without the program name)
// under ctx, writing to stdout and stderr, and returns the exit code.
// Cancelling ctx (main does on SIGINT and SIGTERM) stops long-running
// subcommands cleanly, with exit code 0.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	root := newRoot(e)
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitUsage // errors cobra raises itself are all about usage
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	msg := oneLine(err.Error())
	if code == ExitUsage {
		if cmd == nil {
			cmd = root
		}
		msg += fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())
	}
	fmt.Fprintf(stderr, "leasehold: %s\n", msg)
	return code
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Version: Version,
		Use:     "leasehold",
		Short:   "leasehold: leases on ranges of a key space, and where each key lives",
		Long: `leasehold hands out leases on ranges of a 64-bit key space to servers that keep
soft state in memory (Owners), and tells frontends (Lookups) which Owner holds
each key, with a loss notification whenever an Owner's state for a range is lost.

Run a Manager with 'leasehold manager'; inspect it with 'leasehold status',
'leasehold lookup' and 'leasehold watch'. Client subcommands dial --manager,
which defaults to $` + ManagerEnv + ` or ` + DefaultManager + `; for a replicated
Manager give its replicas' addresses, comma-separated, and the clients follow
the leader.

Every connection is mutual TLS: each command finds its certificates through
--certs-dir or $LEASEHOLD_CERTS_DIR ('leasehold cert' creates them;
docs/security.md), or speaks plaintext when given --insecure.

Exit codes: 0 success, 1 runtime failure, 2 bad usage.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			HiddenDefaultCmd: true,
		},
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError(err)
	})
	for _, newCommand := range commands {
		root.AddCommand(newCommand(e))
	}
	return root
}

// exitError carries the exit code for an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks err as bad usage: exit code 2.
func usageError(err error) error { return &exitError{code: ExitUsage, err: err} }

// usagef is usageError with a formatted message.
func usagef(format string, args ...any) error {
	return usageError(fmt.Errorf(format, args...))
}

// run adapts a subcommand body to cobra's RunE: errors it returns are
// runtime failures (exit code 1) unless already marked otherwise.
func run(body func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := body(cmd.Context(), args)
		var ee *exitError
		if err == nil || errors.As(err, &ee) {
			return err
		}
		return &exitError{code: ExitFailure, err: err}
	}
}

// oneLine folds a multi-line message (cobra's "Did you mean this?"
// suggestions) into one line.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}
