package cli

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/spf13/pflag"
)

// defaultGCPercent is the Manager's GOGC when neither --gc-percent nor the
// GOGC environment variable says otherwise: Go's own default.
const defaultGCPercent = 100

// addGCFlag adds --gc-percent, the Go collector's GOGC for the Manager.
//
// A Manager's memory is mostly its idle streams: each holds a goroutine
// parked in gRPC's Recv (8 KB of stack) and about 4 KB of heap, and Go
// lets the heap grow by GOGC percent of the live heap and of the stacks it
// scanned before it collects again, so at GOGC=100 an idle stream costs
// about as much again in headroom as it holds (docs/results.md, "Memory and
// CPU per stream at the Manager"). A lower value collects more often: less
// memory per stream for more CPU, which idle streams, allocating little,
// make cheap.
func (o *managerOptions) addGCFlag(f *pflag.FlagSet) {
	f.IntVar(&o.gcPercent, "gc-percent", defaultGCPercent, "the Go collector's GOGC for this process: collect once the heap has grown by `N` percent of what the last collection kept and the stacks it scanned; lower trades CPU for memory (default: the GOGC environment variable if set, else 100; negative: off)")
}

// applyGC sets the collector's GOGC from --gc-percent, or from its default
// when GOGC is not in the environment (which the runtime has applied).
func (o *managerOptions) applyGC(log *slog.Logger, getenv func(string) string) {
	if !o.set("gc-percent") && getenv("GOGC") != "" {
		return
	}
	if old := debug.SetGCPercent(o.gcPercent); old != o.gcPercent {
		log.Info("garbage collector", "gc_percent", o.gcPercent, "was", fmt.Sprint(old))
	}
}
