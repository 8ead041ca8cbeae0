//go:build !race

package testwait

const raceEnabled = false
