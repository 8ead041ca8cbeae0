//go:build race

package sim

// raceEnabled shortens the long simulations: the race detector makes every
// event about ten times dearer, and the point of a race run is the
// concurrency of the test harness, not more virtual time.
const raceEnabled = true
