// Package lifecycle is what the example commands share: the flags that find
// their Manager (ManagerFlags, ParseExit), and how the example servers (kv, pubsub, presence,
// mail) stop: on the first SIGINT or SIGTERM they drain, for at most their
// drain timeout; a second signal gives up waiting at once; and a server the
// Manager refuses (its certificate, role or namespace) says so and stops,
// rather than serving nothing while it retries forever. A server that
// holds no range has nothing to drain and stops at once (owner.Owner.Close).
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server is what Wait needs of a server.
type Server interface {
	// Close drains for as long as its context allows, then stops.
	Close(context.Context) error
	// ManagerError is why the server's Owner last failed to reach the
	// Manager (owner.Owner.ManagerError).
	ManagerError() error
}

// Options configure Wait.
type Options struct {
	// DrainTimeout bounds the drain after the first signal.
	DrainTimeout time.Duration
	// Again delivers the second signal; nil means SIGINT and SIGTERM, as
	// signal.Notify delivers them.
	Again <-chan os.Signal
	// Check is how often Wait asks ManagerError; 0 means every 250 ms.
	Check time.Duration
	// Quit is how long Close may run after the second signal before Wait
	// returns without it; 0 means 500 ms.
	Quit time.Duration
	// DialTimeout, if set, is how long the server may go without reaching
	// the Manager before Wait says so on Stderr, once, as Name (it keeps
	// retrying).
	DialTimeout time.Duration
	Stderr      io.Writer
	Name        string
}

// Wait blocks until ctx ends (the first signal, as signal.NotifyContext
// ends it) or the Manager refuses srv, then closes srv and returns. A
// refusal closes at once, without a drain (the Manager would refuse that
// too), and Wait returns an error that says so. Otherwise Close may drain
// for o.DrainTimeout; a second signal cancels that, and Wait returns at
// most o.Quit later, with an error that says the drain was cut short, even
// if Close is still running (the process is about to exit). Close's own
// error is returned as it is. took is how long the server took to stop,
// from the signal or the refusal.
func Wait(ctx context.Context, srv Server, o Options) (took time.Duration, err error) {
	if o.Check <= 0 {
		o.Check = 250 * time.Millisecond
	}
	if o.Quit <= 0 {
		o.Quit = 500 * time.Millisecond
	}
	tick := time.NewTicker(o.Check)
	defer tick.Stop()
	start, warned := time.Now(), false
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			merr := srv.ManagerError()
			if merr != nil && !warned && o.DialTimeout > 0 && o.Stderr != nil && time.Since(start) >= o.DialTimeout {
				fmt.Fprintf(o.Stderr, "%s: cannot reach the manager within %s: %v (still trying)\n", o.Name, o.DialTimeout, merr)
				warned = true
			}
			if Refused(merr) {
				done, cancel := context.WithCancel(context.Background())
				cancel() // nothing to drain: the Manager refuses this server
				stopping := time.Now()
				if cerr := srv.Close(done); cerr != nil {
					return time.Since(stopping), fmt.Errorf("the manager refuses this server: %w (and closing: %v)", merr, cerr)
				}
				return time.Since(stopping), fmt.Errorf("the manager refuses this server: %w", merr)
			}
		}
	}
	// The first signal drains, for at most the drain timeout; a second
	// ends the drain at once.
	stopping := time.Now()
	defer func() { took = time.Since(stopping) }()
	if o.Again == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(ch)
		o.Again = ch
	}
	dctx, cancel := context.WithTimeout(context.Background(), o.DrainTimeout)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- srv.Close(dctx) }()
	select {
	case err := <-closed:
		return 0, err
	case <-o.Again:
	}
	cancel()
	cut := errors.New("stopped by a second signal before the drain was done")
	select {
	case err := <-closed:
		return 0, errors.Join(cut, err)
	case <-time.After(o.Quit):
		return 0, cut
	}
}

// Refused reports whether err, a ManagerError, is the Manager's refusal of
// the server itself, which retrying does not lift.
func Refused(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}
