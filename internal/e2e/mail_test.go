package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/examples/mail/mail"
	"github.com/leasehold/leasehold/protocol"
)

// TestMailScenario is the mail example's acceptance scenario: a Manager
// and three mail nodes as real processes, each with its data directory;
// four delivery proxies sending to 30 users all along. One node is killed
// with SIGKILL and restarted from its directory a few seconds later;
// another is drained with leasehold drain and keeps serving its disk. Its
// users' new Owners rebuild their mail maps from the disks. Every message
// whose delivery was acknowledged is read back at the end, each once, and
// no read ever shows a message twice or one never sent; while a node is
// down, a read may miss what only it holds, and says so (Incomplete).
func TestMailScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	leasehold, _ := build(t)
	mailBin := buildExample(t, "mail")
	started := time.Now()
	addr := startExampleManager(t, leasehold)
	c := &cli{t: t, leasehold: leasehold, manager: addr}
	ids := []string{"mail-1", "mail-2", "mail-3"}
	listen, dirs := map[string]string{}, map[string]string{}
	var nodes []string
	for _, id := range ids {
		listen[id], dirs[id] = freeAddr(t), t.TempDir()
		nodes = append(nodes, id+"="+listen[id])
	}
	servers := map[string]*proc{}
	serve := func(id string) {
		servers[id] = startOwner(t, id, mailBin, "--manager", addr, "--id", id, "--listen", listen[id],
			"--data-dir", dirs[id], "--nodes", strings.Join(nodes, ","))
		servers[id].waitLine(t, "mail serving on ", 10*time.Second)
	}
	for _, id := range ids {
		serve(id)
	}
	c.settle("three owners", func(s status) bool { return slices.Equal(s.holders(), ids) })
	cl, err := mail.NewClient(context.Background(), mail.ClientConfig{CertsDir: certsDirFor(t), Manager: addr, Timing: protocol.Fast()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const nusers = 30
	var mu sync.Mutex
	acked := map[string]map[string]string{} // user → ID → body, delivery acknowledged
	sent := map[string]bool{}               // every ID a delivery was tried with, acknowledged or not
	var failed, reads, incomplete, dup, phantom int
	var firstBad []string
	bad := func(format string, args ...any) {
		if len(firstBad) < 5 {
			firstBad = append(firstBad, fmt.Sprintf(format, args...))
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user := fmt.Sprintf("user-%02d", (i*4+w)%nusers)
				body := fmt.Sprintf("from proxy %d, message %d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				id, err := cl.Deliver(ctx, user, body)
				cancel()
				mu.Lock()
				sent[id] = true
				if err != nil {
					failed++
				} else {
					if acked[user] == nil {
						acked[user] = map[string]string{}
					}
					acked[user][id] = body
				}
				mu.Unlock()
				if i%5 == 0 { // read the mailbox back now and then
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					mu.Lock()
					before := maps.Clone(acked[user])
					mu.Unlock()
					box, err := cl.Read(ctx, user)
					cancel()
					mu.Lock()
					reads++
					checkMailbox(box, err, before, nil, &incomplete, &dup, &phantom, bad)
					mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	stopAll := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopAll()
	time.Sleep(2 * time.Second)

	killedAt := time.Now()
	servers["mail-2"].kill(t)
	c.settle("two owners", func(s status) bool { return slices.Equal(s.holders(), []string{"mail-1", "mail-3"}) })
	t.Logf("%s: killed mail-2; the others hold its users %s after the kill", since(started), time.Since(killedAt).Round(time.Millisecond))
	time.Sleep(time.Second)
	serve("mail-2") // its disk comes back
	c.settle("mail-2 back", func(s status) bool { return slices.Equal(s.holders(), ids) })
	t.Logf("%s: mail-2 restarted from its data directory", since(started))
	time.Sleep(time.Second)
	drainAt := time.Now()
	if out, err := command(t, leasehold, "drain", "mail-3", "--manager", addr).CombinedOutput(); err != nil {
		t.Fatalf("leasehold drain mail-3: %v\n%s", err, out)
	}
	c.settle("mail-3 drained", func(s status) bool { return slices.Equal(s.holders(), []string{"mail-1", "mail-2"}) })
	t.Logf("%s: drained mail-3 in %s; it keeps serving its disk", since(started), time.Since(drainAt).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	stopAll()

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for u := range nusers {
		user := fmt.Sprintf("user-%02d", u)
		total += len(acked[user])
		var box mail.Mailbox
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			box, err = cl.Read(ctx, user)
			cancel()
			if err == nil && len(box.Incomplete) == 0 || time.Now().After(deadline) {
				break
			}
		}
		reads++
		checkMailbox(box, err, acked[user], sent, &incomplete, &dup, &phantom, bad)
		if len(box.Incomplete) > 0 {
			t.Errorf("%s: the final read is still incomplete: %v", user, box.Incomplete)
		}
	}
	t.Logf("%d deliveries acknowledged (%d failed after retries), %d reads: %d incomplete (a node down), %d showed a message twice, %d one never sent",
		total, failed, reads, incomplete, dup, phantom)
	for _, b := range firstBad {
		t.Error(b)
	}
	if failed > 0 {
		t.Errorf("%d deliveries failed after 10 s of retries", failed)
	}
}

// checkMailbox checks one read: each message once, none never sent (if sent
// is given: a read during deliveries may show a message whose delivery has
// not returned yet), and —
// unless the read says a node could not be read — every message in want
// (acknowledged before the read was sent) there with its body.
func checkMailbox(box mail.Mailbox, err error, want map[string]string, sent map[string]bool, incomplete, dup, phantom *int, bad func(string, ...any)) {
	if err != nil {
		bad("read %s: %v", box.User, err)
		return
	}
	seen := map[string]string{}
	for _, m := range box.Messages {
		if _, ok := seen[m.ID]; ok {
			*dup++
			bad("read %s: message %s twice", box.User, m.ID)
		}
		seen[m.ID] = m.Body
		if sent != nil && !sent[m.ID] {
			*phantom++
			bad("read %s: message %s was never sent", box.User, m.ID)
		}
	}
	if len(box.Incomplete) > 0 {
		*incomplete++
		return
	}
	for id, body := range want {
		if got, ok := seen[id]; !ok || got != body {
			bad("read %s (complete): acknowledged message %s missing or changed (%q, want %q)", box.User, id, got, body)
		}
	}
}
