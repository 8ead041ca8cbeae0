package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/internal/browser"
	"github.com/leasehold/leasehold/protocol"
)

// TestDashboard opens leasehold dashboard in headless Chromium against a
// Manager and three kv servers, all real processes: the ring shows the
// three Owners; a server killed with SIGKILL shows as a loss notification
// on the timeline, naming it, and the ring is recoloured without it,
// within the notification bound; an Owner drained from the page ends with
// no range. Screenshots of each step are saved ($LEASEHOLD_ARTIFACTS, or a
// temporary directory the test names).
func TestDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: builds binaries and runs real processes; skipped with -short")
	}
	onlyWithAll(t)
	if browser.Path() == "" {
		t.Skip("no Chromium installed (apt-get install chromium): the dashboard's browser test cannot run")
	}
	leasehold, addr, c, servers := threeOwners(t)
	tm := protocol.Fast()
	c.settle("three owners", func(s status) bool {
		return slices.Equal(s.holders(), []string{"kv-1", "kv-2", "kv-3"}) && s.sumRanges() == 192
	})

	dash := start(t, "dashboard", leasehold, "dashboard", "--manager", addr, "--listen", "127.0.0.1:0", "--refresh", "250ms")
	line := dash.waitLine(t, "leasehold dashboard on ", 10*time.Second)
	url, _, _ := strings.Cut(strings.TrimPrefix(line, "leasehold dashboard on "), " ")
	url = viewerProxy(t, url)
	b := browser.New(t, 1400, 1000)
	b.Do("open the dashboard", chromedp.Navigate(url))
	p := &page{t: t, b: b}
	if !p.wait(`ring().dataset.holders === "kv-1,kv-2,kv-3"`, 10*time.Second) {
		t.Fatalf("the ring does not show kv-1, kv-2 and kv-3; it shows %q", p.holders())
	}
	if n := b.Text(`String(document.querySelectorAll("#owners tbody tr").length)`); n != "3" {
		t.Errorf("the Owners table has %s rows, want 3", n)
	}
	b.Screenshot("dashboard-1-three-owners.png")

	// kill -9 one: the Manager frees its ranges once their reservation ends,
	// and every Lookup (the dashboard's too) reports the loss within
	// NotificationBound of that (docs/protocol.md).
	dead := "kv-2"
	killedAt := time.Now()
	servers[dead].kill(t)
	bound := killBound(tm)
	lossAt, ok := p.waitAt(fmt.Sprintf(`document.querySelector('#timeline li.loss[data-owners~=%q]') !== null`, dead), bound+slack)
	if !ok {
		t.Fatalf("no loss notification naming %s on the timeline within %s (+%s slack) of the kill; the timeline: %s",
			dead, bound, slack, b.Text(`document.querySelector("#timeline").innerText.slice(0, 2000)`))
	}
	recolouredAt, ok := p.waitAt(`ring().dataset.holders === "kv-1,kv-3"`, bound+slack-time.Since(killedAt))
	if !ok {
		t.Fatalf("the ring still shows %q %s after %s was killed (bound %s)", p.holders(), since(killedAt), dead, bound)
	}
	t.Logf("the loss of %s on the timeline %s after the kill, the ring recoloured %s after (bound %s)", dead,
		lossAt.Sub(killedAt).Round(time.Millisecond), recolouredAt.Sub(killedAt).Round(time.Millisecond), bound)
	b.Screenshot("dashboard-2-" + dead + "-killed.png")

	// Filter the timeline by the dead Owner: only its rows remain, its loss
	// among them.
	filter := func(id string) {
		if _, err := browser.Eval[bool](b, fmt.Sprintf(`(() => { const f = document.querySelector("#tl-owner");
			f.value = %q; f.dispatchEvent(new Event("input")); return true; })()`, id)); err != nil {
			t.Fatal(err)
		}
	}
	filter(dead)
	if !p.wait(fmt.Sprintf(`[...document.querySelectorAll("#timeline li")].every(li => li.dataset.owners.split(" ").includes(%q))
		&& document.querySelector("#timeline li.loss") !== null`, dead), 5*time.Second) {
		t.Errorf("the timeline filtered by %s shows other rows, or no loss: %s", dead, b.Text(`document.querySelector("#timeline").innerText.slice(0, 1000)`))
	}
	b.Screenshot("dashboard-2b-filtered-by-" + dead + ".png")
	filter("")

	// Drain another from the page: two clicks on its button.
	drained := "kv-1"
	c.settle("two owners", func(s status) bool { return slices.Equal(s.holders(), []string{"kv-1", "kv-3"}) })
	button := fmt.Sprintf(`button.drain[data-owner=%q]`, drained)
	if !p.wait(`document.querySelector('`+button+`') !== null`, 5*time.Second) {
		t.Fatalf("no drain button for %s", drained)
	}
	b.Click("arm the drain button", button)
	if !p.wait(`document.querySelector('`+button+`.armed') !== null`, 5*time.Second) {
		t.Fatalf("the drain button of %s did not ask for confirmation", drained)
	}
	b.Click("confirm the drain", button+".armed")
	if !p.wait(`document.querySelector("#answer.ok") !== null`, 10*time.Second) {
		t.Fatalf("no answer to the drain of %s: %q", drained, b.Text(`document.querySelector("#answer").textContent`))
	}
	if a := b.Text(`document.querySelector("#answer").textContent`); !strings.Contains(a, "draining "+drained) {
		t.Errorf("the drain's answer is %q, want it to say draining %s", a, drained)
	}
	empty := fmt.Sprintf(`document.querySelector('#owners tr[data-owner=%q]').dataset.ranges === "0" && ring().dataset.holders === "kv-3"`, drained)
	if !p.wait(empty, settleTimeout) {
		t.Fatalf("%s still holds ranges %s after the drain: the ring shows %q", drained, settleTimeout, p.holders())
	}
	if !p.wait(fmt.Sprintf(`document.querySelector('#timeline li.drain[data-owners~=%q]') !== null`, drained), 5*time.Second) {
		t.Errorf("the timeline does not show the drain of %s", drained)
	}
	b.Screenshot("dashboard-3-" + drained + "-drained.png")

	// A second drain of the last Owner holding ranges: the maintenance gate
	// (one drain at a time, the default) or the lack of another Owner
	// refuses it, and the page shows the Manager's answer.
	b.Click("arm kv-3's drain button", `button.drain[data-owner="kv-3"]`)
	if p.wait(`document.querySelector('button.drain[data-owner="kv-3"].armed') !== null`, 5*time.Second) {
		b.Click("confirm kv-3's drain", `button.drain[data-owner="kv-3"].armed`)
		if p.wait(`document.querySelector('#answer[data-owner="kv-3"]') !== null`, 10*time.Second) {
			t.Logf("the page's answer to draining kv-3 too: %q", b.Text(`document.querySelector("#answer").textContent`))
			b.Screenshot("dashboard-4-gate.png")
		}
	}
}

// page reads what the dashboard's page drew.
type page struct {
	t *testing.T
	b *browser.Browser
}

const pageHelpers = `const ring = () => document.querySelector("#ring");`

func (p *page) wait(expr string, timeout time.Duration) bool {
	_, ok := p.waitAt(expr, timeout)
	return ok
}

func (p *page) waitAt(expr string, timeout time.Duration) (time.Time, bool) {
	return p.b.WaitTrue(`(() => { `+pageHelpers+` try { return `+expr+`; } catch (e) { return false; } })()`, timeout)
}

func (p *page) holders() string {
	return p.b.Text(`document.querySelector("#ring").dataset.holders`)
}

// viewerProxy checks that the dashboard at dashURL serves HTTPS only to
// viewers with a certificate, and serves it to this test's browser in
// plain HTTP on a loopback address, presenting an operator's certificate
// to the dashboard for it: headless Chromium cannot pick a client
// certificate without a managed policy. The browser's Host and Origin
// pass unchanged, so the dashboard's same-origin check of a drain sees the
// page's own.
func viewerProxy(t *testing.T, dashURL string) string {
	t.Helper()
	u, err := url.Parse(dashURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "https" {
		t.Fatalf("the dashboard serves %s, want https (mutual TLS)", dashURL)
	}
	// A browser without a certificate of the group is refused.
	bare := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer bare.CloseIdleConnections()
	resp, err := (&http.Client{Transport: bare, Timeout: 10 * time.Second}).Get(dashURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the dashboard answered a viewer without a certificate %d, want 401", resp.StatusCode)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	tr := sourceFor(t, certs.Operator, "e2e").HTTPTransport(certs.Operator, certs.Lookup)
	t.Cleanup(tr.CloseIdleConnections)
	rp.Transport = tr
	rp.FlushInterval = -1 // the page's event stream
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + lis.Addr().String() + "/"
}

// threeOwners starts a Manager with fast timings and three kv servers,
// kv-1 to kv-3, as real processes, for the dashboard's browser tests.
func threeOwners(t *testing.T) (leasehold, addr string, c *cli, servers map[string]*proc) {
	t.Helper()
	leasehold, kvBin := build(t)
	mgr := start(t, "manager", leasehold, "manager", "--listen", "127.0.0.1:0", "--timings", "fast")
	line := mgr.waitLine(t, "leasehold manager listening on ", 10*time.Second)
	addr, _, _ = strings.Cut(strings.TrimPrefix(line, "leasehold manager listening on "), " ")
	c = &cli{t: t, leasehold: leasehold, kv: kvBin, manager: addr}
	servers = map[string]*proc{}
	for _, id := range []string{"kv-1", "kv-2", "kv-3"} {
		servers[id] = c.serve(id)
	}
	return leasehold, addr, c, servers
}
