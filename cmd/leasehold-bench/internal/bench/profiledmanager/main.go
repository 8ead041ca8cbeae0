// Command profiledmanager is the leasehold command (cmd/leasehold) with a
// CPU profiler that signals switch on and off, for the loopback experiment
// of leasehold-bench (--manager-profile): SIGUSR1 starts a CPU profile
// into the directory LEASEHOLD_PROFILE_DIR names (cpu-1.prof, cpu-2.prof, …
// in order), SIGUSR2 stops it and writes the file, and
// beside it a heap profile taken then (heap-1.prof, …: live objects after a
// garbage collection), the number of goroutines (goroutines-1.txt, …) and
// the runtime's memory metrics, the resident set and the threads
// (memory-1.txt, …: stacks, live heap, free pages, VmRSS, Threads). The
// experiment profiles each measured window alone, not the start-up. It is
// not the production binary: cmd/leasehold has no profiler.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/leasehold/leasehold/cmd/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // a second signal kills at once
	if dir := os.Getenv("LEASEHOLD_PROFILE_DIR"); dir != "" {
		go profileOnSignal(ctx, dir)
	}
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func profileOnSignal(ctx context.Context, dir string) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	var f *os.File
	n := 0
	stopProfile := func() {
		if f != nil {
			pprof.StopCPUProfile()
			_ = f.Close()
			f = nil
		}
	}
	defer stopProfile()
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sig:
			stopProfile()
			if s != syscall.SIGUSR1 {
				writeHeap(dir, n)
				continue
			}
			n++
			gcAtStart = gcCPU()
			var err error
			if f, err = os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%d.prof", n))); err != nil {
				fmt.Fprintf(os.Stderr, "profiledmanager: %v\n", err)
				continue
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				fmt.Fprintf(os.Stderr, "profiledmanager: %v\n", err)
				_ = f.Close()
				f = nil
			}
		}
	}
}

// writeHeap writes the goroutine count, the runtime's memory metrics and
// the heap profile of window n, the heap last and under its final name only
// once complete: the bench waits for it before it stops the clients.
func writeHeap(dir string, n int) {
	_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("goroutines-%d.txt", n)), fmt.Appendf(nil, "%d\n", runtime.NumGoroutine()), 0o644)
	gc := gcCPU()
	m := fmt.Appendf(memoryMetrics(), "gc-cpu-seconds-in-window %.3f\ncpu-seconds-in-window %.3f\n", gc[0]-gcAtStart[0], gc[1]-gcAtStart[1])
	_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("memory-%d.txt", n)), m, 0o644)
	runtime.GC()
	name := filepath.Join(dir, fmt.Sprintf("heap-%d.prof", n))
	f, err := os.Create(name + ".tmp")
	if err != nil {
		return
	}
	_ = pprof.Lookup("heap").WriteTo(f, 0)
	if f.Close() == nil {
		_ = os.Rename(name+".tmp", name)
	}
}

// gcAtStart is gcCPU at the start of the window being profiled.
var gcAtStart [2]float64

// gcCPU is the CPU time the runtime estimates its collector has spent, and
// all the process's, since it started: the window's difference is what
// the collector cost in it (GOGC's price).
func gcCPU() [2]float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"}}
	metrics.Read(s)
	return [2]float64{s[0].Value.Float64(), s[1].Value.Float64()}
}

// memoryMetrics reads, before the profile's collection, where the
// process's memory is: goroutine stacks, live heap, the heap's free and
// released pages, and the size new goroutines' stacks start at (Go sizes it
// from the stacks it scanned unless GODEBUG adaptivestackstart=0). The
// stacks per goroutine and the live heap per stream of a point come from
// here.
func memoryMetrics() []byte {
	names := []string{
		"/sched/goroutines:goroutines",
		"/memory/classes/heap/stacks:bytes",
		"/gc/stack/starting-size:bytes",
		"/gc/heap/live:bytes",
		"/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/unused:bytes",
		"/memory/classes/heap/free:bytes",
		"/memory/classes/heap/released:bytes",
		"/memory/classes/total:bytes",
		"/gc/gogc:percent",
		"/gc/gomemlimit:bytes",
	}
	samples := make([]metrics.Sample, len(names))
	for i, name := range names {
		samples[i].Name = name
	}
	metrics.Read(samples)
	var b []byte
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			b = fmt.Appendf(b, "%s %d\n", s.Name, s.Value.Uint64())
		}
	}
	// And the resident set, to the KiB rather than the summary's MB, and
	// the OS threads (each holds 48 KB of stacks the runtime counts with
	// the goroutines').
	if st, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "Threads:") {
				b = fmt.Appendf(b, "%s %s\n", strings.TrimSuffix(f[0], ":"), strings.Join(f[1:], " "))
			}
		}
	}
	return b
}
