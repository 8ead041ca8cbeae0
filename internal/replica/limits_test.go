package replica

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/assign"
)

// TestOwnerLimit: a namespace records at most MaxOwners Owners. One more is
// refused with ErrLimit naming the limit and its flag, before anything is
// recorded; the Owners recorded go on, a restart of one included.
func TestOwnerLimit(t *testing.T) {
	a, b, c := newPeer("a"), newPeer("b"), newPeer("c")
	h := joinedCfg(t, CoreConfig{Policy: assign.Fixed{Pieces: 4}, MaxOwners: 2}, a, b)
	now := restartEnd.Add(100 * ms)
	owners := len(h.c.State().Owners(DefaultNamespace))
	err := h.c.StepLease(now, c.request())
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "--max-owners") {
		t.Fatalf("a third owner past MaxOwners 2: %v, want ErrLimit naming --max-owners", err)
	}
	if n := len(h.c.State().Owners(DefaultNamespace)); n != owners {
		t.Fatalf("the refused owner was recorded: %d owners, want %d", n, owners)
	}
	h.send(now, a)
	a.restart()
	if err := h.c.StepLease(now.Add(ms), a.request()); err != nil {
		t.Fatalf("a recorded owner's restart at the limit: %v", err)
	}
}

// TestRangeLimit: while a namespace's table has MaxRanges segments, a new
// Owner and a higher capacity are refused naming the limit; a renewal is
// not.
func TestRangeLimit(t *testing.T) {
	a, b := newPeer("a"), newPeer("b")
	h := joinedCfg(t, CoreConfig{Policy: assign.Fixed{Pieces: 4}, MaxRanges: 4}, a)
	now := restartEnd.Add(100 * ms)
	if n := h.table().Len(); n < 4 {
		t.Fatalf("the table has %d segments, want at least 4", n)
	}
	err := h.c.StepLease(now, b.request())
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "--max-ranges") {
		t.Fatalf("a new owner at MaxRanges: %v, want ErrLimit naming --max-ranges", err)
	}
	req := a.request()
	req.Capacity = 3
	if err := h.c.StepLease(now.Add(ms), req); !errors.Is(err, ErrLimit) {
		t.Fatalf("a higher capacity at MaxRanges: %v, want ErrLimit", err)
	}
	a.seq-- // that request was refused: send its Seq again
	h.send(now.Add(2*ms), a)
}

// TestGrantsFitAMessage: an Owner is granted up to maxOwnerLeases leases,
// so no message to it lists more than it accepts (wire.MaxLeases); the
// rest of the key space stays free.
func TestGrantsFitAMessage(t *testing.T) {
	defer func(m int) { maxOwnerLeases = m }(maxOwnerLeases)
	maxOwnerLeases = 5
	a := newPeer("a")
	h := joinedCfg(t, CoreConfig{Policy: assign.Fixed{Pieces: 16}}, a)
	h.renewals(restartEnd, restartEnd.Add(5*tm.Renew), a)
	if n := len(a.held); n != 5 {
		t.Fatalf("a holds %d leases, want maxOwnerLeases (5)", n)
	}
	r := h.send(restartEnd.Add(6*tm.Renew), a)
	if m := h.to(r, "a"); m != nil && len(m.Leases) > 5 {
		t.Fatalf("a message lists %d leases, over maxOwnerLeases", len(m.Leases))
	}
}
