package cli

import (
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// defaultGCPercent is the Manager's GOGC when neither --gc-percent nor the
// GOGC environment variable says otherwise: 50, where Go's own is 100.
// Most of a large Manager's heap is its idle Lookups' state, which lives
// as long as they do and allocates little, so the collector's headroom,
// GOGC percent of the live heap and the stacks, is most of what an idle
// Lookup costs beyond what it holds: at 100 an idle Lookup's Watch costs
// the Manager's resident set 15–16 KiB, at 75 14–16.6, at 50 11–12, for
// collections twice as often as at 100, whose CPU the measurements did
// not resolve from the runs' spread (docs/results.md, "A fourth pass:
// Watch and Poll, and the Manager's GOGC").
const defaultGCPercent = 50

// gcOff is what --gc-percent takes for "no proportional collection", as
// GOGC=off is to Go: only a memory limit then starts a collection.
const gcOff = -1

// minMemoryLimit is the smallest --memory-limit taken: a Manager with no
// client at all holds about 20-30 MB (its tables, gRPC, the runtime), and
// a limit below what it holds makes the collector run back to back from
// the start, up to half the CPU (Go's limit on it), for nothing.
const minMemoryLimit = 64 << 20

// addGCFlag adds --gc-percent and --memory-limit, the Go collector's GOGC
// and GOMEMLIMIT for the Manager.
//
// A Manager's memory is mostly its idle streams: each holds a goroutine
// (a Lookup's Watch 4 KB of stack, an Owner's stream 8 KB, parked in
// gRPC's Recv) and about 4 KB of heap, and Go
// lets the heap grow by GOGC percent of the live heap and of the stacks it
// scanned before it collects again, so at GOGC=100 an idle stream costs
// about as much again in headroom as it holds (docs/results.md, "Memory and
// CPU per stream at the Manager"). A lower value collects more often: less
// memory per stream for more CPU, at every size.
//
// A memory limit bounds the headroom instead of scaling it: Go collects
// when the heap would take the process's Go memory past the limit, so
// below it the collector runs as GOGC says and near it as often as it
// must. The headroom is so bounded at no CPU cost while there is room, and
// at a growing one as what the Manager holds nears the limit (up to half
// of the CPU: past that Go lets the limit be exceeded rather than stall).
func (o *managerOptions) addGCFlag(f *pflag.FlagSet) {
	f.IntVar(&o.gcPercent, "gc-percent", defaultGCPercent, "the Go collector's GOGC for this process: collect once the heap has grown by `N` percent of what the last collection kept and the stacks it scanned, N at least 1; lower trades CPU for memory; -1: off, only a --memory-limit starts a collection (default: the GOGC environment variable if set, else 50)")
	f.StringVar(&o.memoryLimit, "memory-limit", "", "a soft limit on the Go memory of this process, `SIZE` in bytes or with a unit B, KiB, MiB, GiB or TiB (as GOMEMLIMIT), at least 64MiB: the collector runs as often as it must to stay under it, so the heap's headroom is bounded, at a CPU cost that grows as what the Manager holds nears the limit (default: the GOMEMLIMIT environment variable if set, else none)")
}

// checkGC refuses a --gc-percent or --memory-limit Go would take but that
// no Manager should run with: 0 collects continuously, a negative value
// other than -1 means off in a way that reads as a typo, and off without a
// limit lets the heap grow without bound.
func (o *managerOptions) checkGC() error {
	if o.set("gc-percent") {
		switch p := o.gcPercent; {
		case p == 0:
			return usagef("--gc-percent 0 would collect continuously: want a percentage of at least 1 (Go's default is 100), or -1 (off) with --memory-limit")
		case p < gcOff:
			return usagef("--gc-percent %d: want a percentage of at least 1, or -1 for off (with --memory-limit)", p)
		case p == gcOff && o.memoryLimit == "":
			return usagef("--gc-percent -1 turns the collector off, which without --memory-limit lets the heap grow without bound: give --memory-limit too")
		}
	}
	if o.memoryLimit != "" {
		n, err := parseMemoryLimit(o.memoryLimit)
		if err != nil {
			return usagef("--memory-limit %q: %v", o.memoryLimit, err)
		}
		if n < minMemoryLimit {
			return usagef("--memory-limit %s is under 64MiB, less than a Manager holds with no client: the collector would run without end", o.memoryLimit)
		}
		o.memoryLimitBytes = n
	}
	return nil
}

// parseMemoryLimit parses a size as GOMEMLIMIT does: a non-negative
// integer of bytes, optionally followed by B, KiB, MiB, GiB or TiB.
func parseMemoryLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	num, shift := s, uint(0)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = rest, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want a number of bytes, optionally with a unit B, KiB, MiB, GiB or TiB (512MiB, 2GiB)")
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("too large")
	}
	return n << shift, nil
}

// applyGC sets the collector's GOGC from --gc-percent, or from its default
// when GOGC is not in the environment (which the runtime has applied), and
// its memory limit from --memory-limit (else GOMEMLIMIT, as the runtime
// applied it). checkGC has accepted both.
func (o *managerOptions) applyGC(log *slog.Logger, getenv func(string) string) {
	if o.memoryLimitBytes > 0 {
		if old := debug.SetMemoryLimit(o.memoryLimitBytes); old != o.memoryLimitBytes {
			log.Info("garbage collector", "memory_limit", o.memoryLimit)
		}
	}
	if !o.set("gc-percent") && getenv("GOGC") != "" {
		return
	}
	if old := debug.SetGCPercent(o.gcPercent); old != o.gcPercent {
		log.Info("garbage collector", "gc_percent", o.gcPercent, "was", fmt.Sprint(old))
	}
}
