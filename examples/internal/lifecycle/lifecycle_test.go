package lifecycle

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fake is a server whose Close waits for its context (a drain that never
// finishes by itself) and whose Owner fails with err.
type fake struct {
	err      atomic.Pointer[error]
	closedBy chan error // the Close context's error, when Close returns
}

func newFake() *fake { return &fake{closedBy: make(chan error, 1)} }

func (f *fake) ManagerError() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *fake) Close(ctx context.Context) error {
	<-ctx.Done()
	f.closedBy <- ctx.Err()
	return nil
}

// TestRefusalStops checks that a server the Manager refuses stops at once,
// without a drain, and says why; an unreachable Manager is said once after
// the dial timeout and does not stop it.
func TestRefusalStops(t *testing.T) {
	f := newFake()
	unreachable := status.Error(codes.Unavailable, "connection refused")
	f.err.Store(&unreachable)
	var out strings.Builder
	done := make(chan error, 1)
	go func() {
		_, err := Wait(context.Background(), f, Options{DrainTimeout: time.Hour, Check: time.Millisecond,
			DialTimeout: time.Millisecond, Stderr: &out, Name: "kv serve"})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // many checks: still serving, and said so once
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v on an unreachable manager; want it to keep serving", err)
	default:
	}
	refused := status.Error(codes.PermissionDenied, "owner may not hold leases in namespace \"x\"")
	f.err.Store(&refused)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "the manager refuses this server") || !Refused(err) {
			t.Errorf("Wait = %v; want the refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the refusal")
	}
	if got := <-f.closedBy; !errors.Is(got, context.Canceled) {
		t.Errorf("Close ran with a live context (%v); want no drain", got)
	}
	if n := strings.Count(out.String(), "cannot reach the manager"); n != 1 {
		t.Errorf("stderr %q says the manager is unreachable %d times; want once", out.String(), n)
	}
}

// TestSecondSignalStops checks that the first signal starts a drain that
// may take the whole drain timeout, and a second one ends it at once.
func TestSecondSignalStops(t *testing.T) {
	f := newFake()
	ctx, signal := context.WithCancel(context.Background())
	again := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		_, err := Wait(ctx, f, Options{DrainTimeout: time.Hour, Again: again})
		done <- err
	}()
	signal()
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v during the drain", err)
	case <-time.After(20 * time.Millisecond):
	}
	again <- syscall.SIGTERM
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "second signal") {
			t.Errorf("Wait = %v; want the drain cut short", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the second signal")
	}
	if got := <-f.closedBy; !errors.Is(got, context.Canceled) {
		t.Errorf("the drain ended by %v; want the second signal", got)
	}
}
