//go:build unix

package agent

import "golang.org/x/sys/unix"

// monoNow reads the host's CLOCK_MONOTONIC in nanoseconds: the clock the
// application reads (Python's time.monotonic() on Linux is
// clock_gettime(CLOCK_MONOTONIC); time.get_clock_info("monotonic") says so).
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("agent: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// monoSupported says whether this platform has the clock the contract names.
const monoSupported = true
