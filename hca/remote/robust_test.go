package remote_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/hca/remote/daemon"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/remote"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/umr"
)

// The daemon's robustness: what a client can and cannot make it do, as
// the project's issue lists it. Malformed traffic travels over raw
// connections (net.DialUnix and WriteMsgUnix); after each misbehaviour a
// well-behaved client must still be served.

// rawConn is a connection that speaks the protocol by hand.
type rawConn struct {
	t testing.TB
	c *net.UnixConn
}

func dialRaw(t testing.TB, path string) *rawConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	require.NoError(t, err, "dial")
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

// send writes one packet with the descriptors; it reports the error (the
// daemon may have closed the connection).
func (r *rawConn) send(pkt []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := r.c.WriteMsgUnix(pkt, oob, nil)
	return err
}

func (r *rawConn) mustSend(pkt []byte, fds ...int) {
	r.t.Helper()
	require.NoError(r.t, r.send(pkt, fds...), "send")
}

var errEOF = errors.New("connection closed by the daemon")

// recv returns the next message other than EVENTS, checked for form;
// errEOF when the daemon closed the connection.
func (r *rawConn) recv(d time.Duration) (remote.Header, []byte, error) {
	buf := make([]byte, remote.MaxMessage+1)
	r.c.SetReadDeadline(time.Now().Add(d))
	for {
		n, _, flags, _, err := r.c.ReadMsgUnix(buf, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return remote.Header{}, nil, err
			}
			return remote.Header{}, nil, errEOF // ECONNRESET and the like
		}
		if n == 0 {
			return remote.Header{}, nil, errEOF
		}
		if flags&unix.MSG_TRUNC != 0 {
			return remote.Header{}, nil, fmt.Errorf("oversized message from the daemon")
		}
		h, p, err := remote.Decode(buf[:n])
		if err != nil {
			return h, nil, fmt.Errorf("daemon sent a malformed message: %v", err)
		}
		if h.Type == remote.TypeEvents {
			continue
		}
		return h, append([]byte(nil), p...), nil
	}
}

func helloPayload(magic uint32, version uint16) []byte {
	p := binary.BigEndian.AppendUint32(nil, magic)
	p = binary.BigEndian.AppendUint16(p, version)
	return binary.BigEndian.AppendUint16(p, 0)
}

// hello opens the function.
func (r *rawConn) hello() {
	r.t.Helper()
	r.mustSend(remote.Encode(nil, remote.TypeHello, 1, helloPayload(remote.Magic, remote.Version)))
	p := r.expectReply("hello", remote.TypeHello, 1)
	require.Len(r.t, p, 12, "hello")
	require.Zero(r.t, binary.BigEndian.Uint32(p), "hello: status")
}

// expectReply reads the next message: the reply to request id of type
// typ. It returns the reply's payload.
func (r *rawConn) expectReply(what string, typ remote.Type, id uint32) []byte {
	r.t.Helper()
	h, p, err := r.recv(5 * time.Second)
	require.NoError(r.t, err, what)
	require.Equal(r.t, typ|remote.ReplyBit, h.Type, "%s: %x", what, p)
	require.Equal(r.t, id, h.ID, "%s: the reply's id", what)
	return p
}

// expectError reads the next message: an ERROR for id with status st.
func (r *rawConn) expectError(what string, id uint32, st remote.Status) {
	r.t.Helper()
	h, p, err := r.recv(5 * time.Second)
	require.NoError(r.t, err, "%s: want ERROR %v", what, st)
	require.Equal(r.t, remote.TypeError, h.Type, "%s: want ERROR %v, got %x", what, st, p)
	require.GreaterOrEqual(r.t, len(p), 4, "%s: an ERROR without a status", what)
	require.Equal(r.t, st, remote.Status(binary.BigEndian.Uint32(p)), "%s: ERROR for id %d (%s)", what, h.ID, p[4:])
	require.Equal(r.t, id, h.ID, "%s: the ERROR's id", what)
}

// expectClosed waits for the daemon to close the connection.
func (r *rawConn) expectClosed(what string) {
	r.t.Helper()
	h, p, err := r.recv(5 * time.Second)
	require.ErrorIs(r.t, err, errEOF, "%s: the daemon did not close the connection (a message: %v %x)", what, h.Type, p)
}

// probe checks that the connection is still served: an UNMAP of an IOVA
// never mapped is refused with NOT_MAPPED.
func (r *rawConn) probe(what string) {
	r.t.Helper()
	require.NoError(r.t, r.send(remote.Encode(nil, remote.TypeUnmap, 0x7777, make([]byte, 8))), "%s: the connection is gone", what)
	r.expectError(what+" (then a probe)", 0x7777, remote.StatusNotMapped)
}

// healthy checks that the daemon serves a well-behaved client: dial, a
// PD, memory, a CQ, close.
func healthy(t testing.TB, path string) {
	t.Helper()
	ctx, err := verbs.Dial(path)
	require.NoError(t, err, "a well-behaved client: dial")
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	require.NoError(t, err, "a well-behaved client: alloc pd")
	buf, err := ctx.Alloc(8192)
	require.NoError(t, err, "a well-behaved client: alloc")
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	require.NoError(t, err, "a well-behaved client: reg mr")
	_, err = ctx.CreateCQ(16, nil)
	require.NoError(t, err, "a well-behaved client: create cq")
	require.NoError(t, mr.Dereg(), "a well-behaved client: dereg")
	require.NoError(t, ctx.Free(buf), "a well-behaved client: free")
}

// stillWorks checks a client opened before the misbehaviour.
func stillWorks(t testing.TB, ctx *verbs.Context) {
	t.Helper()
	pd, err := ctx.AllocPD()
	require.NoError(t, err, "the long-lived client: alloc pd")
	require.NoError(t, pd.Dealloc(), "the long-lived client: dealloc pd")
	buf, err := ctx.Alloc(4096)
	require.NoError(t, err, "the long-lived client: alloc")
	require.NoError(t, ctx.Free(buf), "the long-lived client: free")
}

func dial(t testing.TB, path string) *verbs.Context {
	t.Helper()
	ctx, err := verbs.Dial(path)
	require.NoError(t, err, "dial")
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// openFDs counts this process's descriptors (the daemon runs in it).
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// memfd returns a memfd of size bytes with the seals added (0: none).
func memfd(t testing.TB, size int64, seals int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("robust-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	require.NoError(t, err, "memfd")
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		t.Fatalf("ftruncate %d: %v", size, err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			unix.Close(fd)
			t.Fatalf("seal: %v", err)
		}
	}
	return fd
}

const sealed = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

func mapPayload(size uint64, align uint32) []byte {
	p := binary.BigEndian.AppendUint64(nil, size)
	p = binary.BigEndian.AppendUint32(p, align)
	return binary.BigEndian.AppendUint32(p, 0)
}

// header builds a packet with an arbitrary header.
func header(typ uint16, reserved uint16, id uint32, length uint32, payload []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, typ)
	b = binary.BigEndian.AppendUint16(b, reserved)
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint32(b, length)
	return append(b, payload...)
}

// TestMalformedMessages: malformed, truncated and unknown messages after
// HELLO get an ERROR (with the request's id where the header has one) and
// the connection goes on; protocol violations (a message before HELLO, a
// second HELLO, a bad magic or version, an oversized message) get an
// ERROR and the connection closes. After each, a well-behaved client is
// served, and no descriptor leaks.
func TestMalformedMessages(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	longLived := dial(t, path)

	// Refused, the connection goes on.
	soft := []struct {
		name string
		pkt  []byte
		id   uint32
		st   remote.Status
	}{
		{"1 byte", []byte{0}, 0, remote.StatusBadMessage},
		{"11 bytes", make([]byte, 11), 0, remote.StatusBadMessage},
		{"reserved bits", header(uint16(remote.TypeUnmap), 0x8000, 5, 8, make([]byte, 8)), 5, remote.StatusBadMessage},
		{"reserved bit 0", header(uint16(remote.TypeCommand), 1, 6, 8, make([]byte, 8)), 6, remote.StatusBadMessage},
		{"length too large", header(uint16(remote.TypeUnmap), 0, 7, 9, make([]byte, 8)), 7, remote.StatusBadMessage},
		{"length too small", header(uint16(remote.TypeUnmap), 0, 8, 7, make([]byte, 8)), 8, remote.StatusBadMessage},
		{"length huge", header(uint16(remote.TypeCommand), 0, 9, 0xFFFFFFFF, make([]byte, 8)), 9, remote.StatusBadMessage},
		{"header only, length 1", header(uint16(remote.TypeRingSQ), 0, 10, 1, nil), 10, remote.StatusBadMessage},
		{"type 0", remote.Encode(nil, 0, 11, nil), 11, remote.StatusUnknownType},
		{"type 0x0A", remote.Encode(nil, 0x0A, 12, make([]byte, 8)), 12, remote.StatusUnknownType},
		{"UCMA_OPEN after HELLO", remote.Encode(nil, remote.TypeUcmaOpen, 12, nil), 12, remote.StatusBadMessage},
		{"EVENTS from a client", remote.Encode(nil, remote.TypeEvents, 13, make([]byte, 8)), 13, remote.StatusUnknownType},
		{"ERROR from a client", remote.Encode(nil, remote.TypeError, 14, make([]byte, 4)), 14, remote.StatusUnknownType},
		{"a reply from a client", remote.Encode(nil, remote.TypeCommand|remote.ReplyBit, 15, make([]byte, 8)), 15, remote.StatusUnknownType},
		{"HELLO reply from a client", remote.Encode(nil, remote.TypeHello|remote.ReplyBit, 16, make([]byte, 12)), 16, remote.StatusUnknownType},
		{"type 0xFFFF", remote.Encode(nil, 0xFFFF, 17, nil), 17, remote.StatusUnknownType},
		{"MAP_MEM short", remote.Encode(nil, remote.TypeMapMem, 18, make([]byte, 15)), 18, remote.StatusBadMessage},
		{"MAP_MEM long", remote.Encode(nil, remote.TypeMapMem, 19, make([]byte, 17)), 19, remote.StatusBadMessage},
		{"UNMAP short", remote.Encode(nil, remote.TypeUnmap, 20, make([]byte, 4)), 20, remote.StatusBadMessage},
		{"UNMAP not mapped", remote.Encode(nil, remote.TypeUnmap, 21, binary.BigEndian.AppendUint64(nil, 1<<32)), 21, remote.StatusNotMapped},
		{"RING_SQ short", remote.Encode(nil, remote.TypeRingSQ, 22, make([]byte, 3)), 22, remote.StatusBadMessage},
		{"RING_RQ long", remote.Encode(nil, remote.TypeRingRQ, 23, make([]byte, 5)), 23, remote.StatusBadMessage},
		{"ARM_CQ short", remote.Encode(nil, remote.TypeArmCQ, 24, make([]byte, 4)), 24, remote.StatusBadMessage},
		{"ARM_CQ empty", remote.Encode(nil, remote.TypeArmCQ, 25, nil), 25, remote.StatusBadMessage},
	}
	t.Run("Refused", func(t *testing.T) {
		r := dialRaw(t, path)
		r.hello()
		before := openFDs(t)
		for _, c := range soft {
			r.mustSend(c.pkt)
			r.expectError(c.name, c.id, c.st)
			r.probe(c.name)
		}
		// Messages without a reply: doorbells of objects that do not
		// exist, an ARM_CQ with id 0.
		for i, pkt := range [][]byte{
			remote.Encode(nil, remote.TypeRingSQ, 0, []byte{0, 0, 0, 0}),
			remote.Encode(nil, remote.TypeRingSQ, 0, []byte{0xFF, 0xFF, 0xFF, 0xFF}),
			remote.Encode(nil, remote.TypeRingRQ, 0, []byte{0, 0, 1, 0}),
			remote.Encode(nil, remote.TypeArmCQ, 0, make([]byte, 8)),
			remote.Encode(nil, remote.TypeArmCQ, 0, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}),
		} {
			r.mustSend(pkt)
			r.probe(fmt.Sprintf("doorbell %d", i))
		}
		// An ARM_CQ with an id is answered, CQ or not.
		r.mustSend(remote.Encode(nil, remote.TypeArmCQ, 30, []byte{0, 0, 0, 9, 0, 0, 0, 0}))
		require.Len(t, r.expectReply("ARM_CQ with an id", remote.TypeArmCQ, 30), 4, "ARM_CQ with an id")
		// COMMANDs whose mailboxes are garbage get a mailbox with a status.
		for i, in := range [][]byte{nil, {1}, make([]byte, 7), {0xFF, 0xFF, 0, 0, 0, 0, 0, 0}, make([]byte, remote.MaxMessage-remote.HeaderSize)} {
			id := uint32(40 + i)
			r.mustSend(remote.Encode(nil, remote.TypeCommand, id, in))
			p := r.expectReply(fmt.Sprintf("COMMAND %d", i), remote.TypeCommand, id)
			require.GreaterOrEqual(t, len(p), ifc.OutHeaderSize, "COMMAND %d: %x", i, p)
			assert.NotEqual(t, ifc.StatusOK, ifc.Out(p).Status(), "COMMAND of %d garbage bytes succeeded", len(in))
		}
		// A descriptor with a message other than MAP_MEM is refused, and
		// closed.
		for _, typ := range []remote.Type{remote.TypeUnmap, remote.TypeRingSQ, remote.TypeCommand, remote.TypeArmCQ} {
			fd := memfd(t, 4096, sealed)
			payload := make([]byte, 8)
			if typ == remote.TypeRingSQ {
				payload = payload[:4]
			}
			r.mustSend(remote.Encode(nil, typ, 50, payload), fd)
			unix.Close(fd)
			r.expectError(typ.String()+" with a descriptor", 50, remote.StatusBadFD)
			r.probe(typ.String() + " with a descriptor")
		}
		assert.Equal(t, before, openFDs(t), "descriptors before and after")
		stillWorks(t, longLived)
		healthy(t, path)
	})

	// Refused, and the connection closes.
	hard := []struct {
		name   string
		hello  bool // send a valid HELLO first
		pkt    []byte
		id     uint32
		st     remote.Status
		noRepl bool // closed without an ERROR
	}{
		{name: "COMMAND before HELLO", pkt: remote.Encode(nil, remote.TypeCommand, 3, ifc.NewIn(ifc.CmdQueryHCACap, 8)), id: 3, st: remote.StatusNotReady},
		{name: "UNMAP before HELLO", pkt: remote.Encode(nil, remote.TypeUnmap, 4, make([]byte, 8)), id: 4, st: remote.StatusNotReady},
		{name: "RING_SQ before HELLO", pkt: remote.Encode(nil, remote.TypeRingSQ, 0, make([]byte, 4)), id: 0, st: remote.StatusNotReady},
		{name: "unknown type before HELLO", pkt: remote.Encode(nil, 0x99, 5, nil), id: 5, st: remote.StatusNotReady},
		{name: "bad magic", pkt: remote.Encode(nil, remote.TypeHello, 6, helloPayload(0x48434154, remote.Version)), id: 6, st: remote.StatusBadMessage},
		{name: "bad version", pkt: remote.Encode(nil, remote.TypeHello, 7, helloPayload(remote.Magic, remote.Version+1)), id: 7, st: remote.StatusBadVersion},
		{name: "version 0", pkt: remote.Encode(nil, remote.TypeHello, 8, helloPayload(remote.Magic, 0)), id: 8, st: remote.StatusBadVersion},
		{name: "short HELLO", pkt: remote.Encode(nil, remote.TypeHello, 9, helloPayload(remote.Magic, remote.Version)[:6]), id: 9, st: remote.StatusBadMessage},
		{name: "long HELLO", pkt: remote.Encode(nil, remote.TypeHello, 10, append(helloPayload(remote.Magic, remote.Version), 0)), id: 10, st: remote.StatusBadMessage},
		{name: "second HELLO", hello: true, pkt: remote.Encode(nil, remote.TypeHello, 11, helloPayload(remote.Magic, remote.Version)), id: 11, st: remote.StatusBadMessage},
		{name: "oversized", hello: true, pkt: remote.Encode(nil, remote.TypeCommand, 12, make([]byte, remote.MaxMessage)), id: 0, st: remote.StatusBadMessage},
		{name: "oversized before HELLO", pkt: remote.Encode(nil, remote.TypeHello, 13, make([]byte, 2*remote.MaxMessage)), id: 0, st: remote.StatusBadMessage},
		{name: "empty packet", hello: true, pkt: []byte{}, noRepl: true},
	}
	for _, c := range hard {
		t.Run("Closed/"+c.name, func(t *testing.T) {
			before := openFDs(t)
			r := dialRaw(t, path)
			if c.hello {
				r.hello()
			}
			r.mustSend(c.pkt)
			if !c.noRepl {
				r.expectError(c.name, c.id, c.st)
			}
			r.expectClosed(c.name)
			r.c.Close()
			waitFDs(t, before)
			stillWorks(t, longLived)
			healthy(t, path)
		})
	}

	// A client that sends requests and never reads the replies blocks
	// only its own connection; Shutdown (the cleanup) still ends it.
	t.Run("NeverReads", func(t *testing.T) {
		r := dialRaw(t, path)
		r.hello()
		r.c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		arm := remote.Encode(nil, remote.TypeArmCQ, 1, make([]byte, 8))
		sent := 0
		for ; sent < 100000; sent++ {
			if r.send(arm) != nil {
				break
			}
		}
		t.Logf("%d requests sent before the socket filled", sent)
		stillWorks(t, longLived)
		healthy(t, path)
	})

	// Malformed messages before HELLO that are not a protocol violation
	// in themselves (no header to act on) are refused; HELLO still works.
	t.Run("GarbageBeforeHello", func(t *testing.T) {
		r := dialRaw(t, path)
		r.mustSend([]byte{1, 2, 3})
		r.expectError("3 bytes before HELLO", 0, remote.StatusBadMessage)
		r.mustSend(header(uint16(remote.TypeHello), 0, 2, 100, helloPayload(remote.Magic, remote.Version)))
		r.expectError("HELLO with a wrong length", 2, remote.StatusBadMessage)
		r.hello()
		r.probe("after HELLO")
	})
}

// serveWith is daemon with a server of the caller's.
func serveWith(t testing.TB, s *daemon.Server) string {
	t.Helper()
	path, done := startServe(t, s)
	t.Cleanup(func() {
		s.Shutdown(0)
		assert.NoError(t, <-done, "serve")
	})
	return path
}

// startServe serves s on a new socket; Serve's result arrives on the
// channel (the caller shuts the server down).
func startServe(t testing.TB, s *daemon.Server) (string, <-chan error) {
	t.Helper()
	path := t.TempDir() + "/hcasim.sock"
	l, err := daemon.Listen(path)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	return path, done
}

// waitFDs waits for the process's descriptor count to come back to n (a
// connection's descriptors close when the daemon's goroutine ends).
func waitFDs(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := openFDs(t)
		if got <= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d descriptors open, %d before", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBadDescriptors: MAP_MEM with no descriptor, two, one that is not a
// sealed memfd of the size asked, and bad sizes and alignments: an ERROR
// for the request, the connection goes on, no descriptor or mapping
// leaks, and a well-behaved client is served.
func TestBadDescriptors(t *testing.T) {
	dev := hca.New(hca.Options{Caps: withMaxMapped(64 << 20)})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	longLived := dial(t, path)
	r := dialRaw(t, path)
	r.hello()

	regular := func(t testing.TB) int {
		f, err := os.CreateTemp(t.TempDir(), "not-a-memfd")
		require.NoError(t, err)
		require.NoError(t, f.Truncate(1<<20))
		fd, err := unix.Dup(int(f.Fd()))
		require.NoError(t, err)
		f.Close()
		return fd
	}
	pipe := func(t testing.TB) int {
		var p [2]int
		require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
		unix.Close(p[1])
		return p[0]
	}
	readOnly := func(t testing.TB) int {
		m := memfd(t, 1<<16, sealed)
		defer unix.Close(m)
		fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", m), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Skipf("reopen read-only: %v", err)
		}
		return fd
	}
	dir := func(t testing.TB) int {
		fd, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		return fd
	}
	cases := []struct {
		name  string
		size  uint64
		align uint32
		fds   func(t testing.TB) []int
		st    remote.Status
	}{
		{"no descriptor", 4096, 4096, func(t testing.TB) []int { return nil }, remote.StatusBadFD},
		{"two descriptors", 4096, 4096, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed), memfd(t, 4096, sealed)} }, remote.StatusBadFD},
		{"the same descriptor twice", 4096, 4096, func(t testing.TB) []int { fd := memfd(t, 4096, sealed); d, _ := unix.Dup(fd); return []int{fd, d} }, remote.StatusBadFD},
		{"a regular file", 4096, 4096, func(t testing.TB) []int { return []int{regular(t)} }, remote.StatusBadFD},
		{"an unsealed memfd", 4096, 4096, func(t testing.TB) []int { return []int{memfd(t, 4096, 0)} }, remote.StatusBadFD},
		{"a memfd sealed against growing only", 4096, 4096, func(t testing.TB) []int { return []int{memfd(t, 4096, unix.F_SEAL_GROW)} }, remote.StatusBadFD},
		{"a memfd smaller than asked", 8192, 4096, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed)} }, remote.StatusBadFD},
		{"an empty memfd", 4096, 4096, func(t testing.TB) []int { return []int{memfd(t, 0, sealed)} }, remote.StatusBadFD},
		{"a pipe", 4096, 4096, func(t testing.TB) []int { return []int{pipe(t)} }, remote.StatusBadFD},
		{"a directory", 4096, 4096, func(t testing.TB) []int { return []int{dir(t)} }, remote.StatusBadFD},
		{"a socket", 4096, 4096, func(t testing.TB) []int { fd, _ := unix.Dup(connFD(t, r.c)); return []int{fd} }, remote.StatusBadFD},
		{"a write-sealed memfd", 4096, 4096, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed|unix.F_SEAL_WRITE)} }, remote.StatusBadFD},
		{"a read-only descriptor", 4096, 4096, func(t testing.TB) []int { return []int{readOnly(t)} }, remote.StatusBadFD},
		{"size 0", 0, 4096, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed)} }, remote.StatusBadMessage},
		{"size 2^63", 1 << 63, 4096, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed)} }, remote.StatusBadMessage},
		{"size 2^64-1", ^uint64(0), 4096, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed)} }, remote.StatusBadMessage},
		{"size 2^40 on a small memfd", 1 << 40, 4096, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed)} }, remote.StatusBadFD},
		{"align 0", 4096, 0, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed)} }, remote.StatusBadMessage},
		{"align 3", 4096, 3, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed)} }, remote.StatusBadMessage},
		{"align 2^31", 4096, 1 << 31, func(t testing.TB) []int { return []int{memfd(t, 4096, sealed)} }, remote.StatusBadMessage},
		// A sparse memfd larger than the function may map: the device's
		// MaxMappedBytes refuses it.
		{"beyond MaxMappedBytes", 1 << 30, 4096, func(t testing.TB) []int { return []int{memfd(t, 1<<30, sealed)} }, remote.StatusNoMemory},
	}
	before := openFDs(t)
	maps := dmaMappings(t)
	for i, c := range cases {
		id := uint32(100 + i)
		fds := c.fds(t)
		r.mustSend(remote.Encode(nil, remote.TypeMapMem, id, mapPayload(c.size, c.align)), fds...)
		for _, fd := range fds {
			unix.Close(fd)
		}
		r.expectError(c.name, id, c.st)
		r.probe(c.name)
	}
	// Descriptors in two control messages.
	{
		a, b := memfd(t, 4096, sealed), memfd(t, 4096, sealed)
		oob := append(unix.UnixRights(a), unix.UnixRights(b)...)
		_, _, err := r.c.WriteMsgUnix(remote.Encode(nil, remote.TypeMapMem, 99, mapPayload(4096, 4096)), oob, nil)
		require.NoError(t, err)
		unix.Close(a)
		unix.Close(b)
		r.expectError("two control messages", 99, remote.StatusBadFD)
		r.probe("two control messages")
	}
	assert.Equal(t, before, openFDs(t), "descriptors before and after")
	assert.Equal(t, maps, dmaMappings(t), "memfd mappings before and after")
	// A good MAP_MEM on the same connection works, and UNMAP undoes it.
	fd := memfd(t, 8192, sealed)
	r.mustSend(remote.Encode(nil, remote.TypeMapMem, 200, mapPayload(8192, 4096)), fd)
	unix.Close(fd)
	p := r.expectReply("a good MAP_MEM", remote.TypeMapMem, 200)
	require.Len(t, p, 16, "a good MAP_MEM")
	require.Zero(t, binary.BigEndian.Uint32(p), "a good MAP_MEM: status")
	r.mustSend(remote.Encode(nil, remote.TypeUnmap, 201, p[8:16]))
	up := r.expectReply("UNMAP", remote.TypeUnmap, 201)
	require.GreaterOrEqual(t, len(up), 4, "UNMAP")
	require.Zero(t, binary.BigEndian.Uint32(up), "UNMAP: status")
	r.mustSend(remote.Encode(nil, remote.TypeUnmap, 202, p[8:16]))
	r.expectError("a second UNMAP", 202, remote.StatusNotMapped)

	// More descriptors than the daemon's control buffer holds: refused or
	// closed, and none leaks.
	t.Run("DescriptorFlood", func(t *testing.T) {
		before := openFDs(t)
		r := dialRaw(t, path)
		r.hello()
		var fds []int
		for range 64 {
			fds = append(fds, memfd(t, 4096, sealed))
		}
		err := r.send(remote.Encode(nil, remote.TypeMapMem, 1, mapPayload(4096, 4096)), fds...)
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err == nil {
			if h, p, err := r.recv(5 * time.Second); err == nil {
				require.Equal(t, remote.TypeError, h.Type, "64 descriptors: %x", p)
			}
		}
		r.c.Close()
		waitFDs(t, before)
	})
	stillWorks(t, longLived)
	healthy(t, path)
}

// connFD returns the descriptor of a connection.
func connFD(t testing.TB, c *net.UnixConn) int {
	t.Helper()
	sc, err := c.SyscallConn()
	require.NoError(t, err)
	var fd int
	sc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// dmaMappings counts this process's mappings of the DMA memfds (the
// clients' and the daemon's: both run in the test process).
func dmaMappings(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	return strings.Count(string(b), "memfd:hcasim-dma") + strings.Count(string(b), "memfd:robust-test")
}

func withMaxMapped(n uint64) *ifc.Caps {
	c := hca.ConnectX5Caps
	c.MaxMappedBytes = n
	return &c
}

// ---------------------------------------------------------------------
// Isolation between functions.

// node is a client with a PD and a registered buffer.
type node struct {
	ctx *verbs.Context
	pd  *verbs.PD
	buf []byte
	mr  *verbs.MR
}

func newNode(t testing.TB, ctx *verbs.Context, size int, acc verbs.Access) *node {
	t.Helper()
	n := &node{ctx: ctx}
	var err error
	n.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	n.buf, err = ctx.Alloc(size)
	require.NoError(t, err)
	n.mr, err = n.pd.RegMR(n.buf, acc)
	require.NoError(t, err)
	return n
}

type endpoint struct {
	qp       *verbs.QP
	scq, rcq *verbs.CQ
}

func (n *node) ep(t testing.TB, ch *verbs.CompChannel) *endpoint {
	t.Helper()
	e := &endpoint{}
	var err error
	e.scq, err = n.ctx.CreateCQ(256, ch)
	require.NoError(t, err)
	e.rcq, err = n.ctx.CreateCQ(256, ch)
	require.NoError(t, err)
	e.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
	require.NoError(t, err)
	return e
}

func connectEPs(t testing.TB, a, b *endpoint, ao, bo *verbs.ConnectOptions) {
	t.Helper()
	require.NoError(t, a.qp.Connect(b.qp.Info(), ao))
	require.NoError(t, b.qp.Connect(a.qp.Info(), bo))
}

func post(t testing.TB, e *endpoint, wrs ...verbs.SendWR) {
	t.Helper()
	n, err := e.qp.PostSend(wrs)
	require.NoError(t, err, "post send")
	require.Equal(t, len(wrs), n, "post send: WRs posted")
}

func postRecv(t testing.TB, e *endpoint, wrs ...verbs.RecvWR) {
	t.Helper()
	n, err := e.qp.PostRecv(wrs)
	require.NoError(t, err, "post recv")
	require.Equal(t, len(wrs), n, "post recv: WRs posted")
}

func write(id uint64, sge verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{sge}, RemoteAddr: raddr, RKey: rkey}
}

func read(id uint64, sge verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SG: []verbs.SGE{sge}, RemoteAddr: raddr, RKey: rkey}
}

func send(id uint64, sge verbs.SGE) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{sge}}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// TestUnmappedIOVAs: a function's commands naming memory it never mapped
// (unmapped addresses, or addresses only another function mapped) fail
// with a command status, and touch nothing.
func TestUnmappedIOVAs(t *testing.T) {
	dev := hca.New(hca.Options{TimeScale: 4})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	b := newNode(t, dial(t, path), 8<<20, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	for i := range b.buf {
		b.buf[i] = 0xB5
	}
	// Addresses only B mapped: deep inside B's 8 MiB buffer, beyond
	// anything A maps in this test.
	foreign := b.mr.Addr + 6<<20
	a := newNode(t, dial(t, path), 1<<16, verbs.AccessLocalWrite)
	cmd := func(in ifc.In) ifc.Out { return ifc.Out(a.ctx.Function().Command(in)) }
	for _, addr := range []uint64{foreign, 0, 0x1000, 1 << 62, ^uint64(0) &^ 0xFFF} {
		out := cmd(ifc.NewIn(ifc.CmdCreateCQ, ifc.CQInSize).Put8(ifc.CQInLogSize, 4).Put64(ifc.CQInRing, addr).Put64(ifc.CQInDBRec, addr+4096))
		assert.NotEqualValues(t, ifc.StatusOK, out.Status(), "CREATE_CQ with its ring at %#x (not mapped by the function) succeeded", addr)
	}
	// A CQ whose ring is A's but doorbell record is not.
	abuf, err := a.ctx.Alloc(1 << 16)
	require.NoError(t, err)
	amr, err := a.pd.RegMR(abuf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	if out := cmd(ifc.NewIn(ifc.CmdCreateCQ, ifc.CQInSize).Put8(ifc.CQInLogSize, 4).Put64(ifc.CQInRing, amr.Addr).Put64(ifc.CQInDBRec, foreign)); out.Status() == ifc.StatusOK {
		t.Errorf("CREATE_CQ with its doorbell record at %#x (B's) succeeded", foreign)
	}
	// A ring that runs off the end of A's memory.
	if out := cmd(ifc.NewIn(ifc.CmdCreateCQ, ifc.CQInSize).Put8(ifc.CQInLogSize, 12).Put64(ifc.CQInRing, amr.Addr).Put64(ifc.CQInDBRec, amr.Addr)); out.Status() == ifc.StatusOK {
		t.Errorf("CREATE_CQ with a 256 KiB ring in 64 KiB of memory succeeded")
	}
	scq, err := a.ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	for _, q := range []struct{ sq, rq, db uint64 }{{foreign, amr.Addr, amr.Addr + 0x8000}, {amr.Addr, foreign, amr.Addr + 0x8000}, {amr.Addr, amr.Addr + 0x4000, foreign}, {0, 0, 0}} {
		in := ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSize).Put32(ifc.QPInPD, a.pd.Handle()).Put32(ifc.QPInSendCQ, scq.Handle()).Put32(ifc.QPInRecvCQ, scq.Handle())
		in.Put8(ifc.QPInLogSQ, 6).Put8(ifc.QPInLogRQ, 6).Put8(ifc.QPInLogStride, 5)
		in.Put64(ifc.QPInSQ, q.sq).Put64(ifc.QPInRQ, q.rq).Put64(ifc.QPInDBRec, q.db)
		if out := cmd(in); out.Status() == ifc.StatusOK {
			t.Errorf("CREATE_QP with SQ %#x RQ %#x DBR %#x (some not A's) succeeded", q.sq, q.rq, q.db)
		}
	}
	// An mkey over B's addresses: creating it may succeed (translation is
	// checked at access, as hardware does), but using it fails with a
	// local protection error and B's memory is untouched.
	out := cmd(mkeyOver(a.pd.Handle(), foreign, 1<<16))
	if out.Status() == ifc.StatusOK {
		key := uint32(klm.MakeKey(out.U32(ifc.MkeyOutIdx), 0x42))
		c := newNode(t, dial(t, path), 1<<16, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		ea, ec := a.ep(t, nil), c.ep(t, nil)
		connectEPs(t, ea, ec, &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}, nil)
		// A READ into B's memory through the key, and a WRITE out of it.
		post(t, ea, read(1, verbs.SGE{Addr: foreign, Length: 4096, LKey: key}, c.mr.Addr, c.mr.RKey))
		hcatest.CheckErr(t, "a READ into another function's memory through an mkey over it", hcatest.Poll1(t, ea.scq), 1, verbs.WCLocProtErr, 0)
		// And a WRITE out of it.
		ea, ec = a.ep(t, nil), c.ep(t, nil)
		connectEPs(t, ea, ec, &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}, nil)
		post(t, ea, write(2, verbs.SGE{Addr: foreign, Length: 4096, LKey: key}, c.mr.Addr, c.mr.RKey))
		hcatest.CheckErr(t, "a WRITE out of another function's memory through an mkey over it", hcatest.Poll1(t, ea.scq), 2, verbs.WCLocProtErr, 0)
		assert.True(t, allZero(c.buf), "C's memory changed")
	} else {
		t.Logf("CREATE_MKEY over B's addresses refused: %v", out.Err(ifc.CmdCreateMkey))
	}
	for i, x := range b.buf {
		require.EqualValues(t, 0xB5, x, "B's memory changed at %d: %#x", i, x)
	}
	healthy(t, path)
}

// mkeyOver builds a CREATE_MKEY input: an MTT key with local read and
// write over [addr, addr+n) (whole pages), variant 0x42.
func mkeyOver(pd uint32, addr uint64, n int) ifc.In {
	npages := (n + 4095) / 4096
	xlt := make([]byte, (npages+1)/2*klm.OctowordSize)
	for i := range npages {
		klm.MTT(xlt[i*klm.MTTSize:]).Encode(&klm.MTTFields{Addr: addr + uint64(i)<<12, Read: true, Write: true})
	}
	in := ifc.NewIn(ifc.CmdCreateMkey, ifc.MkeyInXLT+len(xlt))
	umr.MkeySeg(in[ifc.MkeyInCtx:ifc.MkeyInXLT]).Encode(&umr.MkeyFields{
		Mode: klm.ModeMTT, Access: klm.LocalRead | klm.LocalWrite, QPN: 0xFFFFFF, Variant: 0x42, PD: pd,
		StartAddr: addr, Len: uint64(n), XLTOctowords: uint32(len(xlt) / klm.OctowordSize), LogPageSize: 12,
	})
	copy(in[ifc.MkeyInXLT:], xlt)
	return in
}

// TestForeignKeys: keys are a function's own. An lkey of another function
// in a WQE gives a local protection error; an rkey of a function the QP is
// not connected to gives a remote access error; through a connected QP a
// valid rkey works, and only with the access rights its MR grants.
func TestForeignKeys(t *testing.T) {
	dev := hca.New(hca.Options{TimeScale: 4})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	const all = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	// B registers several MRs so that its keys are not keys of A or C.
	b := newNode(t, dial(t, path), 1<<16, all)
	var bmrs []*verbs.MR
	for range 6 {
		buf, err := b.ctx.Alloc(1 << 16)
		require.NoError(t, err)
		for i := range buf {
			buf[i] = 0xBB
		}
		mr, err := b.pd.RegMR(buf, all)
		require.NoError(t, err)
		bmrs = append(bmrs, mr)
	}
	bmr := bmrs[len(bmrs)-1]
	a := newNode(t, dial(t, path), 1<<16, all)
	c := newNode(t, dial(t, path), 1<<16, all)
	for i := range a.buf {
		a.buf[i] = 0xAA
	}
	ea, ec := a.ep(t, nil), c.ep(t, nil)
	connectEPs(t, ea, ec, &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}, nil)

	// B's lkey (and address) in A's WQE.
	post(t, ea, write(1, verbs.SGE{Addr: bmr.Addr, Length: 64, LKey: bmr.LKey}, c.mr.Addr, c.mr.RKey))
	hcatest.CheckErr(t, "a WRITE from B's lkey", hcatest.Poll1(t, ea.scq), 1, verbs.WCLocProtErr, 0)
	assert.True(t, allZero(c.buf), "C received data through B's lkey")

	// B's rkey through A's QP connected to C.
	ea, ec = a.ep(t, nil), c.ep(t, nil)
	connectEPs(t, ea, ec, &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}, nil)
	post(t, ea, write(2, a.mr.SGE(0, 64), bmr.Addr, bmr.RKey))
	hcatest.CheckErr(t, "a WRITE to B's rkey through a QP connected to C", hcatest.Poll1(t, ea.scq), 2, verbs.WCRemAccessErr, 0)
	ea, ec = a.ep(t, nil), c.ep(t, nil)
	connectEPs(t, ea, ec, &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}, nil)
	post(t, ea, read(3, a.mr.SGE(0, 64), bmr.Addr, bmr.RKey))
	hcatest.CheckErr(t, "a READ from B's rkey through a QP connected to C", hcatest.Poll1(t, ea.scq), 3, verbs.WCRemAccessErr, 0)
	for i, x := range bmr.Buf {
		require.EqualValues(t, 0xBB, x, "B's memory changed at %d", i)
	}
	for i, x := range a.buf {
		require.EqualValues(t, 0xAA, x, "A's memory changed at %d", i)
	}

	// Through a QP connected to B, B's rkey works, within its rights.
	eb := b.ep(t, nil)
	ea = a.ep(t, nil)
	connectEPs(t, ea, eb, &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}, nil)
	post(t, ea, write(4, a.mr.SGE(0, 64), bmr.Addr, bmr.RKey))
	hcatest.CheckErr(t, "a WRITE to B's rkey through a QP connected to B", hcatest.Poll1(t, ea.scq), 4, verbs.WCSuccess, 0)
	if bmr.Buf[0] != 0xAA || bmr.Buf[64] != 0xBB {
		t.Errorf("the WRITE did not land: %x", bmr.Buf[:72])
	}
	roBuf, err := b.ctx.Alloc(4096)
	require.NoError(t, err)
	ro, err := b.pd.RegMR(roBuf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	post(t, ea, write(5, a.mr.SGE(0, 64), ro.Addr, ro.RKey))
	hcatest.CheckErr(t, "a WRITE to B's read-only MR", hcatest.Poll1(t, ea.scq), 5, verbs.WCRemAccessErr, 0)
	assert.True(t, allZero(roBuf), "B's read-only MR was written")
	healthy(t, path)
}

// heldRings is a function whose send doorbells can be held back: the
// WQEs are in the ring and the doorbell record, but the device is not
// told.
type heldRings struct {
	ifc.Function
	hold atomic.Bool
}

func (h *heldRings) RingSQ(qpn uint32) {
	if !h.hold.Load() {
		h.Function.RingSQ(qpn)
	}
}

// TestForeignDoorbells: a function ringing or arming another function's
// QP and CQ numbers has no effect on them.
func TestForeignDoorbells(t *testing.T) {
	dev := hca.New(hca.Options{TimeScale: 4})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	const all = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	cl, err := remote.Dial(path)
	require.NoError(t, err)
	held := &heldRings{Function: cl}
	bctx, err := verbs.New(held)
	require.NoError(t, err)
	t.Cleanup(func() { bctx.Close() })
	b := newNode(t, bctx, 1<<16, all)
	a := newNode(t, dial(t, path), 1<<16, all)
	bch := bctx.NewCompChannel(4)
	eb := b.ep(t, bch)
	ea := a.ep(t, nil)
	connectEPs(t, ea, eb, nil, nil)
	// A has CQs and a QP of its own, numbered like B's or not.
	a.ep(t, nil)

	copy(b.buf, "held back")
	// B's send engine must be asleep (connecting woke it): an awake engine
	// reads the send counter again and would run the WQE without a
	// doorbell, as the hint protocol allows.
	for deadline := time.Now().Add(5 * time.Second); eb.qp.SendEngineAwake(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B's send engine never went to sleep")
		}
	}
	held.hold.Store(true)
	post(t, eb, write(1, b.mr.SGE(0, 9), a.mr.Addr, a.mr.RKey))
	held.hold.Store(false)
	// A rings B's QP, and arms B's CQs (as if it knew B's consumer index).
	afn := a.ctx.Function()
	for range 3 {
		afn.RingSQ(eb.qp.QPN())
		afn.RingRQ(eb.qp.QPN())
		afn.ArmCQ(eb.scq.Handle(), cq.ArmWord(1, cq.ArmNext, 0))
		afn.ArmCQ(eb.rcq.Handle(), cq.ArmWord(1, cq.ArmNext, 0))
	}
	hcatest.Quiet(t, eb.scq, 50*time.Millisecond, "B's send CQ after A rang B's QP")
	require.True(t, allZero(a.mr.Buf[:9]), "B's WRITE executed on A's doorbell")
	// B's own doorbell runs it; B's CQ was not armed by A: no event.
	cl.RingSQ(eb.qp.QPN())
	hcatest.CheckErr(t, "B's WRITE on its own doorbell", hcatest.Poll1(t, eb.scq), 1, verbs.WCSuccess, 0)
	require.EqualValues(t, "held back", string(a.mr.Buf[:9]), "the WRITE did not land: %q", a.mr.Buf[:9])
	select {
	case q := <-bch.C:
		t.Fatalf("B's CQ %d notified: A's ARM_CQ reached it", q.Handle())
	case <-time.After(30 * time.Millisecond):
	}
	// B arms its CQ itself: the next completion notifies.
	eb.scq.ReqNotify(false)
	post(t, eb, write(2, b.mr.SGE(0, 9), a.mr.Addr+64, a.mr.RKey))
	hcatest.Poll(t, eb.scq, 1)
	select {
	case <-bch.C:
	case <-time.After(5 * time.Second):
		t.Fatalf("B's own arm did not notify")
	}
	healthy(t, path)
}

// ---------------------------------------------------------------------
// A client that dies.

// TestPeerDies: a client whose connection ends abruptly while its QP has
// work in flight with a peer client (RDMA READs and WRITEs both ways,
// SENDs waiting for receives): its function closes, and the peer's
// requester, whose responder vanished, completes the first outstanding WR
// with RETRY_EXC_ERR and flushes the rest, as hardware does; the peer's
// posted receives flush. The daemon does not crash (the dead client's
// memory is unmapped only after its QPs stopped touching it: under -race
// and with SIGSEGV on a use after unmap, any early unmap shows), and its
// mappings are released.
func TestPeerDies(t *testing.T) {
	dev := hca.New(hca.Options{TimeScale: 4})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	const all = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	const size = 4 << 20
	const chunk = 256 << 10
	a := newNode(t, dial(t, path), size, all)
	rounds := 4
	if testing.Short() {
		rounds = 1
	}
	for round := range rounds {
		ea := a.ep(t, nil)
		baseline := dmaMappings(t)
		uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		require.NoError(t, err)
		cl, err := remote.NewClient(uc)
		require.NoError(t, err)
		bctx, err := verbs.New(cl)
		require.NoError(t, err)
		b := newNode(t, bctx, size, all)
		eb := b.ep(t, nil)
		// B's mappings show twice: B's and the daemon's.
		bMaps := (dmaMappings(t) - baseline) / 2
		opts := &verbs.ConnectOptions{Timeout: 10, RetryCnt: 2, RNRRetry: 7, MinRNRTimer: 1}
		connectEPs(t, ea, eb, opts, opts)
		// A: READs from B and WRITEs into B, then SENDs B has no receive
		// for; two receives of its own.
		var wrs []verbs.SendWR
		for i := range size / chunk / 2 {
			wrs = append(wrs, read(uint64(100+i), a.mr.SGE(i*chunk, chunk), b.mr.Addr+uint64(i*chunk), b.mr.RKey))
			wrs = append(wrs, write(uint64(200+i), a.mr.SGE(size/2+i*chunk, chunk), b.mr.Addr+uint64(size/2+i*chunk), b.mr.RKey))
		}
		for i := range 4 {
			wrs = append(wrs, send(uint64(300+i), a.mr.SGE(i*64, 64)))
		}
		postRecv(t, ea, verbs.RecvWR{WRID: 1, SG: []verbs.SGE{a.mr.SGE(0, 64)}}, verbs.RecvWR{WRID: 2, SG: []verbs.SGE{a.mr.SGE(64, 64)}})
		// B: the same towards A (its SENDs take A's two receives, the
		// third waits).
		var bwrs []verbs.SendWR
		for i := range size / chunk / 2 {
			bwrs = append(bwrs, write(uint64(400+i), b.mr.SGE(i*chunk, chunk), a.mr.Addr+uint64(size/2+i*chunk), a.mr.RKey))
			bwrs = append(bwrs, read(uint64(500+i), b.mr.SGE(size/2+i*chunk, chunk), a.mr.Addr+uint64(i*chunk), a.mr.RKey))
		}
		for i := range 3 {
			bwrs = append(bwrs, send(uint64(600+i), b.mr.SGE(i*64, 64)))
		}
		post(t, ea, wrs...)
		post(t, eb, bwrs...)
		if round%2 == 1 {
			time.Sleep(time.Duration(round) * time.Millisecond)
		}
		// B dies: its socket closes, nothing else.
		uc.Close()

		got := hcatest.PollWithin(t, ea.scq, len(wrs), 10*time.Second)
		i := 0
		for i < len(got) && got[i].Status == verbs.WCSuccess {
			i++
		}
		require.NotEqualValues(t, len(got), i, "round %d: every WR of A succeeded, though the SENDs had no receive", round)
		assert.EqualValues(t, verbs.WCRetryExcErr, got[i].Status, "round %d: first failed WR %#x: %v, want RETRY_EXC_ERR", round, got[i].WRID, got[i].Status)
		for _, wc := range got[i+1:] {
			assert.EqualValues(t, verbs.WCWRFlushErr, wc.Status, "round %d: WR %#x after the failure: %v, want WR_FLUSH_ERR", round, wc.WRID, wc.Status)
		}
		for k, wc := range got {
			assert.EqualValues(t, wrs[k].WRID, wc.WRID, "round %d: completion %d is WR %#x, want %#x", round, k, wc.WRID, wrs[k].WRID)
		}
		// A's receives: B's SENDs may have taken them before B died;
		// whatever is left flushes now that A's QP is in error.
		var recvd, flushed int
		for _, wc := range hcatest.Poll(t, ea.rcq, 2) {
			switch wc.Status {
			case verbs.WCSuccess:
				recvd++
			case verbs.WCWRFlushErr:
				flushed++
			default:
				t.Errorf("round %d: receive %+v", round, wc)
			}
		}
		t.Logf("round %d: %d of A's WRs succeeded before B died; %d receives, %d flushed", round, i, recvd, flushed)
		hcatest.Quiet(t, ea.scq, 10*time.Millisecond, "A's send CQ")

		// The daemon released B's mappings: only B's own (client side)
		// remain until B's Client is closed.
		deadline := time.Now().Add(5 * time.Second)
		for dmaMappings(t) > baseline+bMaps {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d DMA mappings, %d before B and %d B's own", round, dmaMappings(t), baseline, bMaps)
			}
			time.Sleep(time.Millisecond)
		}
		if cl.Err() == nil {
			t.Errorf("round %d: B's client does not see its connection gone", round)
		}
		bctx.Close()
		if got := dmaMappings(t); got != baseline {
			t.Errorf("round %d: %d DMA mappings after B closed, %d before", round, got, baseline)
		}
	}
	stillWorks(t, a.ctx)
	healthy(t, path)
}

// ---------------------------------------------------------------------
// Limits.

// TestMaxMaps: Server.MaxMaps bounds each client's live mappings with
// NO_MEMORY; freeing one makes room; other clients have their own count.
func TestMaxMaps(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	path := serveWith(t, &daemon.Server{Dev: dev, MaxMaps: 3})
	for range 2 {
		cl, err := remote.Dial(path)
		require.NoError(t, err)
		defer cl.Close()
		var iovas []uint64
		for range 3 {
			_, iova, err := cl.AllocDMA(4096, 4096)
			require.NoError(t, err, "map within the limit")
			iovas = append(iovas, iova)
		}
		_, _, err = cl.AllocDMA(4096, 4096)
		var se *remote.StatusError
		if !errors.As(err, &se) || se.Status != remote.StatusNoMemory || !strings.Contains(se.Reason, "limit") {
			t.Fatalf("a 4th mapping with MaxMaps 3: %v, want NO_MEMORY naming the limit", err)
		}
		require.NoError(t, cl.FreeDMA(iovas[1]))
		if _, _, err := cl.AllocDMA(4096, 4096); err != nil {
			t.Fatalf("a mapping after a free: %v", err)
		}
		if cl.Err() != nil {
			t.Fatalf("the connection ended: %v", cl.Err())
		}
	}
}

// TestMaxMappedBytes: the device's MaxMappedBytes bounds each function's
// mapped memory: a MAP_MEM beyond it is refused with NO_MEMORY and a
// reason; the connection goes on; another function has its own budget.
func TestMaxMappedBytes(t *testing.T) {
	dev := hca.New(hca.Options{Caps: withMaxMapped(1 << 20)})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	a, err := remote.Dial(path)
	require.NoError(t, err)
	defer a.Close()
	_, iova, err := a.AllocDMA(512<<10, 4096)
	require.NoError(t, err)
	_, _, err = a.AllocDMA(768<<10, 4096)
	var se *remote.StatusError
	if !errors.As(err, &se) || se.Status != remote.StatusNoMemory || se.Reason == "" {
		t.Fatalf("mapping 1.25 MiB with a 1 MiB limit: %v, want NO_MEMORY with a reason", err)
	}
	t.Logf("refused: %v", err)
	if _, _, err := a.AllocDMA(256<<10, 4096); err != nil {
		t.Fatalf("mapping within the limit after a refusal: %v", err)
	}
	b, err := remote.Dial(path)
	require.NoError(t, err)
	defer b.Close()
	if _, _, err := b.AllocDMA(1<<20, 4096); err != nil {
		t.Fatalf("another function's 1 MiB: %v", err)
	}
	require.NoError(t, a.FreeDMA(iova))
	if _, _, err := a.AllocDMA(768<<10, 4096); err != nil {
		t.Fatalf("mapping after a free: %v", err)
	}
	// The same through verbs: a clear error.
	ctx := dial(t, path)
	if _, err := ctx.Alloc(2 << 20); err == nil || !errors.As(err, &se) || se.Status != remote.StatusNoMemory {
		t.Fatalf("verbs Alloc beyond the limit: %v", err)
	}
}

// TestObjectLimits: the device's per-function CQ and QP limits refuse
// further creates with a command status; other functions have their own.
func TestObjectLimits(t *testing.T) {
	caps := hca.ConnectX5Caps
	caps.MaxCQ, caps.MaxQP, caps.MaxPD = 2, 1, 2
	dev := hca.New(hca.Options{Caps: &caps})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	for range 2 {
		ctx := dial(t, path)
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		if _, err := ctx.AllocPD(); err != nil {
			t.Fatal(err)
		}
		var ce *ifc.CmdError
		if _, err := ctx.AllocPD(); !errors.As(err, &ce) {
			t.Errorf("a 3rd PD with MaxPD 2: %v", err)
		}
		c1, err := ctx.CreateCQ(16, nil)
		require.NoError(t, err)
		if _, err := ctx.CreateCQ(16, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ctx.CreateCQ(16, nil); !errors.As(err, &ce) {
			t.Errorf("a 3rd CQ with MaxCQ 2: %v, want a command error", err)
		} else {
			t.Logf("3rd CQ: %v", err)
		}
		attr := &verbs.QPInitAttr{SendCQ: c1, RecvCQ: c1, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
		if _, err := pd.CreateQP(attr); err != nil {
			t.Fatal(err)
		}
		if _, err := pd.CreateQP(attr); !errors.As(err, &ce) {
			t.Errorf("a 2nd QP with MaxQP 1: %v, want a command error", err)
		} else {
			t.Logf("2nd QP: %v", err)
		}
	}
}

// TestListen: the socket is mode 0600; Listen refuses to replace a file
// that is not a socket or the socket of a live daemon, and replaces a
// stale socket.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/hcasim.sock"
	l, err := daemon.Listen(path)
	require.NoError(t, err)
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	// A live daemon's socket.
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	s := &daemon.Server{Dev: dev}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	if _, err := daemon.Listen(path); err == nil {
		t.Errorf("Listen replaced a live daemon's socket")
	}
	healthy(t, path)
	s.Shutdown(0)
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
	// A stale socket (a daemon that died without removing it).
	stale := dir + "/stale.sock"
	sl, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: stale, Net: "unixpacket"})
	require.NoError(t, err)
	sl.SetUnlinkOnClose(false)
	sl.Close()
	l2, err := daemon.Listen(stale)
	require.NoError(t, err, "Listen over a stale socket")
	l2.Close()
	// Not sockets.
	regular := dir + "/file"
	require.NoError(t, os.WriteFile(regular, []byte("keep me"), 0o644))
	if _, err := daemon.Listen(regular); err == nil {
		t.Errorf("Listen replaced a regular file")
	}
	if b, err := os.ReadFile(regular); err != nil || string(b) != "keep me" {
		t.Errorf("the regular file is gone or changed: %q %v", b, err)
	}
	sub := dir + "/dir"
	os.Mkdir(sub, 0o755)
	if _, err := daemon.Listen(sub); err == nil {
		t.Errorf("Listen replaced a directory")
	}
	link := dir + "/link"
	os.Symlink(regular, link)
	if _, err := daemon.Listen(link); err == nil {
		t.Errorf("Listen replaced a symlink")
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("the symlink is gone: %v", err)
	}
}

// ---------------------------------------------------------------------
// Shutdown.

// TestShutdown: Shutdown moves every QP to error, so that work a client
// posted and nobody will answer (SENDs waiting for receives, receives
// waiting for SENDs) completes with WR_FLUSH_ERR in its CQs during the
// grace period; then the connections close, Serve returns nil, and the
// socket refuses new clients. A connection that has not sent HELLO is
// closed too.
func TestShutdown(t *testing.T) {
	dev := hca.New(hca.Options{TimeScale: 4})
	t.Cleanup(func() { dev.Close() })
	s := &daemon.Server{Dev: dev}
	path, done := startServe(t, s)
	const all = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	a := newNode(t, dial(t, path), 1<<16, all)
	b := newNode(t, dial(t, path), 1<<16, all)
	ea, eb := a.ep(t, nil), b.ep(t, nil)
	connectEPs(t, ea, eb, &verbs.ConnectOptions{RNRRetry: 7}, &verbs.ConnectOptions{MinRNRTimer: 1})
	// A's SENDs wait for receives B never posts; B's receives on a second
	// QP wait for SENDs nobody sends.
	post(t, ea, send(1, a.mr.SGE(0, 8)), send(2, a.mr.SGE(8, 8)), write(3, a.mr.SGE(16, 8), b.mr.Addr, b.mr.RKey))
	eb2, ea2 := b.ep(t, nil), a.ep(t, nil)
	connectEPs(t, eb2, ea2, nil, nil)
	postRecv(t, eb2, verbs.RecvWR{WRID: 10, SG: []verbs.SGE{b.mr.SGE(0, 64)}}, verbs.RecvWR{WRID: 11, SG: []verbs.SGE{b.mr.SGE(64, 64)}})
	hcatest.Quiet(t, ea.scq, 20*time.Millisecond, "A's send CQ before the shutdown")
	idle := dialRaw(t, path) // connected, no HELLO
	late := dialRaw(t, path) // HELLO during the grace period
	// Both accepted (a connection still in the listener's backlog is reset
	// when the listener closes): the daemon answers a short packet.
	for _, r := range []*rawConn{idle, late} {
		r.mustSend([]byte{0})
		r.expectError("a short packet", 0, remote.StatusBadMessage)
	}

	const grace = time.Second
	start := time.Now()
	stopped := make(chan struct{})
	go func() { s.Shutdown(grace); close(stopped) }()
	for _, wc := range hcatest.PollWithin(t, ea.scq, 3, grace) {
		assert.EqualValues(t, verbs.WCWRFlushErr, wc.Status, "A's WR %d at shutdown: %v, want WR_FLUSH_ERR", wc.WRID, wc.Status)
	}
	for _, wc := range hcatest.PollWithin(t, eb2.rcq, 2, grace) {
		assert.EqualValues(t, verbs.WCWRFlushErr, wc.Status, "B's receive %d at shutdown: %v, want WR_FLUSH_ERR", wc.WRID, wc.Status)
	}
	if el := time.Since(start); el >= grace {
		t.Errorf("the flush completions came after the grace period (%v)", el)
	}
	// A new function during the grace period is refused.
	late.mustSend(remote.Encode(nil, remote.TypeHello, 1, helloPayload(remote.Magic, remote.Version)))
	late.expectError("HELLO during shutdown", 1, remote.StatusShutdown)
	select {
	case <-stopped:
		t.Errorf("Shutdown returned before its grace period")
	default:
	}
	select {
	case <-stopped:
	case <-time.After(grace + 10*time.Second):
		t.Fatal("Shutdown did not return")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	idle.expectClosed("a connection without HELLO")
	for _, ctx := range []*verbs.Context{a.ctx, b.ctx} {
		cl := ctx.Function().(*remote.Client)
		for deadline := time.Now().Add(5 * time.Second); cl.Err() == nil; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a client does not see its connection closed")
			}
		}
		if _, err := ctx.AllocPD(); err == nil {
			t.Errorf("a command after shutdown succeeded")
		}
	}
	if _, err := verbs.Dial(path); err == nil {
		t.Errorf("Dial after shutdown succeeded")
	}
}

// TestHeldAddressSpace: an unmapped region stays reserved in the daemon
// (in-flight DMA may still hold it) until the client's next MAP_MEM
// reuses it or the connection closes. Same-size churn reuses it and
// never reaches MaxMaps; churn of growing sizes fills MaxHeldBytes, and
// the UNMAP past it is refused with NO_MEMORY, the mapping staying live
// and usable, rather than growing the daemon's address space.
func TestHeldAddressSpace(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	path := serveWith(t, &daemon.Server{Dev: dev, MaxMaps: 4, MaxHeldBytes: 1 << 20})
	cl, err := remote.Dial(path)
	require.NoError(t, err)
	defer cl.Close()

	for i := range 50 {
		_, iova, err := cl.AllocDMA(64<<10, 4096)
		require.NoError(t, err, "same-size churn, round %d", i)
		require.NoError(t, cl.FreeDMA(iova), "same-size churn, round %d", i)
	}

	// Held now: 64 KiB. Growing sizes cannot reuse it.
	var se *remote.StatusError
	var big uint64
	for _, n := range []int{256 << 10, 512 << 10, 1 << 20} {
		mem, iova, err := cl.AllocDMA(n, 4096)
		require.NoError(t, err, "map %d bytes", n)
		err = cl.FreeDMA(iova)
		if n < 1<<20 {
			require.NoError(t, err, "unmap %d bytes within the held limit", n)
			continue
		}
		if !errors.As(err, &se) || se.Status != remote.StatusNoMemory || !strings.Contains(se.Reason, "limit") {
			t.Fatalf("unmap past MaxHeldBytes: %v, want NO_MEMORY naming the limit", err)
		}
		// Still mapped on both sides: the client can use it, and free
		// it once maps have reused the held regions, or reconnect.
		big = iova
		mem[0] = 0x5a
		if err := cl.FreeDMA(iova); !errors.As(err, &se) || se.Status != remote.StatusNoMemory {
			t.Fatalf("second unmap past the limit: %v", err)
		}
	}
	// Maps that fit held regions reuse them (MaxMaps 4 would refuse
	// new ones: 1 live + 3 held): once none is held, the 1 MiB unmap
	// goes through.
	for _, n := range []int{512 << 10, 256 << 10, 64 << 10} {
		if _, _, err := cl.AllocDMA(n, 4096); err != nil {
			t.Fatalf("map %d bytes reusing a held region: %v", n, err)
		}
	}
	require.NoError(t, cl.FreeDMA(big), "unmap once the held regions are reused")
	if cl.Err() != nil {
		t.Fatalf("the connection ended: %v", cl.Err())
	}
}

// TestShutdownGrace: a QP a client connects during the grace period is
// flushed too before its connection closes (the flush completions are in
// the client's own memory, to poll after the disconnect), and Shutdown
// does not wait out its grace once every client has gone.
func TestShutdownGrace(t *testing.T) {
	for _, leave := range []bool{false, true} {
		dev := hca.New(hca.Options{TimeScale: 4})
		t.Cleanup(func() { dev.Close() })
		s := &daemon.Server{Dev: dev}
		path, done := startServe(t, s)
		const all = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
		ctx, err := verbs.Dial(path)
		require.NoError(t, err)
		t.Cleanup(func() { ctx.Close() })
		n := newNode(t, ctx, 1<<12, all)
		_ = n.ep(t, nil) // a QP to quiesce at once

		grace := 300 * time.Millisecond
		if leave {
			grace = 30 * time.Second
		}
		start := time.Now()
		stopped := make(chan struct{})
		go func() { s.Shutdown(grace); close(stopped) }()
		time.Sleep(20 * time.Millisecond)
		late := n.ep(t, nil) // created and connected during the grace period
		require.NoError(t, late.qp.Connect(late.qp.Info(), nil))
		postRecv(t, late, verbs.RecvWR{WRID: 21, SG: []verbs.SGE{n.mr.SGE(0, 64)}})
		hcatest.Quiet(t, late.rcq, 20*time.Millisecond, "a receive posted during the grace period")
		if leave {
			// The client goes: Shutdown returns long before its grace.
			ctx.Close()
		}
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatalf("leave %v: Shutdown did not return", leave)
		}
		if el := time.Since(start); leave && el >= grace {
			t.Errorf("Shutdown took %v after its only client went", el)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v", err)
		}
		if !leave {
			// Connection closed; the completion is in the client's CQ.
			hcatest.CheckErr(t, "the receive posted during the grace period", hcatest.PollWithin(t, late.rcq, 1, time.Second)[0], 21, verbs.WCWRFlushErr, 0)
		}
	}
}

// TestReplyTimeout: a daemon that stops answering does not hang its
// client: the request fails with ErrTimeout after ReplyTimeout and the
// connection is closed.
func TestReplyTimeout(t *testing.T) {
	path := t.TempDir() + "/mute.sock"
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	require.NoError(t, err)
	defer l.Close()
	got := make(chan int, 1)
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, remote.MaxMessage)
		n, _ := c.Read(buf) // the HELLO, never answered
		got <- n
		c.Read(buf) // until the client closes
	}()
	old := remote.ReplyTimeout
	remote.ReplyTimeout = 200 * time.Millisecond
	defer func() { remote.ReplyTimeout = old }()
	start := time.Now()
	_, err = remote.Dial(path)
	require.True(t, errors.Is(err, remote.ErrTimeout), "Dial to a mute daemon: %v, want ErrTimeout", err)
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Dial gave up after %v", el)
	}
	if n := <-got; n != remote.HeaderSize+8 {
		t.Errorf("the mute daemon read %d bytes, want a HELLO", n)
	}
}

// TestMemoryBudgets: a client that creates mkeys with large translations
// until the device refuses gets EXCEED_LIM at its own budget, and another
// client keeps working; the device-wide budget refuses the second client
// once both together hold it, and a client that goes away gives its share
// back.
func TestMemoryBudgets(t *testing.T) {
	caps := hca.ConnectX5Caps
	caps.FuncMemBytes, caps.DevMemBytes = 4<<20, 6<<20
	dev := hca.New(hca.Options{Caps: &caps})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	exceeded := func(err error) bool {
		var ce *ifc.CmdError
		return errors.As(err, &ce) && ce.Status == ifc.StatusExceedLim
	}
	// fill allocates 64 KiB-translation MRs on ctx until one is refused.
	fill := func(ctx *verbs.Context) (int, error) {
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		for n := 0; ; n++ {
			if _, err := pd.AllocMR(verbs.MRTypeMemReg, 8192); err != nil {
				return n, err
			}
		}
	}
	a := dial(t, path)
	require.Equal(t, caps.FuncMemBytes, a.Caps().FuncMemBytes, "QUERY_HCA_CAP advertises the budget")
	n, err := fill(a)
	require.True(t, exceeded(err), "client A's refusal: %v", err)
	require.InDelta(t, 4<<20>>16, n, 2, "A's MRs before its budget")

	b := dial(t, path)
	pd, err := b.AllocPD()
	require.NoError(t, err)
	cq, err := b.CreateCQ(16, nil)
	require.NoError(t, err, "B works while A is at its budget")
	_, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	m, err := fill(b)
	require.True(t, exceeded(err), "client B's refusal at the device's budget: %v", err)
	require.Less(t, m, n, "B stopped at the device's budget, before its own")
	require.LessOrEqual(t, dev.MemCharged(), caps.DevMemBytes)

	require.NoError(t, a.Close())
	for deadline := time.Now().Add(5 * time.Second); dev.MemCharged() > 3<<20 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // the daemon closes A's function
	}
	_, err = pd.AllocMR(verbs.MRTypeMemReg, 8192)
	require.NoError(t, err, "A's share came back")
	healthy(t, path)
}

// TestHostileClientDefaultBudget: with the default budgets, a client that
// registers MRs with 32 KiB MTTs without end (issue 29's hostile client,
// which held 862 MiB of the daemon under the old 1 GiB budget) is refused
// with EXCEED_LIM at its 192 MiB budget, before the daemon's heap grows
// by 256 MiB; another client still works, and the refused one's memory
// comes back when it goes.
func TestHostileClientDefaultBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("creates about 3,000 mkeys")
	}
	caps := hca.ConnectX5Caps
	require.Equal(t, uint64(192<<20), caps.FuncMemBytes, "the default per-client budget")
	dev := hca.New(hca.Options{Caps: &caps})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a := dial(t, path)
	pd, err := a.AllocPD()
	require.NoError(t, err)
	buf, err := a.Alloc(16 << 20) // 4096 pages: each registration sends a 32 KiB MTT (64 KiB is past a message)
	require.NoError(t, err)
	n := 0
	for ; ; n++ {
		if _, err = pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
			break
		}
		require.Less(t, n, 1<<20, "never refused")
	}
	var ce *ifc.CmdError
	require.True(t, errors.As(err, &ce) && ce.Status == ifc.StatusExceedLim, "the refusal: %v", err)
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)
	t.Logf("%d mkeys before EXCEED_LIM; the device holds %d MiB; the heap grew %d MiB", n, dev.MemCharged()>>20, growth>>20)
	require.InDelta(t, float64(192<<20)/float64(512+32<<10), n, 2, "mkeys within the budget")
	require.Less(t, growth, int64(256<<20), "the daemon's growth")
	b := dial(t, path)
	_, err = b.AllocPD()
	require.NoError(t, err, "another client works")
	require.NoError(t, a.Close())
	for deadline := time.Now().Add(5 * time.Second); dev.MemCharged() > 1<<20 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	require.Less(t, dev.MemCharged(), uint64(1<<20), "the refused client's share came back")
}
