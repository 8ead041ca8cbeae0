// Package browser drives a headless Chromium from Go tests, through
// chromedp: open a page, wait for what it shows, click, take screenshots.
// Tests that need it skip, saying why, when no Chromium is installed
// (Debian's chromium package; .ci/run installs it).
package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ArtifactsEnv names the environment variable of the directory screenshots
// are saved in; unset, they go to a temporary directory the test logs.
const ArtifactsEnv = "LEASEHOLD_ARTIFACTS"

// Path returns the Chromium to run, or "" if none is installed.
func Path() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser is one headless Chromium with one tab.
type Browser struct {
	t         *testing.T
	Ctx       context.Context // chromedp's: pass it to chromedp.Run
	artifacts string
}

// New starts a headless Chromium of width × height pixels, stopped when the
// test ends, or skips the test when Chromium is not installed.
func New(t *testing.T, width, height int) *Browser {
	t.Helper()
	path := Path()
	if path == "" {
		t.Skip("no Chromium installed (apt-get install chromium): the browser test cannot run")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests may run as root in a container
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(width, height),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		acancel()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	dir := os.Getenv(ArtifactsEnv)
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &Browser{t: t, Ctx: ctx, artifacts: dir}
}

// In returns b reporting to t, a subtest of the test that started it: the
// same Chromium and tab, whose failures fail t. A Chromium takes seconds of
// CPU to start, so the checks of one page share one.
func (b *Browser) In(t *testing.T) *Browser {
	c := *b
	c.t = t
	return &c
}

// Do runs chromedp actions, failing the test on an error.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Eval evaluates a JavaScript expression into out.
func Eval[T any](b *Browser, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// WaitTrue polls the JavaScript expression expr, a boolean, every 50 ms
// until it is true or timeout passes; it returns when it turned true and
// whether it did.
func (b *Browser) WaitTrue(expr string, timeout time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if ok, err := Eval[bool](b, expr); err == nil && ok {
			return time.Now(), true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clicks numbers the clicks Click makes.
var clicks atomic.Int64

// Click clicks the first element matching the CSS selector sel, in one step
// of the page's own script, waiting up to 5 s for one to be there; what
// names the step in the failure. A page that redraws itself (the
// dashboard's Owners table, at every refresh) may drop a node between
// chromedp finding it and clicking it ("Could not find node with given
// id"); in one evaluation it cannot. WaitTrue evaluates again when an
// evaluation fails, which it may after the click (its deadline, on a
// loaded machine), so the page remembers the click by its number and never
// makes it twice: a second click can undo the first (a checkbox) or
// confirm what the first armed (a drain).
func (b *Browser) Click(what, sel string) {
	b.t.Helper()
	quoted, err := json.Marshal(sel)
	if err != nil {
		b.t.Fatal(err)
	}
	n := clicks.Add(1)
	js := fmt.Sprintf(`(() => { if (window.leaseholdClick === %d) { return true; }
		const e = document.querySelector(%s); if (e === null) { return false; }
		window.leaseholdClick = %d; e.click(); return true; })()`, n, quoted, n)
	if _, ok := b.WaitTrue(js, 5*time.Second); !ok {
		b.t.Fatalf("%s: nothing on the page matches %s", what, sel)
	}
}

// Screenshot saves what the window shows as a PNG named name in the artifacts
// directory and returns its path.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.artifacts, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

// Text returns the JavaScript expression's string value, or the error.
func (b *Browser) Text(expr string) string {
	s, err := Eval[string](b, expr)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return s
}
