package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cmd/internal/dashboard"
)

// dashView is the part of a dashboard view these tests read.
type dashView struct {
	Namespaces []struct {
		Name    string   `json:"name"`
		Holders []string `json:"holders"`
		Owners  []struct {
			ID       string `json:"id"`
			Addr     string `json:"addr"`
			Ranges   int    `json:"ranges"`
			Draining bool   `json:"draining"`
		} `json:"owners"`
	} `json:"namespaces"`
	Managers []struct {
		Role string `json:"role"`
	} `json:"managers"`
	Events []struct {
		Kind   string   `json:"kind"`
		Owners []string `json:"owners"`
		Text   string   `json:"text"`
	} `json:"events"`
}

// TestDashboardCommand runs leasehold dashboard against a Manager in this
// process: its views follow the table, and its drain goes to the Manager
// and comes back with the Manager's answer, refusal included.
func TestDashboardCommand(t *testing.T) {
	// The Manager starts before t.Parallel, so that its start-up reservation
	// runs out while the test waits for its turn (TestMain).
	addr := startManager(t)
	t.Parallel()
	startOwner(t, addr, "o-1", "127.0.0.1:1")
	startOwner(t, addr, "o-2", "127.0.0.1:2")
	d := startCLI(t, "dashboard", "--manager", addr, "--listen", "127.0.0.1:0", "--refresh", "200ms")
	waitFor(t, "the dashboard to listen", 10*time.Second, func() bool {
		return strings.Contains(d.stdout.String(), "leasehold dashboard on http://")
	})
	url := strings.Fields(strings.TrimPrefix(d.stdout.String(), "leasehold dashboard on "))[0]

	get := func() dashView {
		resp, err := http.Get(url + "api/view")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v dashView
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return v
	}
	// Both Owners are on the ring, and the dashboard's status poll has
	// named them (an Owner only in the table has no address): the drain
	// below must come after that poll, or the next one sees o-1 new and
	// draining at once, which the timeline records as joined only.
	waitFor(t, "both Owners on the ring and in the status", 10*time.Second, func() bool {
		v := get()
		if len(v.Namespaces) != 1 || !slices.Equal(v.Namespaces[0].Holders, []string{"o-1", "o-2"}) ||
			len(v.Managers) == 0 || v.Managers[0].Role != "leader" {
			return false
		}
		named := 0
		for _, o := range v.Namespaces[0].Owners {
			if o.Addr != "" {
				named++
			}
		}
		return named == 2
	})

	drain := func(id string) (ok bool, answer string) {
		req, _ := http.NewRequest("POST", url+"api/drain", strings.NewReader(`{"namespace":"default","owner":"`+id+`"}`))
		req.Header.Set(dashboard.ActionHeader, "drain")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var a struct {
			OK     bool   `json:"ok"`
			Answer string `json:"answer"`
		}
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("drain %s: %s", id, b)
		}
		return a.OK, a.Answer
	}
	if ok, a := drain("o-9"); ok || !strings.Contains(a, `cannot drain o-9: no live owner "o-9"`) {
		t.Errorf("drain of an unknown Owner: ok %v, answer %q; want the Manager's refusal", ok, a)
	}
	if ok, a := drain("o-1"); !ok || !strings.HasPrefix(a, "draining o-1 in namespace default") {
		t.Errorf("drain o-1: ok %v, answer %q", ok, a)
	}
	var last dashView
	defer func() {
		if t.Failed() {
			t.Logf("the last view: %+v", last)
		}
	}()
	waitFor(t, "o-1 drained", 15*time.Second, func() bool {
		v := get()
		last = v
		kinds := map[string]bool{}
		for _, e := range v.Events {
			if slices.Contains(e.Owners, "o-1") || slices.Contains(e.Owners, "o-9") {
				kinds[e.Kind] = true
			}
		}
		return len(v.Namespaces) == 1 && slices.Equal(v.Namespaces[0].Holders, []string{"o-2"}) &&
			kinds["drain"] && kinds["draining"] && kinds["refused"]
	})
	if code := d.stop(t); code != ExitOK {
		t.Errorf("dashboard exited %d on interrupt, want 0; stderr:\n%s", code, d.stderr.String())
	}
}

func TestDashboardUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--listen", "nonsense"}, ExitUsage, `--listen "nonsense": want host:port`},
		{[]string{"--listen", "127.0.0.1:70000"}, ExitUsage, `port "70000" is not a number from 0 to 65535`},
		{[]string{"--refresh", "1ms"}, ExitUsage, "--refresh 1ms: want at least 100ms"},
		{[]string{"--manager", closedAddr(t), "--listen", "127.0.0.1:0", "--timeout", "1s"}, ExitFailure, "cannot reach the manager"},
	} {
		code, _, stderr := cli(t, append([]string{"dashboard"}, c.args...)...)
		if code != c.code {
			t.Errorf("dashboard %v: exit %d, want %d (%s)", c.args, code, c.code, stderr)
		}
		oneErrorLine(t, stderr, c.want)
	}
}
