package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSmoke runs every scenario at a tiny size and writes its output: the
// code of the long runs, in seconds.
func TestSmoke(t *testing.T) {
	smokeOnlyWithAll(t)
	for _, s := range Scenarios() {
		t.Run(s[0], func(t *testing.T) {
			t.Parallel()
			r, err := Run(context.Background(), s[0], Options{Size: Smoke})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			var out bytes.Buffer
			files, err := r.Write(dir, &out)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(out.String())
			pngs := 0
			for _, f := range files {
				st, err := os.Stat(f)
				if err != nil || st.Size() == 0 {
					t.Errorf("%s: missing or empty (%v)", f, err)
				}
				if filepath.Ext(f) == ".png" {
					pngs++
				}
			}
			if pngs != len(r.Figures) || pngs == 0 {
				t.Errorf("%d PNGs for %d figures", pngs, len(r.Figures))
			}
			for _, f := range r.Figures {
				if f.Paper == "" || f.Setup == "" || f.Ours == "" || f.Measured == "" || f.XLabel == "" || f.YLabel == "" {
					t.Errorf("figure %s lacks its paper, setup, measurement or axis labels", f.Name)
				}
				for _, s := range f.Series {
					if len(s.X) == 0 {
						t.Errorf("figure %s: series %q is empty", f.Name, s.Name)
					}
				}
			}
			if !strings.Contains(out.String(), "paper:") {
				t.Error("the summary does not cite the paper")
			}
		})
	}
}

func TestUnknownScenario(t *testing.T) {
	if _, err := Run(context.Background(), "nope", Options{Size: Smoke}); err == nil {
		t.Fatal("no error for an unknown scenario")
	}
}

// TestSmokeScaleBeyond: --beyond adds the points past 2,500 nodes (at smoke
// size, 12 Owners with 4 and with 10 Lookups each), each plotted in the
// series of its number of Lookups per Owner.
func TestSmokeScaleBeyond(t *testing.T) {
	smokeOnlyWithAll(t)
	t.Parallel()
	r, err := Run(context.Background(), "scale", Options{Size: Smoke, Beyond: true})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, row := range r.Table[1:] {
		rows = append(rows, row[0]+"/"+row[1]+"/"+row[3])
	}
	want := []string{"4/16/false", "8/32/false", "12/48/false", "12/120/false", "4/16/true", "8/32/true", "12/48/true", "12/120/true"}
	if !slices.Equal(rows, want) {
		t.Fatalf("points (owners/lookups/churn) %v, want %v", rows, want)
	}
	var names []string
	for _, s := range r.Figures[0].Series {
		names = append(names, fmt.Sprintf("%s: %d", s.Name, len(s.X)))
	}
	wantNames := []string{"no churn, 4 Lookups per Owner: 3", "no churn, 10 Lookups per Owner: 1",
		"churn (8 h mean lifetime), 4 Lookups per Owner: 3", "churn (8 h mean lifetime), 10 Lookups per Owner: 1"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("series %v, want %v", names, wantNames)
	}
	if _, err := r.Write(t.TempDir(), io.Discard); err != nil {
		t.Fatal(err)
	}
}

// TestSmokeScalePoint: Owners and Lookups run that one point (here without
// churn only) instead of the sweep.
func TestSmokeScalePoint(t *testing.T) {
	smokeOnlyWithAll(t)
	t.Parallel()
	r, err := Run(context.Background(), "scale", Options{Size: Smoke, Owners: 6, Lookups: 30, Churn: "off"})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, row := range r.Table[1:] {
		rows = append(rows, row[0]+"/"+row[1]+"/"+row[2]+"/"+row[3])
	}
	if want := []string{"6/30/thin/false"}; !slices.Equal(rows, want) {
		t.Fatalf("points (owners/lookups/copies/churn) %v, want %v", rows, want)
	}
	if m := r.Figures[0].Measured; !strings.Contains(m, "without churn") || strings.Contains(m, "with churn") {
		t.Fatalf("summary %q: want the point without churn only", m)
	}
}

// TestSmokeLoopbackTLS: with TLS the loopback Manager serves mutual TLS
// only (--certs-dir, no --insecure), so its Owners renew and its Lookups
// sync only over handshakes with their own certificates.
func TestSmokeLoopbackTLS(t *testing.T) {
	smokeOnlyWithAll(t)
	t.Parallel()
	r, err := Run(context.Background(), "loopback", Options{Size: Smoke, Churn: "off", TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Table) != 2 {
		t.Fatalf("%d rows, want the one window without churn", len(r.Table)-1)
	}
	if renewals := r.Table[1][8]; renewals == "0" {
		t.Fatalf("no renewal answered over TLS: %v", r.Table[1])
	}
	if col := slices.Index(r.Table[0], "manager answer p99"); col < 0 || r.Table[1][col] == "not read" {
		t.Fatalf("the Manager's metrics were not read over TLS with the operator certificate: %v", r.Table[1])
	}
	if !strings.Contains(r.Figures[0].Ours, "mutual TLS") {
		t.Fatalf("the setup does not say the run had TLS: %q", r.Figures[0].Ours)
	}
}

// smokeOnlyWithAll skips t unless LEASEHOLD_E2E=all, as internal/e2e's
// longer scenarios are: the experiments at a tiny size take about 20 s of a
// newcomer's go test ./..., and CI (.ci/run) runs them with the scenarios.
func smokeOnlyWithAll(t *testing.T) {
	t.Helper()
	if os.Getenv("LEASEHOLD_E2E") != "all" {
		t.Skip("run with LEASEHOLD_E2E=all (CI does): the experiments' smoke runs")
	}
}
