package hca

// The transport: how a requester's messages reach its peer's responder and
// its answers come back. Both engines talk to a transport, never to each
// other: the in-process Fabric hands requests over as values that point
// into the requester's memory (no copies), the RoCEv2 wire (wire.go)
// carries them as packets over UDP. Either way the requester owns its
// memory and its side of a signature transform, and each side writes only
// its own CQEs and signature errors: where the fabric lets the responder
// run the requester's transform to save a copy, the error comes back in
// the request and the requester reports it when the answer arrives.

import (
	"sync"
	"sync/atomic"

	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/roce"
	"github.com/hcasim/hcasim/sq"
)

// transport carries one QP's RC or UC traffic.
type transport interface {
	// send hands the requester qp's requests toward the responder that a
	// names; each carries one reference for it, which it releases.
	send(qp *QP, a *qpAttr, reqs []*request)
	// answer carries the responder qp's answers to to (the requester of
	// the requests they answer: a QP of this process, or nil for the
	// peer a names on the wire).
	answer(qp *QP, a *qpAttr, to *QP, ans []response)
}

// route returns the transport a QP connected with a uses: the wire when
// its remote GID is another host's, the device's fabric otherwise. A
// link-local GID (fe80::/64, GID index 0 and 1 of the front end's RoCE
// table) names a port of this host: the wire carries IPv4 only.
func (d *Device) route(a *qpAttr) transport {
	if w := d.wire.Load(); w != nil && a.remoteGID != ([16]byte{}) && a.remoteGID != w.gid && !linkLocal(a.remoteGID) {
		return w
	}
	return d.fabric
}

// linkLocal reports whether g is an IPv6 link-local GID (fe80::/64).
func linkLocal(g [16]byte) bool {
	return g[0] == 0xfe && g[1] == 0x80 && g[2]|g[3]|g[4]|g[5]|g[6]|g[7] == 0
}

// packets returns how many PSNs a message of op and length takes at the
// path MTU: one per packet (for a READ, per response packet).
func packets(op sq.Opcode, length uint64, mtu int) int {
	switch op {
	case sq.OpAtomicCS, sq.OpAtomicFA:
		return 1
	}
	if length > 1<<31 {
		length = 1 << 31
	}
	return roce.Packets(int(length), mtu)
}

// request is one RC request message from a requester to its peer's
// responder. Data moves without copies: src are segments of the
// requester's memory (gather), dst segments the responder writes a READ's
// data or an atomic's result into.
type request struct {
	from      *QP    // the requester (nil: a request from the wire)
	psn       uint32 // the first PSN
	npkts     int    // PSNs the message takes
	op        sq.Opcode
	raddr     uint64
	rkey      klm.Key
	length    uint64
	src       [][]byte
	dst       [][]byte
	srcSig    *sigAccess // src is the memory domain of a signature key
	dstSig    *sigAccess // dst is the memory domain of a signature key
	imm       uint32     // immediate data, or the rkey a SEND_INVAL invalidates
	swapAdd   uint64
	compare   uint64
	solicited bool
	// placed: a WRITE from the wire whose packets went to memory as they
	// came (no src); placeFault: one of them did not resolve.
	placed, placeFault bool
	segArr             [2][]byte // backing for src or dst of one or two segments
	// segBuf is a longer backing (a signature key's strided memory domain
	// gives two segments per block), kept across recycling.
	segBuf [][]byte
	// sigBuf is the backing for srcSig or dstSig, kept across recycling
	// (sigSlot).
	sigBuf *sigAccess

	// xrcSRQN is the XRC SRQ an XRC initiator's message is for (its
	// XRCETH on the wire).
	xrcSRQN uint32

	// A UD datagram (ud.go): its source QP and Q_Key (the DETH), the
	// source and destination GIDs and the traffic class and hop limit of
	// its GRH, and whether it left from a RoCE v1 GID (its GRH is then an
	// IPv6 header whatever the GIDs); udBuf holds the copy of its payload
	// a UD send takes, kept across recycling.
	ud              bool
	raw             bool // a raw Ethernet frame (raw.go), in udBuf
	udSrcQP, udQKey uint32
	udSGID, udDGID  [16]byte
	udTClass, udHop uint8
	udV1            bool
	udBuf           []byte

	// Where the fabric's responder ran the requester's signature transform
	// (srcSig or dstSig): its first PI error, and whether the transform
	// could not run, for the requester to report (under memMu).
	peerSigErr  *sigErr
	peerSigFail bool

	// On the wire: the requester's transmit state.
	wireData []byte // the message's wire bytes, once made (a signature source, or what the wire hook left)
	hooked   bool   // the wire hook has seen the message
	rdNext   uint32 // the next READ response PSN awaited
	rdBuf    []byte // READ response data awaiting a dstSig transform
	rdGap    bool   // a READ response went missing: resent, not yet mended
	txFrom   uint32 // with txSet: the next transmission starts at this PSN (a sequence NAK's)
	txSet    bool
	nakSeen  bool   // a sequence NAK has set txFrom
	dataOff  uint64 // a READ from the wire served again: its answer's data starts here
	// A request from the wire: the packet it arrived in (the responder
	// assembles the message from them).
	pkt *packetBuf

	// memMu guards the requester's memory (src, dst) against a responder
	// that reaches it after the WQE retired: a READ served again for a
	// retransmission whose first answer already completed it, a request
	// racing a flush, or one whose QP was destroyed (its function's memory
	// may be unmapped next). A responder serves a request holding memMu,
	// and drops it if retired, as if its packets never arrived; the
	// requester sets retired before the WQE's completion, flush or reset,
	// and when its QP stops.
	memMu   sync.Mutex
	retired bool

	// refs counts the request's holders other than the first, so that a
	// new (zeroed) request has its requester's reference without a store:
	// the requester until it retires it, and each copy in flight to the
	// responder (from the step's out list through the peer's inbox until
	// it is served or dropped). The last release (to -1) recycles it.
	refs atomic.Int32
}

// segsFor returns the backing for the request's own segment list: the
// longer one it kept from an earlier use, or its two-entry array.
func (r *request) segsFor() [][]byte {
	if cap(r.segBuf) > len(r.segArr) {
		return r.segBuf[:0]
	}
	return r.segArr[:0]
}

// keepSegs keeps segs as the request's longer backing when it outgrew the
// array.
func (r *request) keepSegs(segs [][]byte) {
	if cap(segs) > len(r.segArr) {
		r.segBuf = segs[:0]
	}
}

// requests recycles requests: a steady flow of operations allocates none.
var requests = sync.Pool{New: func() any { return new(request) }}

// maxFreeRequests bounds a send engine's own free list (reqState.free).
const maxFreeRequests = 256

// newRequest returns a zeroed request held by its requester, from the
// engine's free list when it has one.
func (s *reqState) newRequest() *request {
	var r *request
	if n := len(s.freeReqs); n > 0 {
		r = s.freeReqs[n-1]
		s.freeReqs[n-1] = nil
		s.freeReqs = s.freeReqs[:n-1]
	} else {
		r = requests.Get().(*request)
	}
	return r
}

// newRequest returns a zeroed request from the shared pool (a requester
// outside a send engine's step: the wire's).
func newRequest() *request {
	return requests.Get().(*request)
}

// sigSlot returns the request's backing for a signature access.
func (r *request) sigSlot() *sigAccess {
	if r.sigBuf == nil {
		r.sigBuf = new(sigAccess)
	}
	return r.sigBuf
}

// hold takes a reference for a copy in flight to the responder.
func (r *request) hold() { r.refs.Add(1) }

// release drops a reference; the last one recycles the request.
func (r *request) release() {
	if r.refs.Add(-1) == -1 {
		r.recycle()
		requests.Put(r)
	}
}

// recycle zeroes the request for its next use, keeping its backings.
func (r *request) recycle() {
	if r.pkt != nil {
		r.pkt.put()
	}
	buf, sb, ub := r.segBuf, r.sigBuf, r.udBuf
	clear(buf[:cap(buf)])
	if sb != nil && sb.sig != nil {
		*sb = sigAccess{} // used: the stream's state goes too
	}
	*r = request{segBuf: buf[:0], sigBuf: sb, udBuf: ub[:0]}
}

// retire closes the request's memory to responders (see memMu), waiting
// for a responder serving it, and drops the requester's reference. Only
// the first call counts. The send engine retires (under reqMu): when its
// reference is the last, the request goes to the engine's free list.
func (r *request) retire(s *reqState) {
	if r == nil {
		return
	}
	first := false
	if r.src == nil && r.dst == nil || r.refs.Load() == 0 {
		// No memory (responders do not look at retired), or no copy in
		// flight: only the requester, which holds reqMu, adds references,
		// so no responder has the request or can get it.
		first, r.retired = !r.retired, true
	} else {
		r.memMu.Lock()
		first, r.retired = !r.retired, true
		r.memMu.Unlock()
	}
	if !first || r.refs.Add(-1) != -1 {
		return
	}
	r.recycle()
	if len(s.freeReqs) < maxFreeRequests {
		s.freeReqs = append(s.freeReqs, r)
	} else {
		requests.Put(r)
	}
}

// respKind is a response's outcome: an ACK or a NAK.
type respKind uint8

const (
	respACK      respKind = iota
	respRNR               // receiver not ready: retry after the delay
	respAccess            // remote access error
	respInvalid           // invalid request
	respRemoteOp          // remote operational error
	respSeq               // PSN sequence error: resend from the PSN (the wire)
	respData              // a READ response packet (the wire)
)

// response is an answer: an ACK of every message up to psn (the last PSN
// of the message answered; coalesced on the wire), a NAK of the message
// holding psn, or, with read, the answer of the READ or atomic whose last
// PSN is psn (its data already in place on the fabric; on the wire in
// value, or in respData packets).
type response struct {
	psn    uint32
	kind   respKind
	read   bool
	atomic bool   // value is an atomic's original remote value (the wire)
	last   bool   // respData: the READ response's last packet
	rnrDly uint8  // the responder's min_rnr_timer, with respRNR
	msn    uint32 // the responder's message sequence number (the wire)
	value  uint64
	// data is a respData packet's payload (in buf), or, in a responder's
	// answer to a READ from the wire, the data to send.
	data []byte
	buf  *packetBuf
}

// free returns the answer's packet buffer.
func (r *response) free() {
	if r.buf != nil {
		r.buf.put()
		r.buf = nil
	}
}

// Fabric connects devices in one process: a QP addresses its peer by the
// peer device's LID and QP number, as on an InfiniBand subnet. It is safe
// for concurrent use.
type Fabric struct {
	mu    sync.Mutex
	nodes map[uint16]*Device
	next  uint16
	hook  atomic.Pointer[func(*WireMsg)]
}

// WireMsg is a message on the fabric as a wire hook sees it: the
// requester and responder QPs (an RDMA READ's data flows from the
// responder to the requester) and the wire bytes, which the hook may change.
type WireMsg struct {
	ReqLID, RespLID uint16
	ReqQPN, RespQPN uint32
	Wire            []byte
}

// SetWireHook installs hook to see, and change, the wire bytes of every
// message moved on the fabric (a test hook: it flips bits "on the wire");
// nil removes it. With a hook, data moves through a buffer holding the
// wire stream instead of straight from memory to memory.
func (f *Fabric) SetWireHook(hook func(m *WireMsg)) {
	if hook == nil {
		f.hook.Store(nil)
		return
	}
	f.hook.Store(&hook)
}

// NewFabric returns an empty fabric.
func NewFabric() *Fabric { return &Fabric{nodes: map[uint16]*Device{}, next: 1} }

func (f *Fabric) attach(d *Device, want uint16) uint16 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if want != 0 && f.nodes[want] == nil {
		f.nodes[want] = d
		return want
	}
	for f.nodes[f.next] != nil || f.next == 0 {
		f.next++
	}
	lid := f.next
	f.next++
	f.nodes[lid] = d
	return lid
}

func (f *Fabric) detach(d *Device) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nodes[d.lid] == d {
		delete(f.nodes, d.lid)
	}
}

// send hands requests to the QP at a's (LID, QPN): served at once on the
// calling goroutine when its responder is idle and no wire hook is
// installed, queued in its inbox otherwise. A peer that does not exist or whose inbox is full drops them,
// and the ACK timeout resends.
func (f *Fabric) send(qp *QP, a *qpAttr, reqs []*request) {
	n := 0
	if peer := f.lookup(a.remoteLID, a.remoteQPN); peer != nil {
		// A wire hook stands for a wire with its own timing: a test hook
		// that holds a message must hold the responder, not the requester.
		if f.hook.Load() == nil && peer.serveInline(qp, reqs) {
			return
		}
		n = peer.inbox.put(reqs...)
	}
	dropped(qp, reqs[n:])
}

// dropped releases requests that no responder takes. An RC requester
// times out and resends them; a UC one is told they went (and were lost),
// as a wire would have carried them.
func dropped(qp *QP, reqs []*request) {
	if qp.uc && len(reqs) > 0 {
		qp.acks.put(response{psn: reqs[len(reqs)-1].lastPSN(), kind: respACK})
	}
	for _, r := range reqs {
		r.release()
	}
}

// answer hands answers to the requester to.
func (f *Fabric) answer(qp *QP, a *qpAttr, to *QP, ans []response) {
	if to != nil {
		to.acks.put(ans...)
	}
}

// lookup returns the QP at (lid, qpn), or nil.
func (f *Fabric) lookup(lid uint16, qpn uint32) *QP {
	f.mu.Lock()
	d := f.nodes[lid]
	f.mu.Unlock()
	if d == nil {
		return nil
	}
	return d.qp(qpn)
}

// mbox is a many-producer, one-consumer queue that wakes its consumer once
// per batch: producers append under a lock and signal a channel of
// capacity one; the consumer takes the whole batch at once, handing back
// its previous buffer, so a steady flow allocates nothing.
type mbox[T any] struct {
	mu    sync.Mutex
	items []T
	sig   chan struct{}
	limit int
	// quiet: the consumer is running and looks at the items itself
	// before it stops (hush, unhush), so put need not wake it.
	quiet atomic.Bool
}

func newMbox[T any](limit int) *mbox[T] {
	return &mbox[T]{sig: make(chan struct{}, 1), limit: limit}
}

// put appends items and wakes the consumer; items beyond the limit are
// dropped (a requester retransmits them after its timeout). It returns how
// many it took: items[:n].
func (m *mbox[T]) put(items ...T) int {
	if len(items) == 0 {
		return 0
	}
	m.mu.Lock()
	n := min(len(items), m.limit-len(m.items))
	if n > 0 {
		m.items = append(m.items, items[:n]...)
	}
	m.mu.Unlock()
	if !m.quiet.Load() {
		m.wake()
	}
	return max(n, 0)
}

func (m *mbox[T]) wake() {
	select {
	case m.sig <- struct{}{}:
	default:
	}
}

// hush tells producers that the consumer is running and will look at
// the items (pending) before unhush.
func (m *mbox[T]) hush() { m.quiet.Store(true) }

// unhush ends hush, waking the consumer for items that came meanwhile: a
// put that saw quiet appended before this store, so they are seen here.
func (m *mbox[T]) unhush() {
	m.quiet.Store(false)
	if m.pending() {
		m.wake()
	}
}

// pending reports whether items are queued.
func (m *mbox[T]) pending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items) > 0
}

// take returns the queued items and keeps buf (emptied) as the next
// batch's storage.
func (m *mbox[T]) take(buf []T) []T {
	m.mu.Lock()
	out := m.items
	clear(buf[:cap(buf)])
	m.items = buf[:0]
	m.mu.Unlock()
	return out
}
