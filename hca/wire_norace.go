//go:build !race

package hca

// Without the race detector the socket's own ordering is all there is
// (wire_race.go).

func wireRelease() {}
func wireAcquire() {}
