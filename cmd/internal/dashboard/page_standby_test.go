package dashboard

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/internal/browser"
)

// pageShowsStandbys opens the page in b, a headless Chromium, on a
// namespace with standbys and checks the owners' table shows each Owner's
// zone and the ranges it stands by for, in sync over named, marked while
// filling. TestPageAtScale runs it, in its Chromium: starting one costs
// seconds of CPU, and go test ./... starts one for the package.
func pageShowsStandbys(t *testing.T, b *browser.Browser) {
	src := newFakeSource(7, 4, 8)
	src.mu.Lock()
	ns := &src.status.Namespaces[0]
	ns.Standbys = 1
	zones := []string{"zone-a", "zone-b", "zone-a", "zone-b"}
	for i := range ns.Owners {
		ns.Owners[i].Zone = zones[i]
		ns.Owners[i].StandbyRanges = 8
		ns.Owners[i].StandbyInSync = 8
	}
	ns.Owners[3].StandbyInSync = 5 // filling after a promotion
	src.mu.Unlock()
	hub, err := NewHub(Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	hub.Poll(t.Context())
	hub.Build()
	srv := httptest.NewServer(hub.Handler("fake"))
	defer func() {
		b.Do("leave the page", chromedp.Navigate("about:blank"))
		srv.CloseClientConnections()
		srv.Close()
	}()
	b.Do("open the page", chromedp.Navigate(srv.URL))
	if _, ok := b.WaitTrue(`document.querySelectorAll("#owners td.standby").length === 4`, 30*time.Second); !ok {
		t.Fatalf("the owners' table shows no standby column: %q", b.Text(`document.querySelector("#owners").outerHTML`))
	}
	for _, c := range []struct{ owner, zone, standby string }{
		{"owner-00000", "zone-a", "8/8"},
		{"owner-00001", "zone-b", "8/8"},
		{"owner-00003", "zone-b", "5/8 filling"},
	} {
		row := `document.querySelector('#owners tr[data-owner="` + c.owner + `"]')`
		if z := b.Text(row + `.querySelector("td.zone").textContent`); z != c.zone {
			t.Errorf("%s: zone %q, want %q", c.owner, z, c.zone)
		}
		if s := b.Text(row + `.querySelector("td.standby").textContent`); s != c.standby {
			t.Errorf("%s: standby %q, want %q", c.owner, s, c.standby)
		}
	}
	if n, _ := browser.Eval[int](b, `document.querySelectorAll("#owners td.standby.filling").length`); n != 1 {
		t.Errorf("%d Owners marked filling, want 1", n)
	}
}
