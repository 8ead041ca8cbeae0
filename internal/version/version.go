// Package version says which build of leasehold is running: the module
// version and the VCS revision the go command stamped into the binary
// (runtime/debug.ReadBuildInfo), and the Go version it was built with.
// leasehold version prints it, every Manager replica reports it in its
// Status answers (leasehold status shows it per replica) and exports it as
// the leasehold_build_info metric, so a rolling upgrade can be followed
// replica by replica (docs/operations.md#upgrades).
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Info is one build's identity. Fields the build did not record are empty.
type Info struct {
	// Module is the main module's path, Version its version:
	// "v1.2.0" for a tagged release built with go install …@v1.2.0, a
	// pseudo-version, or "(devel)" for a build from a working tree.
	Module, Version string
	// Revision is the VCS commit, Time its time (RFC 3339), and Modified
	// says the working tree had uncommitted changes; all empty or false
	// when the go command stamped no VCS information (go run, go test, or
	// -buildvcs=false).
	Revision, Time string
	Modified       bool
	// Go is the Go version the binary was built with.
	Go string
}

var (
	once sync.Once
	info Info
)

// stamped is a version the build set with the linker
// (-ldflags "-X github.com/leasehold/leasehold/internal/version.stamped=v1.2.3",
// or a main package's own variable passed to Stamp), as the image's build
// does: a binary built from a source tree without VCS information would
// otherwise say "(devel)".
var stamped string

// Stamp sets the module version Get reports, overriding the go command's
// record; an empty v changes nothing. Call it before the first Get.
func Stamp(v string) {
	if v != "" {
		stamped = v
	}
}

// Get returns this binary's Info, read once.
func Get() Info {
	once.Do(func() {
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			info = Info{Version: "unknown"}
		} else {
			info = FromBuildInfo(bi)
		}
		if stamped != "" {
			info.Version = stamped
		}
	})
	return info
}

// FromBuildInfo extracts an Info from bi.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	i := Info{Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// Short is the version in one word: the module version when it is a
// release or a pseudo-version, else the first 12 digits of the revision
// (with "+modified" for a tree with changes), else "(devel)".
func (i Info) Short() string {
	if i.Version != "" && i.Version != "(devel)" && i.Version != "unknown" {
		return i.Version
	}
	if i.Revision != "" {
		r := i.Revision[:min(12, len(i.Revision))]
		if i.Modified {
			r += "+modified"
		}
		return r
	}
	if i.Version != "" {
		return i.Version
	}
	return "(devel)"
}

// String is the version line leasehold version prints:
//
//	leasehold v1.2.0 (revision 0123456789ab, 2026-11-28T12:00:00Z) go1.26.0
//	leasehold (devel) (revision 0123456789ab, modified, 2026-11-28T12:00:00Z) go1.26.0
func (i Info) String() string {
	var b strings.Builder
	b.WriteString("leasehold ")
	b.WriteString(i.Version)
	if i.Version == "" {
		b.WriteString("(devel)")
	}
	var vcs []string
	if i.Revision != "" {
		vcs = append(vcs, "revision "+i.Revision)
	} else {
		vcs = append(vcs, "no VCS information")
	}
	if i.Modified {
		vcs = append(vcs, "modified")
	}
	if i.Time != "" {
		vcs = append(vcs, i.Time)
	}
	fmt.Fprintf(&b, " (%s)", strings.Join(vcs, ", "))
	if i.Go != "" {
		b.WriteString(" " + i.Go)
	}
	return b.String()
}

// Collector exports i as leasehold_build_info{version,revision,go} 1.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasehold_build_info",
		Help: "Always 1; its labels say which build runs: version (the module version, or the revision's first 12 digits for a build from a working tree), revision (the VCS commit, with +modified for uncommitted changes) and go (the Go version).",
		ConstLabels: prometheus.Labels{
			"version":  i.Short(),
			"revision": i.revision(),
			"go":       i.Go,
		},
	})
	g.Set(1)
	return g
}

func (i Info) revision() string {
	if i.Modified && i.Revision != "" {
		return i.Revision + "+modified"
	}
	return i.Revision
}
