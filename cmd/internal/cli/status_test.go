package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// TestStatusShowsLoad calls CheckLeaseNow on an Owner in a loop, one key
// far more than the others, and checks status shows its load, capacity
// and that key as hot, in JSON and in text.
func TestStatusShowsLoad(t *testing.T) {
	// The Manager starts before t.Parallel, so that its start-up reservation
	// runs out while the test waits for its turn (TestMain).
	addr := startManager(t)
	t.Parallel()
	o, err := owner.New(context.Background(), owner.Config{
		Connection: leasehold.Connection{Insecure: true, Manager: addr, Timing: protocol.Fast()},
		ID:         "kv-1",
		Addr:       "127.0.0.1:8001",
		Capacity:   2,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = o.Close(ctx)
	}()
	waitFor(t, "kv-1 to hold a range", 15*time.Second, func() bool { return len(o.Held()) > 0 })
	hot := o.Held()[0].Range.Start

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			o.CheckLeaseNow(hot)
			if i%1000 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	var st statusJSON
	waitFor(t, "load and a hot key in status --json", 15*time.Second, func() bool {
		code, stdout, _ := cli(t, "status", "--manager", addr, "--json")
		if code != ExitOK {
			return false
		}
		if err := json.Unmarshal([]byte(stdout), &st); err != nil {
			t.Fatalf("status --json printed %q: %v", stdout, err)
		}
		return len(st.Owners) == 1 && st.Owners[0].Load > 0 && len(st.Owners[0].HotKeys) > 0
	})
	ow := st.Owners[0]
	if ow.Capacity != 2 || ow.Draining || ow.HotKeys[0].Key != hexKey(hot) || ow.HotKeys[0].Rate <= 0 {
		t.Errorf("status --json owner %+v: want capacity 2, not draining, hot key %s with a rate", ow, hexKey(hot))
	}
	var raw struct {
		Owners []map[string]json.RawMessage `json:"owners"`
	}
	_, stdout, _ := cli(t, "status", "--manager", addr, "--json")
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil || len(raw.Owners) != 1 {
		t.Fatalf("status --json: %q, %v", stdout, err)
	}
	for _, field := range []string{"load", "capacity", "draining", "hot_keys"} {
		if _, ok := raw.Owners[0][field]; !ok {
			t.Errorf("status --json owner has no %q: %s", field, stdout)
		}
	}
	if !regexp.MustCompile(`"hot_keys":\[\{"key":"0x[0-9a-f]{16}","rate":[0-9.e+]+\}`).MatchString(stdout) {
		t.Errorf("status --json hot_keys not as documented: %s", stdout)
	}

	code, stdout, stderr := cli(t, "status", "--manager", addr)
	if code != ExitOK {
		t.Fatalf("status: exit %d, stderr %s", code, stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^  ID +ADDR +MEMBER +RANGES +SHARE% +LOAD/s +CAP +DRAINING +INCARNATION$`),
		regexp.MustCompile(`(?m)^  kv-1 +127\.0\.0\.1:8001 +yes +\d+ +[\d.]+ +[\d.]+ +2 +no +\d+$`),
		regexp.MustCompile(`(?m)^  hot keys \(requests/s\):\n    kv-1  ` + hexKey(hot) + ` [\d.]+`),
	} {
		if !want.MatchString(stdout) {
			t.Errorf("status output does not match %s:\n%s", want, stdout)
		}
	}
	if strings.Count(stdout, "0x") > hotKeysShown {
		t.Errorf("status shows more than %d hot keys:\n%s", hotKeysShown, stdout)
	}
}
