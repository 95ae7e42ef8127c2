// Package verbs is hcasim's driver and Go verbs API, shaped after
// libibverbs and the kernel verbs: contexts, protection domains, memory
// regions (registered, fast-registration and integrity), completion
// queues with a completion channel, and RC queue pairs with PostSend and
// PostRecv.
//
// Results that depend on the device are asked of it: QP.State and
// QP.Query read the QP's state with QUERY_QP (the device moves a QP to ERR
// or SQD by itself), CQ.Poll and CQ.PollWait take completions, and
// MR.CheckMRStatus reports a signature error only once the CQ that
// carried its SIG_ERR CQE has been polled.
//
// It is a driver in the hardware sense: it talks to an [ifc.Function] only
// through the command mailbox, DMA memory, doorbells and events, writes
// real mlx5 WQEs into the rings and parses real CQEs, building them as
// mlx5's own driver does (field values, DS counts, fences).
package verbs

import (
	"errors"
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sync/errgroup"

	"github.com/hcasim/hcasim/hca/remote"
)

// Errors callers branch on.
var (
	ErrClosed       = errors.New("verbs: closed")
	ErrNotDMA       = errors.New("verbs: buffer is not DMA memory of this context")
	ErrInvalid      = errors.New("verbs: invalid argument")
	ErrBadOpcode    = errors.New("verbs: bad work request opcode")
	ErrTooManySGE   = errors.New("verbs: too many scatter/gather entries")
	ErrQPState      = errors.New("verbs: QP state does not allow posting")
	ErrRingFull     = errors.New("verbs: work queue full")
	ErrInlineTooBig = errors.New("verbs: inline data larger than the QP allows")
	// ErrDeviceLost is a context whose connection to its device ended
	// without Close: a socket client whose daemon stopped or died.
	ErrDeviceLost = errors.New("verbs: lost the device")
)

// Context is an open device function: the driver instance. It is safe for
// concurrent use; its objects document their own rules.
type Context struct {
	fn   ifc.Function
	caps ifc.Caps
	lid  uint16
	gid  [16]byte

	mu      sync.Mutex
	closed  bool
	allocs  []allocation
	regs    []*MR // registered MRs over buffers the driver mapped (inline reads)
	qps     map[uint32]*QP
	xsrqs   map[uint32]*SRQ // XRC SRQs, whose CQEs name them (under mu)
	cqs     map[uint32]*CQ
	sigMRs  map[uint32]*MR   // signature keys by index, for SIG_ERR CQEs
	mrs     map[uint32]*MR   // RegMR and fast-registration MRs by key index (MapSGPI's checks)
	mkeys   map[uint32]*Mkey // signature mkeys (CreateMkey) by index
	async   chan ifc.Event
	stopEv  chan struct{}
	events  errgroup.Group // the event forwarder; Close waits for it
	variant uint8          // key variants handed to new mkeys
	nextMap uint64         // IOVAs for buffers the driver maps itself

	lostErr atomic.Pointer[error] // why the connection to the device ended
	lost    chan struct{}         // closed when lostErr is set
}

type allocation struct {
	addr uintptr
	buf  []byte
	iova uint64
}

// Open opens a new function of a device (in process: an *hca.Device).
func Open(dev ifc.Opener) (*Context, error) {
	fn, err := dev.OpenFunction()
	if err != nil {
		return nil, err
	}
	return New(fn)
}

// New returns a context over a function (in process, or a socket client).
func New(fn ifc.Function) (*Context, error) {
	c := &Context{fn: fn, qps: map[uint32]*QP{}, xsrqs: map[uint32]*SRQ{}, cqs: map[uint32]*CQ{}, sigMRs: map[uint32]*MR{}, mrs: map[uint32]*MR{},
		async: make(chan ifc.Event, 256), stopEv: make(chan struct{}), lost: make(chan struct{})}
	out := ifc.Out(fn.Command(ifc.NewIn(ifc.CmdQueryHCACap, ifc.InHeaderSize)))
	if err := out.Err(ifc.CmdQueryHCACap); err != nil {
		return nil, err
	}
	c.caps = capsFrom(out)
	c.lid = uint16(out.U32(ifc.CapOutLID) >> 16)
	if len(out) >= ifc.CapOutGID+16 {
		copy(c.gid[:], out[ifc.CapOutGID:])
	}
	c.events.Go(func() error { c.forward(); return nil })
	return c, nil
}

func capsFrom(o ifc.Out) ifc.Caps {
	in := ifc.In(o)
	var c ifc.Caps
	c.MaxPD, c.MaxCQ, c.MaxQP, c.MaxPSV = in.U32(ifc.CapOutMaxPD), in.U32(ifc.CapOutMaxCQ), in.U32(ifc.CapOutMaxQP), in.U32(ifc.CapOutMaxPSV)
	c.Mkey.MaxMkeys = in.U32(ifc.CapOutMaxMkeys)
	c.LogMaxCQSize, c.LogMaxSQSize, c.LogMaxRQSize = in.U8(ifc.CapOutLogSizes), in.U8(ifc.CapOutLogSizes+1), in.U8(ifc.CapOutLogSizes+2)
	c.Mkey.LogMaxKLMListSize = in.U8(ifc.CapOutLogSizes + 3)
	c.MaxSGE, c.Mkey.MaxIndirection, c.MaxRDAtomic = in.U16(ifc.CapOutMaxSGE), in.U8(ifc.CapOutMaxIndir), in.U8(ifc.CapOutMaxRDAtomic)
	c.MaxInline = in.U32(ifc.CapOutMaxInline)
	c.SignatureHandover = in.U8(ifc.CapOutFlags+3)&ifc.CapFlagSigHandover != 0
	c.UMRFence = in.U8(ifc.CapOutUMRFence) >> 4
	c.Mkey.MaxRepeatEntries = in.U16(ifc.CapOutRepeatEnts)
	c.Mkey.MinLogPageSize, c.Mkey.MaxLogPageSize = in.U8(ifc.CapOutMinLogPage), in.U8(ifc.CapOutMaxLogPage)
	c.MaxMappedBytes = in.U64(ifc.CapOutMaxMapped)
	c.FuncMemBytes, c.DevMemBytes = in.U64(ifc.CapOutFuncMem), in.U64(ifc.CapOutDevMem)
	return c
}

// Caps returns the device capabilities (QUERY_HCA_CAP).
func (c *Context) Caps() ifc.Caps { return c.caps }

// LID returns the device's fabric address, for peers to connect to.
func (c *Context) LID() uint16 { return c.lid }

// PortCounters reads the port's counters (QUERY_PORT_COUNTERS).
func (c *Context) PortCounters() (ifc.PortCounters, error) {
	out, err := c.cmd(ifc.NewIn(ifc.CmdQueryPortCounters, ifc.InHeaderSize))
	if err != nil {
		return ifc.PortCounters{}, fmt.Errorf("query port counters: %w", err)
	}
	return ifc.CountersFrom(outU64s(out)), nil
}

// outU64s reads a counters-style output: BE64 values from byte 8 to its end.
func outU64s(out ifc.Out) []uint64 {
	var v []uint64
	for off := ifc.CountersOut; off+8 <= len(out); off += 8 {
		v = append(v, ifc.In(out).U64(off))
	}
	return v
}

// Usage reads what the whole device holds now (QUERY_USAGE).
func (c *Context) Usage() (ifc.Usage, error) {
	out, err := c.cmd(ifc.NewIn(ifc.CmdQueryUsage, ifc.InHeaderSize))
	if err != nil {
		return ifc.Usage{}, fmt.Errorf("query usage: %w", err)
	}
	return ifc.UsageFrom(outU64s(out)), nil
}

// GID returns the port's RoCEv2 GID (zero when the device has no wire).
func (c *Context) GID() [16]byte { return c.gid }

// Function returns the function the context drives.
func (c *Context) Function() ifc.Function { return c.fn }

// cmd runs a command and returns its output or a *ifc.CmdError.
func (c *Context) cmd(in ifc.In) (ifc.Out, error) {
	out := ifc.Out(c.fn.Command(in))
	return out, out.Err(in.Opcode())
}

// Alloc returns n zeroed bytes of DMA memory, usable in memory regions and
// work requests. Over a socket only such memory can be registered.
func (c *Context) Alloc(n int) ([]byte, error) {
	buf, iova, err := c.fn.AllocDMA(n, 4096)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.allocs = append(c.allocs, allocation{uintptr(unsafe.Pointer(unsafe.SliceData(buf))), buf, iova})
	c.mu.Unlock()
	return buf, nil
}

// Free releases memory Alloc returned.
func (c *Context) Free(buf []byte) error {
	a := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, al := range c.allocs {
		if al.addr == a {
			c.allocs = append(c.allocs[:i], c.allocs[i+1:]...)
			return c.fn.FreeDMA(al.iova)
		}
	}
	return ErrNotDMA
}

// bufferMapper is what an in-process function offers beyond Function:
// mapping any Go buffer for DMA.
type bufferMapper interface {
	MapBuffer(iova uint64, buf []byte) error
	UnmapBuffer(iova uint64) error
}

// iovaOf returns the IOVA of buf's first byte if buf lies in DMA memory of
// this context.
func (c *Context) iovaOf(buf []byte) (uint64, bool) {
	if len(buf) == 0 {
		return 0, false
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, al := range c.allocs {
		if a >= al.addr && a+uintptr(len(buf)) <= al.addr+uintptr(len(al.buf)) {
			return al.iova + uint64(a-al.addr), true
		}
	}
	return 0, false
}

// dma allocates driver-internal DMA memory (rings, doorbell records,
// translation lists).
func (c *Context) dma(n, align int) ([]byte, uint64, error) {
	return c.fn.AllocDMA(n, align)
}

// nextVariant returns the key variant for a new mkey.
func (c *Context) nextVariant() uint8 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.variant++
	return c.variant
}

// AsyncEvents returns the channel of asynchronous events (CQ error, QP
// fatal, SQ drained). It is buffered; events beyond its room are dropped.
func (c *Context) AsyncEvents() <-chan ifc.Event { return c.async }

// forward dispatches the function's events: completions to CQ channels,
// the rest to AsyncEvents.
func (c *Context) forward() {
	var evs []ifc.Event
	for {
		select {
		case <-c.stopEv:
			return
		case <-c.fn.Events():
		}
		evs = c.fn.DrainEvents(evs[:0])
		c.checkLost()
		for _, e := range evs {
			if e.Type == ifc.EventCompletion {
				c.mu.Lock()
				cq := c.cqs[e.Obj]
				c.mu.Unlock()
				if cq != nil && cq.channel != nil {
					cq.channel.notify(cq)
				}
				continue
			}
			select {
			case c.async <- e:
			default:
			}
		}
	}
}

// Close closes the function: every QP stops and its outstanding work is
// lost, memory is released. Idempotent.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stopEv)
	c.events.Wait()
	return c.fn.Close()
}

// checkLost notices a function whose connection to the device ended (a
// socket client's reader signals its events when it stops).
func (c *Context) checkLost() {
	f, ok := c.fn.(interface{ Err() error })
	if !ok || c.lostErr.Load() != nil {
		return
	}
	if err := f.Err(); err != nil {
		err = fmt.Errorf("%w: %w", ErrDeviceLost, err)
		c.lostErr.Store(&err)
		close(c.lost)
	}
}

// Lost returns a channel that is closed when the connection to the device
// ends without Close: the daemon of a Dial'd context stopped or died. Err
// then says why. An in-process context is never lost.
func (c *Context) Lost() <-chan struct{} { return c.lost }

// Err returns why the connection to the device ended (wrapping
// ErrDeviceLost), or nil while it is up.
func (c *Context) Err() error {
	if p := c.lostErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *Context) errClosed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// PD is a protection domain.
type PD struct {
	ctx *Context
	pdn uint32
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	out, err := c.cmd(ifc.NewIn(ifc.CmdAllocPD, ifc.InHeaderSize))
	if err != nil {
		return nil, fmt.Errorf("alloc pd: %w", err)
	}
	return &PD{ctx: c, pdn: out.U32(ifc.PDOff)}, nil
}

// Handle returns the PD number.
func (pd *PD) Handle() uint32 { return pd.pdn }

// Dealloc frees the PD; it fails while objects use it.
func (pd *PD) Dealloc() error {
	_, err := pd.ctx.cmd(ifc.NewIn(ifc.CmdDeallocPD, ifc.PDOff+4).Put32(ifc.PDOff, pd.pdn))
	if err != nil {
		return fmt.Errorf("dealloc pd %d: %w", pd.pdn, err)
	}
	return nil
}

// Dial connects to an hcasim daemon (hcasim serve) at the Unix socket path
// and returns a context on a function of its device: the same API as
// Open, with memory shared with the daemon (only Alloc'd memory can be
// registered).
func Dial(path string) (*Context, error) {
	fn, err := remote.Dial(path)
	if err != nil {
		return nil, err
	}
	c, err := New(fn)
	if err != nil {
		fn.Close()
		return nil, err
	}
	return c, nil
}
