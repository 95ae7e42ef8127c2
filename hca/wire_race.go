//go:build race

package hca

import "sync/atomic"

// wireHB tells the race detector what a UDP send and the receive of its
// datagram order (the socket's syscalls do, but the detector does not see
// them): what a device wrote before sending a packet happens before what
// the receiving device does with it, as on the in-process fabric's queues.
var wireHB atomic.Uint64

func wireRelease() { wireHB.Add(1) }
func wireAcquire() { wireHB.Load() }
