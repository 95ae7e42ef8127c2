package remote_test

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/remote"
)

// PROTOCOL.md's answers to issue 14's questions, one test each: which
// rule wins before HELLO, the order of checks, reserved fields, and the
// status of a descriptor that is valid but unusable.

// TestBeforeHello: before HELLO, a packet refused as a frame (too short,
// a bad header, descriptors it may not carry) gets its ERROR and leaves
// the connection up, as after HELLO (§2 wins); a well-formed message of
// any type other than HELLO gets NOT_READY and closes it (§3). HELLO
// still works after the refused frames.
func TestBeforeHello(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)

	r := dialRaw(t, path)
	r.mustSend(make([]byte, 5))
	r.expectError("5 bytes before HELLO", 0, remote.StatusBadMessage)
	r.mustSend(header(uint16(remote.TypeCommand), 1, 3, 8, make([]byte, 8)))
	r.expectError("reserved header bits before HELLO", 3, remote.StatusBadMessage)
	fd := memfd(t, 4096, sealed)
	r.mustSend(remote.Encode(nil, remote.TypeCommand, 4, ifc.NewIn(ifc.CmdQueryHCACap, 8)), fd)
	r.expectError("a COMMAND with a descriptor before HELLO", 4, remote.StatusBadFD)
	fd2 := memfd(t, 4096, sealed)
	r.mustSend(remote.Encode(nil, remote.TypeHello, 5, helloPayload(remote.Magic, remote.Version)), fd, fd2)
	r.expectError("a HELLO with two descriptors", 5, remote.StatusBadFD)
	unix.Close(fd)
	unix.Close(fd2)
	r.hello()
	r.probe("HELLO after refused frames")

	// A well-formed MAP_MEM before HELLO, descriptor and all: NOT_READY.
	r = dialRaw(t, path)
	fd = memfd(t, 4096, sealed)
	r.mustSend(remote.Encode(nil, remote.TypeMapMem, 6, mapPayload(4096, 4096)), fd)
	unix.Close(fd)
	r.expectError("MAP_MEM before HELLO", 6, remote.StatusNotReady)
	r.expectClosed("MAP_MEM before HELLO")
}

// TestCheckOrder: when a message has several faults, the first check in
// PROTOCOL.md's order answers: header, descriptors it may not carry,
// payload length, payload fields (reserved ones too), MAP_MEM's missing or
// unusable descriptor, then limits.
func TestCheckOrder(t *testing.T) {
	dev := hca.New(hca.Options{Caps: withMaxMapped(1 << 20)})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	r := dialRaw(t, path)
	r.hello()
	unsealed := func() []int { return []int{memfd(t, 4096, 0)} }
	two := func() []int { return []int{memfd(t, 4096, sealed), memfd(t, 4096, sealed)} }
	none := func() []int { return nil }
	cases := []struct {
		name string
		pkt  []byte
		fds  func() []int
		id   uint32
		st   remote.Status
	}{
		{"wrong length field and two descriptors", header(uint16(remote.TypeMapMem), 0, 10, 99, mapPayload(4096, 4096)), two, 10, remote.StatusBadMessage},
		{"short packet and two descriptors", []byte{0, 3, 0}, two, 0, remote.StatusBadMessage},
		{"two descriptors and a short payload", remote.Encode(nil, remote.TypeMapMem, 11, make([]byte, 3)), two, 11, remote.StatusBadFD},
		{"RING_SQ: a descriptor and a short payload", remote.Encode(nil, remote.TypeRingSQ, 12, make([]byte, 2)), unsealed, 12, remote.StatusBadFD},
		{"MAP_MEM: a short payload and no descriptor", remote.Encode(nil, remote.TypeMapMem, 13, make([]byte, 8)), none, 13, remote.StatusBadMessage},
		{"MAP_MEM: size 0 and no descriptor", remote.Encode(nil, remote.TypeMapMem, 14, mapPayload(0, 4096)), none, 14, remote.StatusBadMessage},
		{"MAP_MEM: bad alignment and an unsealed memfd", remote.Encode(nil, remote.TypeMapMem, 15, mapPayload(4096, 3)), unsealed, 15, remote.StatusBadMessage},
		{"MAP_MEM: reserved set and an unsealed memfd", remote.Encode(nil, remote.TypeMapMem, 16, append(mapPayload(4096, 4096)[:12], 0, 0, 0, 1)), unsealed, 16, remote.StatusBadMessage},
		{"MAP_MEM: no descriptor", remote.Encode(nil, remote.TypeMapMem, 17, mapPayload(4096, 4096)), none, 17, remote.StatusBadFD},
		{"MAP_MEM: over the mapped-bytes cap with an unsealed memfd", remote.Encode(nil, remote.TypeMapMem, 18, mapPayload(2<<20, 4096)), func() []int { return []int{memfd(t, 2<<20, 0)} }, 18, remote.StatusBadFD},
		{"MAP_MEM: over the mapped-bytes cap", remote.Encode(nil, remote.TypeMapMem, 19, mapPayload(2<<20, 4096)), func() []int { return []int{memfd(t, 2<<20, sealed)} }, 19, remote.StatusNoMemory},
	}
	for _, c := range cases {
		fds := c.fds()
		r.mustSend(c.pkt, fds...)
		for _, fd := range fds {
			unix.Close(fd)
		}
		r.expectError(c.name, c.id, c.st)
		r.probe(c.name)
	}
}

// TestReservedFields: reserved fields of protocol messages are checked:
// a HELLO with its reserved field set is refused (BAD_MESSAGE, the
// connection closes, as every refused HELLO), a MAP_MEM with its reserved
// field set is refused (BAD_MESSAGE, the connection stays). The fields of
// a command mailbox are the device's (DEVICE.md): not checked here.
func TestReservedFields(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	for _, v := range []uint16{1, 0x8000} {
		r := dialRaw(t, path)
		p := helloPayload(remote.Magic, remote.Version)
		p[6], p[7] = byte(v>>8), byte(v)
		r.mustSend(remote.Encode(nil, remote.TypeHello, 1, p))
		r.expectError(fmt.Sprintf("HELLO with reserved %#x", v), 1, remote.StatusBadMessage)
		r.expectClosed("HELLO with a reserved field set")
	}
	// Another version with the field set: BAD_VERSION (the version is
	// checked first; another version may use the field).
	r := dialRaw(t, path)
	p := helloPayload(remote.Magic, remote.Version+1)
	p[7] = 1
	r.mustSend(remote.Encode(nil, remote.TypeHello, 2, p))
	r.expectError("HELLO of another version with reserved set", 2, remote.StatusBadVersion)
	r.expectClosed("HELLO of another version")
	r = dialRaw(t, path)
	r.hello()
	for i, v := range []uint32{1, 0x80000000} {
		p := mapPayload(4096, 4096)
		p[12], p[13], p[14], p[15] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
		fd := memfd(t, 4096, sealed)
		r.mustSend(remote.Encode(nil, remote.TypeMapMem, uint32(20+i), p), fd)
		unix.Close(fd)
		r.expectError(fmt.Sprintf("MAP_MEM with reserved %#x", v), uint32(20+i), remote.StatusBadMessage)
		r.probe("MAP_MEM with a reserved field set")
	}
	// A command mailbox's reserved header field (offset 4) is ignored.
	in := ifc.NewIn(ifc.CmdQueryHCACap, 8)
	in[4], in[5] = 0xFF, 0xFF
	r.mustSend(remote.Encode(nil, remote.TypeCommand, 30, in))
	h, p, err := r.recv(5 * time.Second)
	require.NoError(t, err, "QUERY_HCA_CAP with its reserved field set")
	require.Equal(t, remote.TypeCommand|remote.ReplyBit, h.Type, "QUERY_HCA_CAP with its reserved field set: %x", p)
	require.Equal(t, ifc.StatusOK, ifc.Out(p).Status(), "QUERY_HCA_CAP with its reserved field set: %x", p)
}

// TestUnusableDescriptors: a descriptor that is a sealed memfd of the
// right size but cannot be mapped shared and writable (write-sealed, open
// read-only or write-only) is the descriptor's fault: BAD_FD, not
// NO_MEMORY, which is kept for the daemon's limits and resources.
func TestUnusableDescriptors(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	r := dialRaw(t, path)
	r.hello()
	reopen := func(mode int) func() int {
		return func() int {
			m := memfd(t, 4096, sealed)
			defer unix.Close(m)
			fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", m), mode|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Skipf("reopen: %v", err)
			}
			return fd
		}
	}
	for i, c := range []struct {
		name string
		fd   func() int
	}{
		{"F_SEAL_WRITE", func() int { return memfd(t, 4096, sealed|unix.F_SEAL_WRITE) }},
		{"F_SEAL_FUTURE_WRITE", func() int { return memfd(t, 4096, unix.F_SEAL_SHRINK|unix.F_SEAL_FUTURE_WRITE) }},
		{"read-only", reopen(unix.O_RDONLY)},
		{"write-only", reopen(unix.O_WRONLY)},
	} {
		fd := c.fd()
		r.mustSend(remote.Encode(nil, remote.TypeMapMem, uint32(40+i), mapPayload(4096, 4096)), fd)
		unix.Close(fd)
		r.expectError(c.name, uint32(40+i), remote.StatusBadFD)
		r.probe(c.name)
	}
}
