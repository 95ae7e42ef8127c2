package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/hca/remote"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/ucma"
)

// Server serves a device's functions over Unix sockets: every connection
// is a function of its own (its own DMA address space, PDs, objects and
// limits), and QPs of different connections may connect to one another as
// the functions of one HCA.
type Server struct {
	// Dev is the device served.
	Dev *hca.Device
	// Log receives connection-level records; nil discards them.
	Log *slog.Logger
	// MaxMaps bounds each client's live MAP_MEM mappings (0: 4096). The
	// bytes mapped are bounded by the device's MaxMappedBytes per function.
	MaxMaps int
	// MaxHeldBytes bounds the address space each client's unmapped
	// regions may hold until they can be released (0: 64 GiB); see
	// conn.unmap.
	MaxHeldBytes uint64

	mu        sync.Mutex
	listeners map[*net.UnixListener]struct{}
	cm        *ucma.Service // the connection manager, made by the first UCMA_OPEN
	conns     map[*conn]struct{}
	stopping  bool
	// served runs one goroutine per connection; Shutdown waits for them.
	// A connection's error ends only that connection (it is logged), so
	// the group carries no error and cancels nothing.
	served errgroup.Group
}

// Listen creates a SOCK_SEQPACKET Unix socket at path, mode 0600. A stale
// socket file nobody listens on is replaced; any other file is not.
func Listen(path string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listen %s: exists and is not a socket", path)
		}
		if c, err := net.Dial("unixpacket", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: a daemon is already serving it", path)
		}
		os.Remove(path)
	}
	old := syscall.Umask(0o177)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// Serve accepts connections on l until l is closed (Shutdown closes it)
// and serves each on its own goroutine. It returns nil after Shutdown.
func (s *Server) Serve(l *net.UnixListener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	if s.listeners == nil {
		s.listeners = map[*net.UnixListener]struct{}{}
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	if s.Dev.GID() != ([16]byte{}) {
		s.cmService() // the CM answers the wire's REQs from the start
	}
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if stopping || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and the like: back off and keep serving the others.
			s.log().Warn("accept", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.ServeConn(c)
	}
}

// ServeConn serves one connection (already accepted) on a new goroutine.
func (s *Server) ServeConn(c *net.UnixConn) {
	cn := &conn{s: s, c: c, maps: map[uint64][]byte{}, stop: make(chan struct{})}
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		c.Close()
		return
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[cn] = struct{}{}
	// Started with s.mu held and stopping unset: Shutdown's Wait never
	// races a Go.
	s.served.Go(func() error {
		cn.serve()
		s.mu.Lock()
		delete(s.conns, cn)
		s.mu.Unlock()
		return nil
	})
	s.mu.Unlock()
}

// Shutdown stops the server: listeners close, every function's QPs move to
// error so that all outstanding work completes with flush errors in the
// clients' CQs, then, after grace (for clients to see them) or once every
// client has disconnected, connections close, QPs stop and memory is
// unmapped once no DMA is in flight.
func (s *Server) Shutdown(grace time.Duration) {
	s.mu.Lock()
	s.stopping = true
	for l := range s.listeners {
		l.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.quiesce()
	}
	// No connection is added once stopping is set: waiting is safe.
	gone := make(chan struct{})
	go func() { s.served.Wait(); close(gone) }() // Shutdown waits for it below
	if len(conns) > 0 && grace > 0 {
		t := time.NewTimer(grace)
		select {
		case <-gone: // every client has gone already
		case <-t.C:
		}
		t.Stop()
	}
	for _, c := range conns {
		// Again, for QPs a client created or reconnected during the
		// grace period: their work flushes too, into the client's own
		// memory, where it can poll it after the connection closed.
		c.quiesce()
		c.c.Close()
	}
	<-gone
}

// conn is one client connection: one function.
type conn struct {
	s  *Server
	c  *net.UnixConn
	id string

	wmu sync.Mutex // one writer at a time

	mu   sync.Mutex // fn, maps, dead
	fn   *hca.Func
	maps map[uint64][]byte // IOVA → the daemon's mapping of the client's memfd
	dead [][]byte          // unmapped regions, held as private placeholders until close
	held uint64            // bytes in dead

	stop  chan struct{}
	tasks errgroup.Group // the event forwarder; close waits for it

	cm  *ucma.Channel // a connection-manager connection's channel (UCMA_OPEN), under mu
	efd int           // its eventfd
}

func (c *conn) serve() {
	log := c.s.log().With("conn", fmt.Sprintf("%p", c))
	log.Info("client connected")
	debug := log.Enabled(context.Background(), slog.LevelDebug)
	defer func() {
		c.close()
		log.Info("client disconnected")
	}()
	buf := make([]byte, remote.MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(4*8))
	for {
		n, oobn, flags, _, err := c.c.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return // closed, or the peer shut down (a zero-length packet)
		}
		fds, ferr := parseFDs(oob[:oobn])
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > remote.MaxMessage {
			closeFDs(fds)
			log.Warn("oversized message", "bytes", n)
			c.send(remote.Encode(nil, remote.TypeError, 0, remote.ErrorPayload(remote.StatusBadMessage, "message too large")))
			return
		}
		reply, fatal := c.handle(buf[:n], fds, ferr)
		if debug {
			logMessage(log, buf[:n], reply)
		}
		if reply != nil {
			if err := c.send(reply); err != nil {
				return
			}
		}
		if fatal {
			log.Warn("closing the connection after a protocol violation")
			return
		}
	}
}

// logMessage logs a request and its reply at debug level: HELLO, COMMAND
// (its opcode and status), MAP_MEM, UNMAP and refusals, not doorbells.
func logMessage(log *slog.Logger, req, reply []byte) {
	h, pl, err := remote.Decode(req)
	if err != nil {
		return
	}
	rh, rpl, _ := remote.Decode(reply)
	refused := reply != nil && rh.Type == remote.TypeError
	switch {
	case h.Type == remote.TypeCommand && !refused:
		log.Debug("command", "opcode", fmt.Sprintf("%#x", ifc.In(pl).Opcode()), "status", ifc.Out(rpl).Status())
	case h.Type == remote.TypeHello || h.Type == remote.TypeMapMem || h.Type == remote.TypeUnmap || refused:
		attrs := []any{"type", h.Type}
		if refused {
			st, reason, _ := remote.ParseStatus(rpl)
			attrs = append(attrs, "refused", st, "reason", reason)
		}
		log.Debug("message", attrs...)
	}
}

// send writes one message.
func (c *conn) send(msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.c.Write(msg)
	return err
}

// handle executes one message and returns the reply (nil: none), and
// whether the connection must close. It owns fds: each is consumed or
// closed. ferr is a failure to take the descriptors (too many).
//
// The checks come in the order PROTOCOL.md §3 gives ("Order of checks"):
// the header, the descriptors, HELLO first, then the payload (length,
// fields, reserved fields), the descriptor's use, and last the state and
// limits; the first that fails answers, and a refused message has no
// effect.
func (c *conn) handle(p []byte, fds []int, ferr error) (reply []byte, fatal bool) {
	defer closeFDs(fds) // MAP_MEM takes its descriptor out first
	h, pl, err := remote.Decode(p)
	if err != nil {
		return remote.Encode(nil, remote.TypeError, h.ID, remote.ErrorPayload(remote.StatusBadMessage, err.Error())), false
	}
	fail := func(st remote.Status, format string, args ...any) ([]byte, bool) {
		return remote.Encode(nil, remote.TypeError, h.ID, remote.ErrorPayload(st, fmt.Sprintf(format, args...))), false
	}
	if ferr != nil {
		return fail(remote.StatusBadFD, "%v", ferr)
	}
	if h.Type != remote.TypeMapMem && h.Type != remote.TypeUcmaOpen && len(fds) > 0 {
		return fail(remote.StatusBadFD, "%v carries no descriptor", h.Type)
	}
	c.mu.Lock()
	fn := c.fn
	c.mu.Unlock()
	if h.Type == remote.TypeUcmaOpen || h.Type == remote.TypeUcma {
		return c.ucma(h, pl, fds)
	}
	if fn == nil && h.Type != remote.TypeHello {
		return remote.Encode(nil, remote.TypeError, h.ID, remote.ErrorPayload(remote.StatusNotReady, "the first message must be HELLO")), true
	}
	switch h.Type {
	case remote.TypeHello:
		return c.hello(h, pl)
	case remote.TypeCommand:
		out := fn.Command(pl)
		if len(out) > remote.MaxMessage-remote.HeaderSize {
			out = ifc.FailOut(ifc.StatusBadOutLen, 0, "output mailbox larger than a message")
		}
		return remote.Encode(nil, remote.TypeCommand|remote.ReplyBit, h.ID, out), false
	case remote.TypeMapMem:
		if len(pl) != remote.MapSize {
			return fail(remote.StatusBadMessage, "MAP_MEM payload of %d bytes", len(pl))
		}
		if err := mapFields(be64(pl), be32(pl[8:]), be32(pl[12:])); err != nil {
			return fail(remote.StatusBadMessage, "%v", err)
		}
		if len(fds) != 1 {
			return fail(remote.StatusBadFD, "MAP_MEM with %d descriptors, want 1", len(fds))
		}
		fd := fds[0]
		fds[0] = -1
		iova, st, err := c.mapMem(fd, be64(pl), be32(pl[8:]))
		unix.Close(fd)
		if st != remote.StatusOK {
			return fail(st, "%v", err)
		}
		r := binary.BigEndian.AppendUint32(nil, uint32(remote.StatusOK))
		r = binary.BigEndian.AppendUint32(r, 0)
		r = binary.BigEndian.AppendUint64(r, iova)
		return remote.Encode(nil, remote.TypeMapMem|remote.ReplyBit, h.ID, r), false
	case remote.TypeUnmap:
		if len(pl) != remote.UnmapSize {
			return fail(remote.StatusBadMessage, "UNMAP payload of %d bytes", len(pl))
		}
		if st, err := c.unmap(be64(pl)); err != nil {
			return fail(st, "%v", err)
		}
		return remote.Encode(nil, remote.TypeUnmap|remote.ReplyBit, h.ID, binary.BigEndian.AppendUint32(nil, uint32(remote.StatusOK))), false
	case remote.TypeRingSQ, remote.TypeRingRQ:
		if len(pl) != remote.RingSize {
			return fail(remote.StatusBadMessage, "%v payload of %d bytes", h.Type, len(pl))
		}
		if h.Type == remote.TypeRingSQ {
			fn.RingSQ(be32(pl))
		} else {
			fn.RingRQ(be32(pl))
		}
		return nil, false
	case remote.TypeArmCQ:
		if len(pl) != remote.ArmSize {
			return fail(remote.StatusBadMessage, "ARM_CQ payload of %d bytes", len(pl))
		}
		fn.ArmCQ(be32(pl), be32(pl[4:]))
		if h.ID == 0 {
			return nil, false
		}
		return remote.Encode(nil, remote.TypeArmCQ|remote.ReplyBit, h.ID, binary.BigEndian.AppendUint32(nil, uint32(remote.StatusOK))), false
	}
	return fail(remote.StatusUnknownType, "unknown message type %#x", uint16(h.Type))
}

func (c *conn) hello(h remote.Header, pl []byte) ([]byte, bool) {
	refuse := func(st remote.Status, msg string) ([]byte, bool) {
		return remote.Encode(nil, remote.TypeError, h.ID, remote.ErrorPayload(st, msg)), true
	}
	if len(pl) != remote.HelloSize || be32(pl) != remote.Magic {
		return refuse(remote.StatusBadMessage, "HELLO needs the magic HCAS")
	}
	if v := binary.BigEndian.Uint16(pl[4:]); v != remote.Version {
		// Before the reserved field: another version may use it.
		return refuse(remote.StatusBadVersion, fmt.Sprintf("version %d; this daemon speaks %d", v, remote.Version))
	}
	if r := binary.BigEndian.Uint16(pl[6:]); r != 0 {
		return refuse(remote.StatusBadMessage, fmt.Sprintf("HELLO's reserved field is %#x, not 0", r))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fn != nil {
		return refuse(remote.StatusBadMessage, "a second HELLO")
	}
	if c.cm != nil {
		return refuse(remote.StatusBadMessage, "HELLO on a connection-manager connection")
	}
	// No new function once Shutdown began: quiesce would miss it (an
	// accepted connection may send HELLO during the grace period). Checked
	// with c.mu held, so that a HELLO that passes is seen by quiesce.
	c.s.mu.Lock()
	stopping := c.s.stopping
	c.s.mu.Unlock()
	if stopping {
		return refuse(remote.StatusShutdown, "the daemon is shutting down")
	}
	fn, err := c.s.Dev.Open()
	if err != nil {
		return refuse(remote.StatusShutdown, err.Error())
	}
	c.fn = fn
	c.tasks.Go(func() error { c.events(fn); return nil })
	r := binary.BigEndian.AppendUint32(nil, uint32(remote.StatusOK))
	r = binary.BigEndian.AppendUint16(r, remote.Version)
	r = binary.BigEndian.AppendUint16(r, c.s.Dev.LID())
	r = binary.BigEndian.AppendUint32(r, remote.MaxMessage)
	return remote.Encode(nil, remote.TypeHello|remote.ReplyBit, h.ID, r), false
}

// events forwards the function's events to the client.
func (c *conn) events(fn *hca.Func) {
	var evs []ifc.Event
	for {
		select {
		case <-c.stop:
			return
		case <-fn.Events():
		}
		evs = fn.DrainEvents(evs[:0])
		for len(evs) > 0 {
			n := min(len(evs), (remote.MaxMessage-remote.HeaderSize)/remote.EventSize)
			p := make([]byte, 0, n*remote.EventSize)
			for _, e := range evs[:n] {
				p = append(p, uint8(e.Type), 0, 0, 0)
				p = binary.BigEndian.AppendUint32(p, e.Obj)
			}
			evs = evs[n:]
			if c.send(remote.Encode(nil, remote.TypeEvents, 0, p)) != nil {
				return
			}
		}
	}
}

// mapFields checks a MAP_MEM's fields: size, alignment, reserved.
func mapFields(size uint64, align, reserved uint32) error {
	if size == 0 || size > 1<<40 || uint64(int(size)) != size || align == 0 || align&(align-1) != 0 || align > 1<<30 {
		return fmt.Errorf("map of %d bytes aligned %d", size, align)
	}
	if reserved != 0 {
		return fmt.Errorf("MAP_MEM's reserved field is %#x, not 0", reserved)
	}
	return nil
}

// mapMem maps a client's memfd and makes it the function's DMA memory
// (the fields were checked, mapFields). What the descriptor itself rules
// out — no shrink seal, a write seal, not open read-write, not a regular
// file, too small — is BAD_FD; NO_MEMORY is only the daemon's limits and
// resources.
func (c *conn) mapMem(fd int, size uint64, align uint32) (uint64, remote.Status, error) {
	// A client that could shrink the file would turn the daemon's next
	// access into SIGBUS: the memfd must be sealed against shrinking.
	// The seal is checked before the size: seals are never removed, so a
	// size read after the check holds; read before it, the client (which
	// keeps its own descriptor) could shrink the file in between and seal
	// it then.
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return 0, remote.StatusBadFD, errors.New("the memfd is not sealed with F_SEAL_SHRINK")
	}
	if seals&(unix.F_SEAL_WRITE|unix.F_SEAL_FUTURE_WRITE) != 0 {
		return 0, remote.StatusBadFD, errors.New("the memfd is sealed against writing: the device could not write it")
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE != unix.O_RDWR {
		return 0, remote.StatusBadFD, errors.New("the descriptor is not open for reading and writing")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Size) < size {
		return 0, remote.StatusBadFD, fmt.Errorf("descriptor is not a regular file of at least %d bytes", size)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	max := c.s.MaxMaps
	if max <= 0 {
		max = 4096
	}
	// Reuse the smallest held region that fits: the memfd is mapped over
	// its start (MAP_FIXED), a late access to the old region then reaches
	// this client's own new memory, never another's.
	var addr unsafe.Pointer
	best := -1
	for i, d := range c.dead {
		if uint64(len(d)) >= size && (best < 0 || len(d) < len(c.dead[best])) {
			best = i
		}
	}
	// The regions after this map: one more, unless it reuses a held one
	// whole.
	n := len(c.maps) + len(c.dead) + 1
	if best >= 0 && pageUp(size) == uint64(len(c.dead[best])) {
		n--
	}
	if n > max {
		return 0, remote.StatusNoMemory, fmt.Errorf("%d mappings (%d of them unmapped, held until no DMA can reach them): the limit", len(c.maps)+len(c.dead), len(c.dead))
	}
	flags := unix.MAP_SHARED
	if best >= 0 {
		addr, flags = unsafe.Pointer(unsafe.SliceData(c.dead[best])), flags|unix.MAP_FIXED
	}
	p, err := unix.MmapPtr(fd, 0, addr, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENODEV) {
			// The descriptor cannot be mapped shared and writable (the
			// checks above should have caught it).
			return 0, remote.StatusBadFD, fmt.Errorf("mmap: %w", err)
		}
		return 0, remote.StatusNoMemory, fmt.Errorf("mmap: %w", err)
	}
	mem := unsafe.Slice((*byte)(p), int(size))
	iova, err := c.fn.MapDMA(mem, int(align))
	if err != nil {
		if best >= 0 {
			c.placeholder(mem) // the region stays held
		} else {
			unix.MunmapPtr(p, uintptr(size))
		}
		return 0, remote.StatusNoMemory, err
	}
	if best >= 0 {
		d := c.dead[best]
		c.held -= uint64(len(d))
		c.dead = append(c.dead[:best], c.dead[best+1:]...)
		if tail := pageUp(size); tail < uint64(len(d)) {
			c.dead = append(c.dead, d[tail:])
			c.held += uint64(len(d)) - tail
		}
	}
	c.maps[iova] = mem
	return iova, remote.StatusOK, nil
}

func pageUp(n uint64) uint64 {
	ps := uint64(os.Getpagesize())
	return (n + ps - 1) &^ (ps - 1)
}

// placeholder replaces a region's pages by private zero pages.
func (c *conn) placeholder(mem []byte) {
	if _, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED); err != nil {
		// Keep the shared mapping until close rather than fail.
		c.s.log().Warn("unmap placeholder", "err", err)
	}
}

// unmap takes a mapping away from the function. Work still in flight may
// hold its pages, so the range is not unmapped but replaced by private
// zero pages (the client's memory is no longer reachable, a late access
// touches nothing of the client's); the range is held for the client's
// next MAP_MEM (mapMem reuses it) and unmapped when the connection
// closes, after the function's QPs have stopped. The address space held
// is bounded (Server.MaxHeldBytes): past it an UNMAP is refused and the
// mapping stays live, counted against the client's mapped bytes.
func (c *conn) unmap(iova uint64) (remote.Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	mem, ok := c.maps[iova]
	if !ok {
		return remote.StatusNotMapped, fmt.Errorf("no mapping at %#x", iova)
	}
	limit := c.s.MaxHeldBytes
	if limit == 0 {
		limit = 64 << 30
	}
	if c.held+pageUp(uint64(len(mem))) > limit {
		return remote.StatusNoMemory, fmt.Errorf("%d bytes of unmapped regions held (reuse them with MAP_MEM of at most their size, or reconnect): the limit", c.held)
	}
	if err := c.fn.FreeDMA(iova); err != nil {
		return remote.StatusNotMapped, err
	}
	delete(c.maps, iova)
	c.placeholder(mem)
	full := unsafe.Slice(unsafe.SliceData(mem), int(pageUp(uint64(len(mem)))))
	c.dead = append(c.dead, full)
	c.held += uint64(len(full))
	return remote.StatusOK, nil
}

// quiesce moves the function's QPs to error (Shutdown). It holds mu: a
// close running at the same time (the client went) waits, and does not
// unmap the memory the flush completions are written to.
func (c *conn) quiesce() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fn != nil {
		c.fn.Quiesce()
	}
}

// close releases the function, then the memory, then the connection: the
// function's Close returns once its QPs stopped and no peer serves their
// requests any more; the client sees the connection end after that.
func (c *conn) close() {
	close(c.stop)
	c.mu.Lock()
	fn := c.fn
	c.fn = nil
	cm, efd := c.cm, c.efd
	c.cm = nil
	c.mu.Unlock()
	if cm != nil {
		cm.Close()
		unix.Close(efd)
	}
	if fn != nil {
		fn.Close()
	}
	c.mu.Lock()
	for _, m := range c.maps {
		unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(m)), uintptr(len(m)))
	}
	for _, m := range c.dead {
		unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(m)), uintptr(len(m)))
	}
	c.maps, c.dead, c.held = nil, nil, 0
	c.mu.Unlock()
	c.c.Close()
	c.tasks.Wait() // stop is closed and the socket too: events returns
}

// parseFDs returns the descriptors of SCM_RIGHTS messages in oob.
func parseFDs(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		f, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("control message: %w", err)
		}
		fds = append(fds, f...)
	}
	if len(fds) > remote.MaxFDs {
		return fds, fmt.Errorf("%d descriptors in one message", len(fds))
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// ucma serves a connection-manager connection: UCMA_OPEN (with its
// eventfd) makes it one, then each UCMA message is one rdma_ucm command.
func (c *conn) ucma(h remote.Header, pl []byte, fds []int) ([]byte, bool) {
	fail := func(st remote.Status, msg string) ([]byte, bool) {
		return remote.Encode(nil, remote.TypeError, h.ID, remote.ErrorPayload(st, msg)), false
	}
	c.mu.Lock()
	fn, cm := c.fn, c.cm
	c.mu.Unlock()
	if h.Type == remote.TypeUcma {
		if cm == nil {
			return remote.Encode(nil, remote.TypeError, h.ID, remote.ErrorPayload(remote.StatusNotReady, "UCMA before UCMA_OPEN")), true
		}
		errno, resp := cm.Command(pl)
		if len(pl) >= 4 {
			attrs := []any{"conn", fmt.Sprintf("%p", c), "cmd", binary.LittleEndian.Uint32(pl), "errno", errno}
			if binary.LittleEndian.Uint32(pl) == 12 && len(resp) >= 20 { // GET_EVENT: the event and its status
				attrs = append(attrs, "event", binary.LittleEndian.Uint32(resp[12:]), "status", int32(binary.LittleEndian.Uint32(resp[16:])))
			}
			c.s.log().Debug("ucma", attrs...)
		}
		r := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(resp)), uint32(errno))
		return remote.Encode(nil, remote.TypeUcma|remote.ReplyBit, h.ID, append(r, resp...)), false
	}
	switch {
	case fn != nil || cm != nil:
		return fail(remote.StatusBadMessage, "UCMA_OPEN on a connection that has a function or a channel")
	case len(pl) != 0:
		return fail(remote.StatusBadMessage, "UCMA_OPEN has no payload")
	case len(fds) != 1:
		return fail(remote.StatusBadFD, fmt.Sprintf("UCMA_OPEN with %d descriptors, want 1", len(fds)))
	}
	efd := fds[0]
	fds[0] = -1
	ch := c.s.cmService().Open(func(readable bool) { signalFD(efd, readable) })
	c.mu.Lock()
	c.cm, c.efd = ch, efd
	c.mu.Unlock()
	return remote.Encode(nil, remote.TypeUcmaOpen|remote.ReplyBit, h.ID, binary.BigEndian.AppendUint64(nil, ch.Token())), false
}

// signalFD makes an eventfd readable (a count of 1) or drains it: the
// channel's events wait, or none do.
func signalFD(fd int, readable bool) {
	var b [8]byte
	if readable {
		b[0] = 1
		unix.Write(fd, b[:])
		return
	}
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(p, 0); n == 1 {
		unix.Read(fd, b[:])
	}
}

// cmService returns the device's connection manager. With a RoCEv2
// port it connects to the other hosts' CMs with MADs on QP1, and then
// only 127.0.0.1 and ::1 besides the port's own address are this host's;
// without one every loopback address is.
func (s *Server) cmService() *ucma.Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cm == nil {
		gid, _ := s.Dev.SourceGID(3) // the RoCEv2 GID of the port's address
		own := netip.AddrFrom16(gid).Unmap()
		dev := ucma.Device{GUID: ifc.NodeGUID(s.Dev.LID()), GID: gid, SGIDIndex: 3, Log: s.log(),
			Local: func(a netip.Addr) bool { return a.IsLoopback() || a == own }}
		if wire := s.Dev.GID(); wire != ([16]byte{}) {
			dev.Addr = netip.AddrFrom16(wire).Unmap()
			dev.Local = func(a netip.Addr) bool {
				return a == dev.Addr || a == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || a == netip.IPv6Loopback()
			}
			dev.Send = func(to netip.Addr, mad []byte) { _ = s.Dev.SendMAD(to, mad) }
		}
		s.cm = ucma.New(dev)
		if dev.Send != nil {
			cm := s.cm
			s.Dev.SetMADHandler(func(from netip.Addr, mad []byte) {
				if err := cm.HandleMAD(from, mad); err != nil {
					s.log().Debug("cm mad dropped", "from", from, "err", err)
				}
			})
		}
	}
	return s.cm
}

// CMListening reports whether an rdma_cm id of this daemon listens on
// port (for tests that start an rdma_cm server, then its client).
func (s *Server) CMListening(port uint16) bool {
	s.mu.Lock()
	cm := s.cm
	s.mu.Unlock()
	return cm != nil && cm.Listening(port)
}

// CMUsage returns what the daemon's connection manager holds (zero before
// any client opened the rdma_cm device).
func (s *Server) CMUsage() ucma.Usage {
	s.mu.Lock()
	cm := s.cm
	s.mu.Unlock()
	if cm == nil {
		return ucma.Usage{}
	}
	return cm.Usage()
}
