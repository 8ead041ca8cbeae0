package kv_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold/lookup"
	"github.com/leasehold/leasehold/protocol"
)

// scrape is one scrape in the text format: each series (name and labels as
// written) and its value.
type scrape map[string]float64

// get sums the series of name whose labels contain every one of labels
// (`key="value"`).
func (s scrape) get(name string, labels ...string) (float64, bool) {
	sum, found := 0.0, false
	for series, v := range s {
		n, rest, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		if match {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

func parseScrape(t *testing.T, r io.Reader) scrape {
	t.Helper()
	out := scrape{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func scrapeURL(t *testing.T, c *cluster, url string) scrape {
	t.Helper()
	resp, err := c.httpGet(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return parseScrape(t, resp.Body)
}

func scrapeRegistry(t *testing.T, reg *prometheus.Registry) scrape {
	t.Helper()
	rec := &responseRecorder{header: http.Header{}}
	req, _ := http.NewRequest("GET", "/metrics", nil)
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, req)
	return parseScrape(t, &rec.body)
}

type responseRecorder struct {
	header http.Header
	body   bytes.Buffer
}

func (r *responseRecorder) Header() http.Header         { return r.header }
func (r *responseRecorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *responseRecorder) WriteHeader(int)             {}

// TestMetricsMove runs a Manager, two kv servers and a Lookup, and checks
// that the series operators alert on exist and move: the Manager's and the
// Owners' renewal histograms count renewals, and abandoning one server (no
// drain) raises the Manager's loss counter and the Lookup's, and its
// changes' propagation to the Lookup is measured, while the
// other server's Owner keeps every lease and refuses nothing.
func TestMetricsMove(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := startVirtual(t)
		mreg := prometheus.NewRegistry()
		mreg.MustRegister(c.srv.Collector())
		a := c.startServer(t, "kv-a")
		b := c.startServer(t, "kv-b")
		c.settle(t, "kv-a", "kv-b")
		lreg := prometheus.NewRegistry()
		l, err := lookup.New(context.Background(), lookup.Config{Connection: c.conn(lreg)})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if err := l.WaitSynced(t.Context()); err != nil {
			t.Fatal(err)
		}

		m1, a1 := scrapeRegistry(t, mreg), scrapeURL(t, c, "http://"+a.Addr()+"/metrics")
		time.Sleep(3 * protocol.Fast().Renew) // a few renewals
		m2, a2 := scrapeRegistry(t, mreg), scrapeURL(t, c, "http://"+a.Addr()+"/metrics")
		rise := func(what string, s1, s2 scrape, name string, labels ...string) float64 {
			t.Helper()
			v1, ok1 := s1.get(name, labels...)
			v2, ok2 := s2.get(name, labels...)
			if !ok1 || !ok2 {
				t.Fatalf("%s: no series %s%v", what, name, labels)
			}
			if v2 <= v1 {
				t.Errorf("%s: %s%v did not rise (%g, then %g)", what, name, labels, v1, v2)
			}
			return v2 - v1
		}
		rise("manager", m1, m2, "leasehold_renewal_answer_seconds_count")
		rise("manager", m1, m2, "leasehold_lease_requests_total")
		rise("manager", m1, m2, "leasehold_grpc_server_msg_received_total", `grpc_method="Session"`)
		rise("owner kv-a", a1, a2, "leasehold_owner_renewal_seconds_count")
		for _, name := range []string{"leasehold_raft_is_leader", "leasehold_ready", "leasehold_raft_has_quorum"} {
			if v, _ := m2.get(name); v != 1 {
				t.Errorf("manager: %s = %g, want 1", name, v)
			}
		}
		if v, ok := a2.get("leasehold_owner_lease_remaining_seconds", `owner="kv-a"`); !ok || v <= 0 || v > protocol.Fast().OwnerLease.Seconds() {
			t.Errorf("owner kv-a: lease remaining %g (present %v), want within (0, %s]", v, ok, protocol.Fast().OwnerLease)
		}
		if v, _ := a2.get("leasehold_owner_ranges"); v == 0 {
			t.Error("owner kv-a: holds no ranges")
		}
		l1 := scrapeRegistry(t, lreg)
		if v, ok := l1.get("leasehold_lookup_copy_age_seconds"); !ok || v > protocol.Fast().SyncTimeout.Seconds() {
			t.Errorf("lookup: copy age %g (present %v), want under the sync timeout", v, ok)
		}

		abandonServer(t, b)
		c.settle(t, "kv-a")
		time.Sleep(protocol.Fast().Sync) // the Lookup hears of it
		m3, a3, l3 := scrapeRegistry(t, mreg), scrapeURL(t, c, "http://"+a.Addr()+"/metrics"), scrapeRegistry(t, lreg)
		rise("manager", m2, m3, "leasehold_loss_notifications_total", `namespace="default"`)
		rise("lookup", l1, l3, "leasehold_lookup_losses_total")
		rise("manager", m2, m3, "leasehold_propagation_seconds_count")
		if v1, _ := a2.get("leasehold_owner_check_refusals_total"); true {
			if v3, _ := a3.get("leasehold_owner_check_refusals_total"); v3 != v1 {
				t.Errorf("owner kv-a: CheckLeaseNow refusals went from %g to %g though it lost nothing", v1, v3)
			}
		}
		if v2, _ := a2.get("leasehold_owner_ranges"); true {
			if v3, _ := a3.get("leasehold_owner_ranges"); v3 < v2 {
				t.Errorf("owner kv-a: ranges held fell from %g to %g", v2, v3)
			}
		}
	})
}
