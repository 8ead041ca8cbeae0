package owner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// TestIdleOwnerClosesAtOnce checks that an Owner holding no lease, whose
// Manager cannot be reached, stops at once when closed with a long drain
// deadline: it has nothing to hand over and nobody to say goodbye to.
// Before, Close waited out the drain deadline (a server's --drain-timeout,
// a minute) and then an owner lease (a minute in production) for the
// acknowledgement. ManagerError names the dial error meanwhile.
func TestIdleOwnerClosesAtOnce(t *testing.T) {
	addr := closedAddr(t)
	o, err := owner.New(context.Background(), owner.Config{
		Connection: leasehold.Connection{Insecure: true, Manager: addr, Timing: protocol.Production()},
		ID:         "kv-1", Addr: "127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "manager error", func() bool { return o.ManagerError() != nil })
	if got := o.ManagerError().Error(); !strings.Contains(got, "manager at "+addr) || !strings.Contains(got, "connection refused") {
		t.Errorf("ManagerError() = %q; want the address and the dial error", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close of an idle, unconnected Owner took %s; want at once", took)
	}
}
