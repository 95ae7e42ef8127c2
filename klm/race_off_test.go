//go:build !race

package klm_test

// raceEnabled is set when the race detector is on: tests then do fewer
// iterations and skip allocation counts.
const raceEnabled = false
