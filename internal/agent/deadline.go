package agent

import "time"

// deadline converts an Owner lease's expiry into a deadline on the host's
// CLOCK_MONOTONIC, in nanoseconds, never later than the expiry itself.
//
// The expiry is a time.Time with Go's monotonic reading, which on Linux is
// CLOCK_MONOTONIC less a constant of this process (the runtime's
// nanotime), so the absolute value cannot be read off it. The difference
// can: CLOCK_MONOTONIC is read first (m), then the time left (rest, which
// reads the Go clock at an instant n ≥ m on the same clock). The deadline
// m + rest = expiry − (n − m) is then at most the expiry, early by the
// few hundred nanoseconds between the two reads. The application's reading
// of the same clock reaches it no later than the Owner's own
// CheckLeaseNow stops holding: single copy holds as for a linked server,
// under the same MaxDrift assumption between this host and the Manager
// (docs/agent.md).
func deadline(expiry time.Time) int64 {
	m := monoNow()
	rest := time.Until(expiry)
	if rest < 0 {
		rest = 0
	}
	return m + int64(rest)
}
