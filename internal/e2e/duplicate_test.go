package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/protocol"
)

// TestDuplicateOwnerID: kv-2 reaches the Manager through a proxy while a
// client reads and writes every key on every server directly. The proxy is
// cut, keeping kv-2's connection open but forwarding nothing, as when a
// server is cut off from the Manager but not from its clients, and a second
// kv serve is started at once with the ID kv-2, straight against the
// Manager. The Manager refuses the new incarnation while the old stream is
// live and accepts it once it has gone quiet (Timing.OwnerQuiet), long
// before the half-open stream would close. The old process still holds its
// leases and acknowledges writes until they run out; its ranges stay
// orphans until their reservations end. Every key whose acknowledged value
// disappears — the client reads it back before each write, and once more
// at the end — must be covered by a loss notification that leasehold watch
// --json printed after the key's last acknowledged write: a notification
// before it cannot tell anyone to republish that write.
func TestDuplicateOwnerID(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	leasehold, kvBin := build(t)
	tm := protocol.Fast()
	started := time.Now()

	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	c := &cli{t: t, leasehold: leasehold, kv: kvBin, manager: addr}
	w := &watcher{p: start(t, "watch", leasehold, "watch", "--manager", addr, "--json")}
	ws := &directWriter{client: &http.Client{Transport: frontendTransport(t, certs.Owner), Timeout: 2 * time.Second}, acks: map[string]ack{}}
	px := startProxy(t, freeAddr(t), addr, "1")
	ws.add("kv-1", servingAddr(t, c.serve("kv-1")))
	ws.add("kv-2", servingAddr(t, startOwner(t, "kv-2", kvBin, "serve", "--manager", px.lis.Addr().String(), "--listen", "127.0.0.1:0", "--id", "kv-2")))
	ws.add("kv-3", servingAddr(t, c.serve("kv-3")))
	c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) && s.sumRanges() == 192
	})
	ks := make([]string, nkeys)
	for i := range ks {
		ks[i] = fmt.Sprintf("key-%03d", i)
	}

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ws.run(t, ks, stop)
	}()
	time.Sleep(time.Second) // bounded: the writer writes every key a few times first

	cutAt := time.Now()
	px.setCut(true)
	dup := start(t, "kv-2 (duplicate)", kvBin, "serve", "--manager", addr, "--listen", "127.0.0.1:0", "--id", "kv-2")
	dupAddr := servingAddr(t, dup)
	ws.add("kv-2 (duplicate)", dupAddr)
	t.Logf("%s: kv-2 cut off from the Manager; a second kv serve --id kv-2 started", since(started))

	// The Manager takes the duplicate once the old stream is quiet; with
	// the old stream's end as the rule, it would wait for the half-open
	// connection to be found dead.
	var takeoverAt time.Time
	for deadline := cutAt.Add(10 * time.Second); takeoverAt.IsZero() && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s, err := c.status()
		if err != nil {
			continue
		}
		for _, o := range s.Owners {
			if o.ID == "kv-2" && o.Addr == dupAddr {
				takeoverAt = time.Now()
			}
		}
	}
	if takeoverAt.IsZero() {
		t.Fatal("the Manager did not take the second kv-2 within 10 s of the cut")
	}
	t.Logf("%s: the Manager took the second kv-2, %s after the cut (OwnerQuiet %s)", since(started), takeoverAt.Sub(cutAt).Round(time.Millisecond), tm.OwnerQuiet())
	if d := takeoverAt.Sub(cutAt); d > tm.OwnerLease {
		t.Errorf("the Manager took the second kv-2 %s after the cut, later than an OwnerLease (%s): a restart waits on a stream that stopped speaking", d, tm.OwnerLease)
	}

	// The old process's leases run out within an OwnerLease of its last
	// renewal; its ranges are freed when their reservations end and then
	// granted anew. Let the writer go on through all of it.
	time.Sleep(tm.ManagerLease + 2*time.Second)
	close(stop)
	<-done
	c.settle("three owners again", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"})
	})

	oldAfter := ws.ackedBy("kv-2", takeoverAt)
	t.Logf("%s: %d writes acknowledged in all; %d by the old kv-2 after the Manager took the second", since(started), ws.total(), oldAfter)
	if oldAfter == 0 {
		t.Fatal("the old kv-2 acknowledged nothing after the Manager took the second: the scenario tests nothing")
	}

	for _, k := range ks {
		ws.check(t, k) // the final read
	}
	if t.Failed() {
		return
	}
	gone := ws.disappeared()
	// Every notification due has been printed once the bound has passed
	// since the last value was found gone (bounded wait).
	var seen time.Time
	for _, d := range gone {
		if d.seen.After(seen) {
			seen = d.seen
		}
	}
	time.Sleep(time.Until(seen.Add(tm.NotificationBound() + slack)))
	byOld, uncovered := 0, 0
	for _, d := range gone {
		if d.last.by == "kv-2" && d.last.at.After(takeoverAt) {
			byOld++
		}
		if _, ok := w.coveredAt(d.key, d.last.at, 0, false); !ok {
			uncovered++
			t.Errorf("%q: its value %q, acknowledged by %s at %s, was gone at %s, and watch printed no loss notification covering it after the write",
				d.key, d.last.value, d.last.by, d.last.at.Sub(started), d.seen.Sub(started))
		}
	}
	if uncovered > 0 {
		t.Errorf("%d of %d values that disappeared have no loss notification after their last acknowledged write", uncovered, len(gone))
	}
	t.Logf("%s: %d acknowledged values disappeared (%d of them written to the old kv-2 after the Manager took the second); %d without a loss notification after their last write",
		since(started), len(gone), byOld, uncovered)
	if byOld == 0 {
		t.Error("no value the old kv-2 acknowledged after the Manager took the second disappeared: the scenario tests nothing")
	}
}

// servingAddr is the address kv serve printed.
func servingAddr(t *testing.T, p *proc) string {
	t.Helper()
	line := p.waitLine(t, "kv serving on ", 10*time.Second)
	addr, _, _ := strings.Cut(strings.TrimPrefix(line, "kv serving on "), " ")
	return addr
}

// ack is a write a server acknowledged.
type ack struct {
	value, by string
	at        time.Time // when the acknowledgement arrived
}

// directWriter writes keys to kv servers directly, bypassing any Lookup,
// as a client holding a stale route does: each write goes to every server
// until one acknowledges it (204). Only the server holding the key's lease
// does.
type directWriter struct {
	client *http.Client

	mu      sync.Mutex
	names   []string         // guarded by mu
	addrs   []string         // guarded by mu
	acks    map[string]ack   // guarded by mu: the last acknowledged write of each key
	history map[string][]ack // guarded by mu: every acknowledged write, by server
	gone    []disappearance  // guarded by mu
}

// disappearance is an acknowledged value found gone.
type disappearance struct {
	key  string
	last ack       // the last write acknowledged before
	seen time.Time // when the read found it gone
}

func (d *directWriter) add(name, addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names = append(d.names, name)
	d.addrs = append(d.addrs, addr)
}

func (d *directWriter) servers() ([]string, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.names), slices.Clone(d.addrs)
}

// run reads back and writes every key over and over, with a fresh value
// each round, until stop is closed.
func (d *directWriter) run(t *testing.T, ks []string, stop <-chan struct{}) {
	for round := 0; ; round++ {
		for _, k := range ks {
			select {
			case <-stop:
				return
			default:
			}
			d.check(t, k)
			value := fmt.Sprintf("r%d-%s", round, k)
			names, addrs := d.servers()
			for i, a := range addrs {
				if d.put(a, k, value) {
					d.record(k, ack{value: value, by: names[i], at: time.Now()})
					break
				}
			}
		}
	}
}

func (d *directWriter) put(addr, key, value string) bool {
	req, err := http.NewRequest(http.MethodPut, "https://"+addr+"/kv/"+key, strings.NewReader(value))
	if err != nil {
		return false
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusNoContent
}

func (d *directWriter) record(k string, a ack) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.acks[k] = a
	if d.history == nil {
		d.history = map[string][]ack{}
	}
	d.history[a.by] = append(d.history[a.by], a)
}

func (d *directWriter) last(k string) (ack, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.acks[k]
	return a, ok
}

func (d *directWriter) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, h := range d.history {
		n += len(h)
	}
	return n
}

// ackedBy counts the writes server name acknowledged after from.
func (d *directWriter) ackedBy(name string, from time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, a := range d.history[name] {
		if a.at.After(from) {
			n++
		}
	}
	return n
}

func (d *directWriter) disappeared() []disappearance {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.gone)
}

// check reads key back from the server that holds it, if one does, and
// records a disappearance if its last acknowledged value is not found. A
// different value found is an error: a value acknowledged is the latest
// or gone, never replaced by an older one.
func (d *directWriter) check(t *testing.T, key string) {
	a, acked := d.last(key)
	value, found, held := d.read(key)
	switch {
	case !acked || !held:
	case !found:
		d.mu.Lock()
		d.gone = append(d.gone, disappearance{key: key, last: a, seen: time.Now()})
		delete(d.acks, key)
		d.mu.Unlock()
	case value != a.value:
		t.Errorf("get %q = %q, want %q, acknowledged by %s", key, value, a.value, a.by)
	}
}

// read asks every server for key: the value of the one that holds it, or
// not found; held is false if none holds it now.
func (d *directWriter) read(key string) (value string, found, held bool) {
	_, addrs := d.servers()
	for _, a := range addrs {
		resp, err := d.client.Get("https://" + a + "/kv/" + key)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return string(body), true, true
		case http.StatusNotFound:
			return "", false, true
		}
	}
	return "", false, false
}
