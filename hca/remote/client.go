package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Client is a connection to a daemon: one function of its device. It
// implements [ifc.Function]; verbs.Dial wraps it in a verbs context.
type Client struct {
	c   *net.UnixConn
	lid uint16

	wmu sync.Mutex // one writer at a time

	mu      sync.Mutex
	nextID  uint32
	waiting map[uint32]chan reply
	closed  bool
	err     error             // why the connection ended
	maps    map[uint64][]byte // IOVA → the client's mapping

	evMu   sync.Mutex
	events []ifc.Event
	evSig  chan struct{}
	done   chan struct{} // the reader has stopped
}

var _ ifc.Function = (*Client)(nil)

// closeWait bounds how long Close waits for the daemon to close the
// function.
const closeWait = 5 * time.Second

// ReplyTimeout bounds how long a client waits for the daemon's reply to a
// request (HELLO, COMMAND, MAP_MEM, UNMAP, ARM_CQ). A daemon that does not
// answer in time is taken for gone: the connection closes, the request and
// every later one fail with ErrTimeout. Set it before Dial.
var ReplyTimeout = time.Minute

type reply struct {
	h   Header
	p   []byte
	err error
}

// Dial connects to the daemon at path and opens a function.
func Dial(path string) (*Client, error) {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	return NewClient(uc)
}

// NewClient opens a function over an established connection.
func NewClient(uc *net.UnixConn) (*Client, error) {
	c := &Client{c: uc, waiting: map[uint32]chan reply{}, maps: map[uint64][]byte{},
		evSig: make(chan struct{}, 1), done: make(chan struct{})}
	go c.reader()
	p := binary.BigEndian.AppendUint32(nil, Magic)
	p = binary.BigEndian.AppendUint16(p, Version)
	p = binary.BigEndian.AppendUint16(p, 0)
	r, err := c.call(TypeHello, p, -1)
	if err == nil && len(r) != HelloReplySize {
		err = fmt.Errorf("HELLO reply of %d bytes: %w", len(r), ErrProtocol)
	}
	if err == nil && binary.BigEndian.Uint16(r[4:]) != Version {
		err = fmt.Errorf("daemon speaks version %d: %w", binary.BigEndian.Uint16(r[4:]), ErrProtocol)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	c.lid = binary.BigEndian.Uint16(r[6:])
	return c, nil
}

// LID returns the daemon's device LID.
func (c *Client) LID() uint16 { return c.lid }

// reader receives replies and events until the connection ends.
func (c *Client) reader() {
	defer close(c.done)
	buf := make([]byte, MaxMessage+1)
	var err error
	for {
		var n, flags int
		n, _, flags, _, err = c.c.ReadMsgUnix(buf, nil)
		if err != nil {
			break
		}
		if n == 0 {
			err = ErrClosed
			break
		}
		if flags&unix.MSG_TRUNC != 0 {
			err = fmt.Errorf("oversized message from the daemon: %w", ErrProtocol)
			break
		}
		h, p, derr := Decode(buf[:n])
		if derr != nil {
			err = derr
			break
		}
		switch {
		case h.Type == TypeEvents:
			c.takeEvents(p)
		case h.Type == TypeError && h.ID == 0:
			st, reason, _ := ParseStatus(p)
			err = &StatusError{Status: st, Reason: reason}
		case h.Type == TypeError || h.Type&ReplyBit != 0:
			c.mu.Lock()
			ch := c.waiting[h.ID]
			delete(c.waiting, h.ID)
			c.mu.Unlock()
			if ch == nil {
				continue // nobody waits (a request that timed out, or a stray reply)
			}
			r := reply{h: h, p: append([]byte(nil), p...)}
			if h.Type == TypeError {
				st, reason, perr := ParseStatus(p)
				r.err = &StatusError{Status: st, Reason: reason}
				if perr != nil {
					r.err = perr
				}
			}
			ch <- r
		}
		if err != nil {
			break
		}
	}
	c.mu.Lock()
	c.closed = true
	if c.err == nil {
		c.err = fmt.Errorf("%w: %v", ErrClosed, err)
	}
	for id, ch := range c.waiting {
		close(ch)
		delete(c.waiting, id)
	}
	c.mu.Unlock()
	c.signal()
}

func (c *Client) takeEvents(p []byte) {
	c.evMu.Lock()
	for ; len(p) >= EventSize; p = p[EventSize:] {
		c.events = append(c.events, ifc.Event{Type: ifc.EventType(p[0]), Obj: be32(p[4:])})
	}
	c.evMu.Unlock()
	c.signal()
}

func (c *Client) signal() {
	select {
	case c.evSig <- struct{}{}:
	default:
	}
}

// call sends a request (with a descriptor if fd >= 0) and waits for its
// reply's payload.
func (c *Client) call(t Type, payload []byte, fd int) ([]byte, error) {
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.closed {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	if c.nextID == 0 {
		c.nextID = 1
	}
	id := c.nextID
	c.waiting[id] = ch
	c.mu.Unlock()
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if err := c.write(Encode(nil, t, id, payload), oob); err != nil {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
		return nil, err
	}
	var r reply
	var ok bool
	t0 := time.NewTimer(ReplyTimeout)
	select {
	case r, ok = <-ch:
		t0.Stop()
	case <-t0.C:
		c.mu.Lock()
		if c.err == nil {
			c.err = fmt.Errorf("%w: %v (id %d) unanswered after %v", ErrTimeout, t, id, ReplyTimeout)
		}
		c.mu.Unlock()
		c.c.Close() // the reader ends and fails every waiting request
		r, ok = <-ch
	}
	if !ok {
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	if r.err != nil {
		return nil, fmt.Errorf("%v: %w", t, r.err)
	}
	if r.h.Type != t|ReplyBit {
		return nil, fmt.Errorf("%v answered by %v: %w", t, r.h.Type, ErrProtocol)
	}
	return r.p, nil
}

func (c *Client) write(msg, oob []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _, err := c.c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return nil
}

// Command implements ifc.Function. A command that cannot reach the daemon
// fails with INT_ERR and the reason.
func (c *Client) Command(in []byte) []byte {
	if len(in) > MaxMessage-HeaderSize {
		return ifc.FailOut(ifc.StatusBadInputLen, 0, "input mailbox larger than a message")
	}
	out, err := c.call(TypeCommand, in, -1)
	if err != nil {
		return ifc.FailOut(ifc.StatusIntErr, 0, err.Error())
	}
	return out
}

// AllocDMA implements ifc.Function: the memory is a sealed memfd, mapped
// here and in the daemon.
func (c *Client) AllocDMA(n int, align int) ([]byte, uint64, error) {
	if n <= 0 || align <= 0 || align&(align-1) != 0 {
		return nil, 0, fmt.Errorf("alloc dma %d bytes aligned %d: %w", n, align, ErrMessage)
	}
	size := (n + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	fd, err := unix.MemfdCreate("hcasim-dma", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, 0, fmt.Errorf("memfd: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil, 0, fmt.Errorf("memfd size: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return nil, 0, fmt.Errorf("memfd seals: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, fmt.Errorf("mmap: %w", err)
	}
	p := binary.BigEndian.AppendUint64(nil, uint64(size))
	p = binary.BigEndian.AppendUint32(p, uint32(align))
	p = binary.BigEndian.AppendUint32(p, 0)
	r, err := c.call(TypeMapMem, p, fd)
	if err == nil && len(r) != MapReplySize {
		err = fmt.Errorf("MAP_MEM reply of %d bytes: %w", len(r), ErrProtocol)
	}
	if err != nil {
		unix.Munmap(mem)
		return nil, 0, fmt.Errorf("alloc dma %d bytes: %w", n, err)
	}
	iova := be64(r[8:])
	c.mu.Lock()
	c.maps[iova] = mem
	c.mu.Unlock()
	return mem[:n:n], iova, nil
}

// FreeDMA implements ifc.Function.
func (c *Client) FreeDMA(iova uint64) error {
	c.mu.Lock()
	_, ok := c.maps[iova]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("free dma %#x: %w", iova, ErrMessage)
	}
	_, err := c.call(TypeUnmap, binary.BigEndian.AppendUint64(nil, iova), -1)
	var se *StatusError
	if errors.As(err, &se) {
		// The daemon refused (NO_MEMORY: its held address space is
		// full): the mapping stays, on both sides.
		return fmt.Errorf("free dma %#x: %w", iova, err)
	}
	c.mu.Lock()
	mem, ok := c.maps[iova]
	delete(c.maps, iova)
	c.mu.Unlock()
	if ok {
		unix.Munmap(mem)
	}
	if err != nil {
		return fmt.Errorf("free dma %#x: %w", iova, err)
	}
	return nil
}

// notify sends a message that has no reply; errors show in the next call.
func (c *Client) notify(t Type, payload []byte) {
	c.write(Encode(nil, t, 0, payload), nil)
}

// RingSQ implements ifc.Function.
func (c *Client) RingSQ(qpn uint32) { c.notify(TypeRingSQ, binary.BigEndian.AppendUint32(nil, qpn)) }

// RingRQ implements ifc.Function.
func (c *Client) RingRQ(qpn uint32) { c.notify(TypeRingRQ, binary.BigEndian.AppendUint32(nil, qpn)) }

// ArmCQ implements ifc.Function. It waits for the daemon's reply: a
// completion that follows the arm must find the CQ armed, as an arm
// doorbell takes effect before the driver returns.
func (c *Client) ArmCQ(cqn uint32, word uint32) {
	p := binary.BigEndian.AppendUint32(nil, cqn)
	c.call(TypeArmCQ, binary.BigEndian.AppendUint32(p, word), -1)
}

// Events implements ifc.Function.
func (c *Client) Events() <-chan struct{} { return c.evSig }

// DrainEvents implements ifc.Function.
func (c *Client) DrainEvents(evs []ifc.Event) []ifc.Event {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	evs = append(evs, c.events...)
	c.events = c.events[:0]
	return evs
}

// Err returns why the connection ended, or nil while it is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		return nil
	}
	return c.err
}

// Close implements ifc.Function: the connection closes (the daemon stops
// the function's QPs and unmaps its memory) and the mappings are released.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed && c.maps == nil {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	if c.err == nil {
		c.err = ErrClosed
	}
	c.mu.Unlock()
	// Shut down the sending side: the daemon closes the function (its QPs
	// stop, as Close does in process) and then the connection, which ends
	// the reader. A daemon that does not answer in time is cut off.
	c.c.CloseWrite()
	select {
	case <-c.done:
	case <-time.After(closeWait):
	}
	c.c.Close()
	<-c.done
	c.mu.Lock()
	maps := c.maps
	c.maps = nil
	c.mu.Unlock()
	for _, m := range maps {
		unix.Munmap(m)
	}
	return nil
}
