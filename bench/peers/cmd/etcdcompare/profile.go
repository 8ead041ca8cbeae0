package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// profileOnSignal runs in the server child: SIGUSR1 starts a CPU profile and
// writes the cumulative allocation profile; SIGUSR2 stops the CPU profile
// and writes the allocation profile again, so that
// `go tool pprof -base <prefix>-allocs-start.pprof <prefix>-allocs-end.pprof`
// shows the allocations of the measured window alone.
func profileOnSignal(prefix string) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	var cpu *os.File
	for s := range sig {
		switch s {
		case syscall.SIGUSR1:
			writeAllocs(prefix + "-allocs-start.pprof")
			f, err := os.Create(prefix + "-cpu.pprof")
			if err == nil && pprof.StartCPUProfile(f) == nil {
				cpu = f
			} else {
				fmt.Fprintf(os.Stderr, "cpu profile: %v\n", err)
			}
		case syscall.SIGUSR2:
			if cpu != nil {
				pprof.StopCPUProfile()
				cpu.Close()
				cpu = nil
			}
			writeAllocs(prefix + "-allocs-end.pprof")
		}
	}
}

func writeAllocs(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "allocs profile: %v\n", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		fmt.Fprintf(os.Stderr, "allocs profile: %v\n", err)
	}
}
