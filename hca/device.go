// Package hca is the modelled device: an mlx5-style (ConnectX-class) RDMA
// HCA. A [Device] serves functions (driver instances: in process, or socket
// clients later); each [ifc.Function] sees only what a driver of real hardware
// sees: a command mailbox with mlx5 opcodes and statuses, DMA-mapped host
// memory, send-queue doorbells and CQ arm doorbells, and events. Work
// queues and completion queues live in that host memory as real mlx5 WQEs
// and CQEs; the device parses them with the sq, cq and umr packages and
// moves data through klm key translation. RC queue pairs connect over a
// [Fabric] within one process.
//
// docs/DEVICE.md documents the command layouts and the choices made.
package hca

import (
	"errors"
	"github.com/hcasim/hcasim/hca/ifc"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hcasim/hcasim/klm"
)

// Errors of the in-process function interface.
var (
	ErrClosed = errors.New("hca: device or function closed")
)

// ConnectX5Caps is the default, ConnectX-5-like capability preset.
var ConnectX5Caps = ifc.Caps{
	Mkey:              klm.ConnectX5,
	MaxPD:             1 << 16,
	MaxCQ:             1 << 16,
	MaxQP:             1 << 16,
	MaxPSV:            1 << 16,
	LogMaxCQSize:      22,
	LogMaxSQSize:      15,
	LogMaxRQSize:      15,
	MaxSGE:            30,
	MaxInline:         512,
	MaxRDAtomic:       16,
	UMRFence:          1,
	SignatureHandover: true,
	FuncMemBytes:      192 << 20, // budget.go: a test suite's needs, not a hostile client's
	DevMemBytes:       2 << 30,
}

// Options configure a Device.
type Options struct {
	// Caps are the capabilities; the zero value means ConnectX5Caps.
	Caps *ifc.Caps
	// Fabric connects devices; nil gives the device a fabric of its own.
	Fabric *Fabric
	// LID is the device's address on its fabric; 0 (or one in use) takes
	// the next free one. Devices on different hosts (fabrics) that talk
	// over the wire are told apart by their GIDs, but distinct LIDs keep
	// a wire hook's view unambiguous.
	LID uint16
	// RCSourceHardware makes an RC responder serve any request addressed
	// to its QP whose PSN fits, as hardware does (the "QP injection" of
	// ReDMArk, USENIX Security 2021). By default a responder serves only
	// its connected peer: on the fabric the QP its remote LID and QPN
	// name, on the wire the port its remote GID names (the BTH carries no
	// source QP: a peer host's other QPs cannot be told apart).
	RCSourceHardware bool
	// Logger receives the device's log; nil discards it.
	Logger *slog.Logger
	// TimeScale divides the transport's timers (ack timeout, RNR delay), so
	// that tests of retries run fast; 0 means 1.
	TimeScale float64
	// Poll is how long a QP's send engine keeps polling its send counter
	// after its last work before it sleeps until a doorbell, for QPs
	// created with QPFlagDBHint (a driver then rings only when the engine
	// sleeps). 0 means no polling: the engine sleeps at once. Polling trades
	// CPU for latency where a doorbell is expensive (a daemon's clients
	// ring over a socket).
	Poll time.Duration
}

// Device is one modelled HCA. It is safe for concurrent use.
type Device struct {
	caps   ifc.Caps
	log    *slog.Logger
	fabric *Fabric
	flows  flowTable // the flow rules of raw packet QPs (flow.go)
	lid    uint16
	anySrc bool // Options.RCSourceHardware
	scale  float64
	poll   time.Duration

	mu      sync.Mutex
	funcs   map[*Func]struct{}
	qps     map[uint32]*QP // device-wide QP numbers
	nextQPN uint32
	closed  bool

	atomicMu sync.Mutex // serialises atomic operations on host memory

	wire    atomic.Pointer[wire]       // the RoCEv2 port, if it listens
	mad     atomic.Pointer[MADHandler] // QP1's receiver (gsi.go)
	gsiPSN  atomic.Uint32
	charged atomic.Uint64 // device memory charged to functions (budget.go)
	ctr     counters      // the port's counters
}

// New returns a device with the given options.
func New(opts Options) *Device {
	d := &Device{
		caps:    ConnectX5Caps,
		log:     opts.Logger,
		fabric:  opts.Fabric,
		scale:   opts.TimeScale,
		anySrc:  opts.RCSourceHardware,
		poll:    max(opts.Poll, 0),
		funcs:   map[*Func]struct{}{},
		qps:     map[uint32]*QP{},
		nextQPN: 0x100,
	}
	if opts.Caps != nil {
		d.caps = *opts.Caps
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.scale <= 0 {
		d.scale = 1
	}
	if d.fabric == nil {
		d.fabric = NewFabric()
	}
	d.lid = d.fabric.attach(d, opts.LID)
	return d
}

// Caps returns the device's capabilities.
func (d *Device) Caps() ifc.Caps { return d.caps }

// LID returns the device's address on its fabric.
func (d *Device) LID() uint16 { return d.lid }

// duration scales a transport timer.
func (d *Device) duration(t time.Duration) time.Duration {
	return time.Duration(float64(t) / d.scale)
}

// Open opens a new function: a driver instance with its own DMA address
// OpenFunction is Open for drivers that see only the function boundary
// (ifc.Opener).
func (d *Device) OpenFunction() (ifc.Function, error) {
	f, err := d.Open()
	if err != nil {
		return nil, err // not a nil *Func in a non-nil interface
	}
	return f, nil
}

// space and objects.
func (d *Device) Open() (*Func, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	f := newFunc(d)
	d.funcs[f] = struct{}{}
	return f, nil
}

// Close closes every function: queue pairs stop, their goroutines are
// joined. Close is idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	funcs := make([]*Func, 0, len(d.funcs))
	for f := range d.funcs {
		funcs = append(funcs, f)
	}
	d.mu.Unlock()
	for _, f := range funcs {
		f.Close()
	}
	d.fabric.detach(d)
	if w := d.wire.Load(); w != nil {
		w.close()
	}
	return nil
}

// Usage returns what the device's functions hold now.
func (d *Device) Usage() ifc.Usage {
	d.mu.Lock()
	funcs := make([]*Func, 0, len(d.funcs))
	for f := range d.funcs {
		funcs = append(funcs, f)
	}
	d.mu.Unlock()
	u := ifc.Usage{Functions: uint64(len(funcs))}
	for _, f := range funcs {
		f.mu.Lock()
		u.PDs += uint64(len(f.pds.n))
		u.CQs += uint64(len(f.cqs))
		u.QPs += uint64(len(f.qps))
		u.SRQs += uint64(len(f.srqs))
		u.Mkeys += uint64(len(f.mkeyCost))
		u.Maps += uint64(len(f.dma))
		u.Charged += f.charged
		f.mu.Unlock()
		u.MappedBytes += f.mem.Mapped()
	}
	return u
}

func (d *Device) removeFunc(f *Func) {
	d.mu.Lock()
	delete(d.funcs, f)
	d.mu.Unlock()
}

// allocQPN registers qp under a new device-wide number.
func (d *Device) allocQPN(qp *QP) (uint32, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, false
	}
	for range 1 << 24 {
		n := d.nextQPN
		d.nextQPN = (d.nextQPN + 1) & 0xFFFFFF
		if d.nextQPN < 0x100 {
			d.nextQPN = 0x100
		}
		if _, used := d.qps[n]; !used {
			d.qps[n] = qp
			return n, true
		}
	}
	return 0, false
}

func (d *Device) freeQPN(n uint32) {
	d.mu.Lock()
	delete(d.qps, n)
	d.mu.Unlock()
}

func (d *Device) qp(n uint32) *QP {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.qps[n]
}
