//go:build !unix

package agent

import "time"

var start = time.Now()

// monoNow stands in for CLOCK_MONOTONIC where there is none: New refuses
// to run (monoSupported), so no application ever compares with it.
func monoNow() int64 { return int64(time.Since(start)) }

const monoSupported = false
