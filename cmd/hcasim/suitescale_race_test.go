//go:build race

package main

// suiteScale is the --time-scale of the daemons the suite runs against.
// The daemons are this test binary, built with the race detector and many
// times slower than otherwise: their timers keep a NIC's values.
const suiteScale = "1"
