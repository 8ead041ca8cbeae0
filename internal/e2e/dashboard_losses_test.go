package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/internal/browser"
	"github.com/leasehold/leasehold/protocol"
)

// TestDashboardLossesFirst opens leasehold dashboard in headless Chromium
// against a Manager and three kv servers, all real processes. kv-1 is
// drained — planned moves, which the timeline shows as one line per move
// — and kv-3 is killed with SIGKILL among them: the loss is counted in the
// header and listed in the losses view, naming kv-3 and its ranges, within
// the notification bound; the timeline's "losses only" view shows losses
// alone; and the key search names kv-2, the Owner that holds a key of
// kv-3's afterwards, and since when.
func TestDashboardLossesFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	if browser.Path() == "" {
		t.Skip("no Chromium installed (apt-get install chromium): the dashboard's browser test cannot run")
	}
	leasehold, addr, c, servers := threeOwners(t)
	tm := protocol.Fast()
	st := c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) && s.sumRanges() == 192
	})
	ks := make([]string, 100)
	for i := range ks {
		ks[i] = fmt.Sprintf("key-%03d", i)
	}
	before := newRouter(t, addr).owners(t, st.LSN, ks)
	var key string // a key of kv-3's
	for _, k := range ks {
		if before[k] == "kv-3" {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key of the hundred is kv-3's")
	}

	dash := start(t, "dashboard", leasehold, "dashboard", "--manager", addr, "--listen", "127.0.0.1:0", "--refresh", "250ms")
	line := dash.waitLine(t, "leasehold dashboard on ", 10*time.Second)
	url, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold dashboard on "), " ")
	url = viewerProxy(t, url)
	b := browser.New(t, 1400, 1200)
	b.Do("open the dashboard", chromedp.Navigate(url))
	p := &page{t: t, b: b}
	if !p.wait(`ring().dataset.holders === "kv-1,kv-2,kv-3"`, 10*time.Second) {
		t.Fatalf("the ring does not show kv-1, kv-2 and kv-3; it shows %q", p.holders())
	}
	if n := b.Text(`document.querySelector("#loss-count").dataset.count`); n != "0" {
		t.Errorf("the loss counter shows %s before any loss", n)
	}
	if !p.wait(`[...document.querySelectorAll("#managers tbody tr")].every(tr => tr.dataset.ready === "true")`, 5*time.Second) {
		t.Errorf("the replicas are not shown ready: %s", b.Text(`document.querySelector("#managers").innerText`))
	}

	// Planned moves: kv-1 drains, its ranges handed to kv-2 and kv-3. Among
	// them, kv-3 is killed.
	if out, err := command(t, leasehold, "drain", "kv-1", "--manager", addr).CombinedOutput(); err != nil {
		t.Fatalf("drain kv-1: %v: %s", err, out)
	}
	if !p.wait(`document.querySelector("#timeline li.move") !== null`, 10*time.Second) {
		t.Fatalf("no planned move on the timeline after the drain: %s", b.Text(`document.querySelector("#timeline").innerText.slice(0, 1000)`))
	}
	killedAt := time.Now()
	servers["kv-3"].kill(t)
	bound := killBound(tm)
	lossAt, ok := p.waitAt(`document.querySelector('#losses li[data-owners~="kv-3"]') !== null && Number(document.querySelector("#loss-count").dataset.count) > 0`, bound+slack)
	if !ok {
		t.Fatalf("no loss naming kv-3 in the losses view within %s (+%s slack) of the kill: %s", bound, slack,
			b.Text(`document.querySelector("#losses").innerText.slice(0, 2000)`))
	}
	t.Logf("the loss of kv-3 in the losses view %s after the kill (bound %s): %s", lossAt.Sub(killedAt).Round(time.Millisecond), bound,
		b.Text(`document.querySelector('#losses li[data-owners~="kv-3"]').innerText`))
	if r := b.Text(`document.querySelector('#losses li[data-owners~="kv-3"]').dataset.ranges`); r == "0" || r == "" {
		t.Errorf("the loss naming kv-3 lists %q ranges", r)
	}
	c.settle("kv-2 alone", func(s status) bool { return slices.Equal(s.holders(), []string{"kv-2"}) })
	if !p.wait(`ring().dataset.holders === "kv-2"`, 10*time.Second) {
		t.Fatalf("the ring shows %q, want kv-2 alone", p.holders())
	}
	b.Screenshot("dashboard-losses-1-kv-3-killed-among-moves.png")

	// Planned moves are one line per move, not one per range.
	moves, _ := browser.Eval[int](b, `document.querySelectorAll("#timeline li.move").length`)
	moved, _ := browser.Eval[int](b, `[...document.querySelectorAll("#timeline li.move")].reduce((n, li) => n + Number(li.dataset.count || 0), 0)`)
	t.Logf("%d planned-move lines on the timeline for %d ranges moved", moves, moved)
	if moved == 0 || moves > 6 || moves >= moved {
		t.Errorf("%d planned-move lines for %d ranges: want one line per move", moves, moved)
	}
	// "losses only" leaves only losses on the timeline.
	b.Do("tick losses only", chromedp.Click("#tl-losses"))
	if !p.wait(`[...document.querySelectorAll("#timeline li")].every(li => li.dataset.kind === "loss") && document.querySelector("#timeline li.loss") !== null`, 5*time.Second) {
		t.Errorf("the timeline with losses only shows: %s", b.Text(`document.querySelector("#timeline").innerText.slice(0, 1000)`))
	}
	b.Screenshot("dashboard-losses-2-losses-only.png")

	// The key search names the new Owner of a key of kv-3's, and since when.
	b.Do("search for "+key, chromedp.SendKeys("#key-q", key), chromedp.Click("#key-form button"))
	if !p.wait(`document.querySelector("#key-answer").dataset.owner === "kv-2"`, 10*time.Second) {
		t.Fatalf("the key search for %s answers %q, want kv-2", key, b.Text(`document.querySelector("#key-answer").textContent`))
	}
	answer := b.Text(`document.querySelector("#key-answer").textContent`)
	if !strings.Contains(answer, "held by kv-2") || !strings.Contains(answer, "since ") {
		t.Errorf("the key search says %q; want it held by kv-2, since when", answer)
	}
	t.Logf("key search: %s", answer)
	b.Screenshot("dashboard-losses-3-key-search.png")
}
