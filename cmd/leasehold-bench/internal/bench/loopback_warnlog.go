package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// warnLogEnv names a folder the Owners' and Lookups' processes write their
// clients' warnings to (warnings-PID.log, JSON lines, at most
// warnLogMax of them), beside counting them: a stream that broke says
// there why (the status the Manager or the transport gave), which the
// count alone does not. Unset, the warnings are only counted.
const warnLogEnv = "LEASEHOLD_BENCH_WARNINGS_DIR"

// warnLogMax bounds a process's warnings file: a point whose streams
// break by the hundred thousand would otherwise fill the disk.
const warnLogMax = 100_000

var warnLog struct {
	once sync.Once
	mu   sync.Mutex
	h    slog.Handler // nil: not written
	n    int
}

// logWarning writes r to this process's warnings file, if there is one.
func logWarning(ctx context.Context, r slog.Record) {
	warnLog.once.Do(func() {
		dir := os.Getenv(warnLogEnv)
		if dir == "" {
			return
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("warnings-%d.log", os.Getpid())))
		if err != nil {
			fmt.Fprintf(os.Stderr, "loopback: %s: %v\n", warnLogEnv, err)
			return
		}
		warnLog.h = slog.NewJSONHandler(f, nil)
	})
	if warnLog.h == nil {
		return
	}
	warnLog.mu.Lock()
	defer warnLog.mu.Unlock()
	if warnLog.n < warnLogMax {
		warnLog.n++
		_ = warnLog.h.Handle(ctx, r)
	}
}
