package version

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/leasehold/leasehold", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
			{Key: "vcs.time", Value: "2026-11-28T12:00:00Z"}}}
	i := FromBuildInfo(bi)
	if got, want := i.String(), "leasehold (devel) (revision 0123456789abcdef0123, modified, 2026-11-28T12:00:00Z) go1.26.0"; got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}
	if got, want := i.Short(), "0123456789ab+modified"; got != want {
		t.Errorf("Short() = %q; want %q", got, want)
	}
	rel := FromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.0"}})
	if got, want := rel.String(), "leasehold v1.2.0 (no VCS information) go1.26.0"; got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}
	if got := rel.Short(); got != "v1.2.0" {
		t.Errorf("Short() = %q; want v1.2.0", got)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(i.Collector())
	n, err := testutil.GatherAndCount(reg, "leasehold_build_info")
	if err != nil || n != 1 {
		t.Fatalf("leasehold_build_info: %d series, %v", n, err)
	}
	mfs, _ := reg.Gather()
	labels := map[string]string{}
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != "0123456789ab+modified" || labels["revision"] != "0123456789abcdef0123+modified" || labels["go"] != "go1.26.0" {
		t.Errorf("labels %v", labels)
	}
	if !strings.HasPrefix(Get().Go, "go") {
		t.Errorf("Get() = %+v; want the Go version at least", Get())
	}
}
