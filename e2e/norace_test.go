//go:build !race

package e2e_test

// raceEnabled is true when the suite runs with -race; the binaries under
// test are then built with the race detector too.
const raceEnabled = false
