package hca

// The RoCEv2 wire: a device's port as a UDP endpoint. A QP whose remote
// GID is another host's sends its requests as RoCEv2 packets (package
// roce) segmented by the path MTU, and its responder answers with ACKs,
// NAKs and READ and atomic responses; the RC engines (requester.go,
// responder.go) run the transport's rules on those packets: PSN order,
// go-back-N after a sequence NAK, ACK timeout and retry count, RNR NAK,
// duplicates answered again, atomics replayed from the responder's
// results. docs/DEVICE.md describes what is and is not modelled.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/gopacket"
	"golang.org/x/sync/errgroup"

	"github.com/hcasim/hcasim/roce"
	"github.com/hcasim/hcasim/sq"
)

// Errors of the wire.
var (
	// ErrWire: the device's RoCEv2 port could not be set up.
	ErrWire = errors.New("hca: roce port")
)

// maxWireMessage bounds a message a responder assembles from the wire (a
// WRITE, a SEND, a READ's response): longer ones are NAKed as invalid
// requests. It bounds what a peer can make the device hold.
const maxWireMessage = 64 << 20

// ackEvery is how often a long message's packets ask for an ACK: the
// responder's ACK of a MIDDLE packet tells the requester how far the
// message got, so that a resend starts there.
const ackEvery = 64

// reorderWindow is the longest a packet held back for reordering waits
// for the port's next packet.
const reorderWindow = 200 * time.Microsecond

// packetSize is the largest datagram the wire takes: a 4096-byte payload
// with the longest headers, and room to spare (a larger one is truncated
// and fails its ICRC).
const packetSize = 4096 + 128

// WireOptions configure a device's RoCEv2 port ([Device.ListenRoCE]).
type WireOptions struct {
	// Addr is the port's UDP endpoint; its IP is the port's GID (an IPv4
	// address as an IPv4-mapped GID, per RoCEv2). Peers are reached at
	// their GID's address and the same UDP port (0 means 4791).
	Addr netip.AddrPort
	// Pcap, if not nil, receives a pcap capture of every packet the port
	// sends and receives, as Ethernet/IP/UDP/RoCEv2 frames.
	Pcap io.Writer
	// Faults are injected into the packets the port sends.
	Faults Faults
}

// Faults inject faults into the packets a port sends. Each rate is a
// probability per packet, 0 to 1.
type Faults struct {
	Loss      float64 // the packet is dropped
	Duplicate float64 // the packet is sent twice
	Reorder   float64 // the packet is held back and sent after the next one
	// Corrupt flips a bit of the packet after its ICRC: the receiver's
	// ICRC check drops it.
	Corrupt float64
	// CorruptPayload flips a bit of the payload before the ICRC is
	// computed: only the data's protection information can catch it.
	CorruptPayload float64
	Delay          float64       // the packet is sent DelayTime late
	DelayTime      time.Duration // 0 means 1 ms
	Seed           uint64        // the random source's seed (0: a fixed one)
}

func (f *Faults) any() bool {
	return f.Loss > 0 || f.Duplicate > 0 || f.Reorder > 0 || f.Corrupt > 0 || f.CorruptPayload > 0 || f.Delay > 0
}

// counters are a device's port counters.
type counters struct {
	txPackets, txBytes, rxPackets, rxBytes, icrcErrors, rxDropped    atomic.Uint64
	retransmits, timeouts, retryExceeded, seqNAKs, rnrNAKs, naksSent atomic.Uint64
	outOfSeq, duplicates, notPeer, msgDropped                        atomic.Uint64
	injLoss, injDup, injReorder, injCorrupt, injDelay                atomic.Uint64
}

func (d *Device) count(c *atomic.Uint64) { c.Add(1) }

// Counters returns the device's port counters.
func (d *Device) Counters() ifc.PortCounters {
	c := &d.ctr
	return ifc.PortCounters{
		TxPackets: c.txPackets.Load(), TxBytes: c.txBytes.Load(), RxPackets: c.rxPackets.Load(), RxBytes: c.rxBytes.Load(),
		ICRCErrors: c.icrcErrors.Load(), RxDropped: c.rxDropped.Load(), Retransmits: c.retransmits.Load(),
		Timeouts: c.timeouts.Load(), RetryExceeded: c.retryExceeded.Load(), SeqNAKsRecv: c.seqNAKs.Load(),
		RNRNAKsRecv: c.rnrNAKs.Load(), NAKsSent: c.naksSent.Load(), OutOfSequence: c.outOfSeq.Load(),
		Duplicates: c.duplicates.Load(), InjectedLoss: c.injLoss.Load(), InjectedDup: c.injDup.Load(),
		InjectedReorder: c.injReorder.Load(), InjectedCorrupt: c.injCorrupt.Load(), InjectedDelay: c.injDelay.Load(),
		NotPeer: c.notPeer.Load(), MsgDropped: c.msgDropped.Load(),
	}
}

// packetBuf is a datagram's buffer and, once received, its decoded packet
// (whose payload points into b).
type packetBuf struct {
	b   []byte
	pkt roce.Packet
}

var packetBufs = sync.Pool{New: func() any { return &packetBuf{b: make([]byte, packetSize)} }}

func getPacketBuf() *packetBuf { return packetBufs.Get().(*packetBuf) }

func (b *packetBuf) put() {
	b.pkt = roce.Packet{}
	packetBufs.Put(b)
}

// wire is a device's RoCEv2 port.
type wire struct {
	dev   *Device
	conn  *net.UDPConn
	local netip.AddrPort
	gid   [16]byte
	port  uint16
	pcap  *roce.PcapWriter
	pmu   sync.Mutex // guards fb
	fb    *roce.FrameBuilder

	faults Faults
	fmu    sync.Mutex // guards rng and held
	rng    *rand.Rand
	held   []byte // a packet held back for reordering, and where it goes
	heldTo netip.AddrPort

	gso    atomic.Bool // send runs of datagrams in one sendmsg (wire_batch.go)
	gro    bool        // the kernel coalesces received runs
	closed atomic.Bool
	rx     errgroup.Group // the receiver: ListenRoCE starts it, close waits for it
	timers sync.WaitGroup // delayed packets
}

// GIDOf returns the RoCEv2 GID of an IP address: the address itself for
// IPv6, the IPv4-mapped address for IPv4.
func GIDOf(ip netip.Addr) [16]byte { return ip.Unmap().As16() }

// gidAddr returns the IP address a GID names.
func gidAddr(g [16]byte) netip.Addr { return netip.AddrFrom16(g).Unmap() }

// ListenRoCE gives the device's port a RoCEv2 endpoint: it binds the UDP
// address and from then on QPs connected to a remote GID that is not the
// port's own send and receive RoCEv2 packets there. Call it before
// creating QPs, once.
func (d *Device) ListenRoCE(o WireOptions) error {
	if !o.Addr.Addr().IsValid() || o.Addr.Addr().IsUnspecified() {
		return fmt.Errorf("%w: address %v: a host address is needed (it is the GID)", ErrWire, o.Addr)
	}
	port := o.Addr.Port()
	if port == 0 {
		port = roce.UDPPort
	}
	local := netip.AddrPortFrom(o.Addr.Addr().Unmap(), port)
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(local))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrWire, err)
	}
	_ = conn.SetReadBuffer(4 << 20)
	_ = conn.SetWriteBuffer(4 << 20)
	seed := o.Faults.Seed
	if seed == 0 {
		seed = 0x5eed
	}
	w := &wire{dev: d, conn: conn, local: local, gid: GIDOf(local.Addr()), port: port, faults: o.Faults,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if o.Pcap != nil {
		if w.pcap, err = roce.NewPcapWriter(o.Pcap, time.Unix(0, 0).UTC()); err != nil {
			conn.Close()
			return fmt.Errorf("%w: %w", ErrWire, err)
		}
		w.fb = roce.NewFrameBuilder()
	}
	d.mu.Lock()
	if d.wire.Load() != nil || d.closed {
		d.mu.Unlock()
		conn.Close()
		return fmt.Errorf("%w: already listening or closed", ErrWire)
	}
	d.wire.Store(w)
	d.mu.Unlock()
	w.gso.Store(true)
	w.gro = w.enableGRO()
	w.rx.Go(func() error { w.receive(); return nil })
	d.log.Info("roce port", "addr", local.String())
	return nil
}

// GID returns the port's GID: its RoCEv2 address, or zero without one.
func (d *Device) GID() [16]byte {
	if w := d.wire.Load(); w != nil {
		return w.gid
	}
	return [16]byte{}
}

// close stops the port: the receiver and delayed packets are joined.
func (w *wire) close() {
	if w.closed.Swap(true) {
		return
	}
	w.conn.Close()
	_ = w.rx.Wait() // the receiver returns no error
	w.timers.Wait()
}

// peer returns the UDP endpoint of the QP's remote GID.
func (w *wire) peer(a *qpAttr) netip.AddrPort {
	return netip.AddrPortFrom(gidAddr(a.remoteGID), w.port)
}

// send transmits requests as packets: a SEND or WRITE in PMTU segments, a
// READ or atomic as one request packet.
func (w *wire) send(qp *QP, a *qpAttr, reqs []*request) {
	to := w.peer(a)
	mtu := a.mtu()
	u := w.newBurst()
	for _, r := range reqs {
		w.sendRequest(u, qp, a, to, mtu, r)
		r.release()
	}
	u.done()
	if qp.uc && len(reqs) > 0 {
		// UC messages are done once their packets are out: no ACK comes.
		qp.acks.put(response{psn: reqs[len(reqs)-1].lastPSN(), kind: respACK})
	}
}

func (w *wire) sendRequest(u *burst, qp *QP, a *qpAttr, to netip.AddrPort, mtu int, r *request) {
	p := roce.Packet{BTH: roce.BTH{PKey: 0xFFFF, DestQP: a.remoteQPN, PSN: r.psn, AckReq: true},
		XRCETH: roce.XRCETH{XRCSRQ: r.xrcSRQN}} // encoded for XRC opcodes only
	base := qp.wireBase()
	switch r.op {
	case sq.OpRDMARead:
		// From the first response not yet received: a READ resent after a
		// loss asks only for the rest (IBA 9.7.5.2.9).
		off := uint64(roce.PSNDiff(r.rdNext, r.psn)) * uint64(mtu)
		if r.rdNext == r.psn || off >= r.length {
			off = 0
		}
		p.Opcode, p.PSN = roce.OpReadRequest|base, roce.PSNAdd(r.psn, int(off)/mtu)
		p.RETH = roce.RETH{VA: r.raddr + off, RKey: uint32(r.rkey), DMALen: uint32(r.length - off)}
		w.tx(u, to, &p, nil, 0, 0)
		return
	case sq.OpAtomicCS, sq.OpAtomicFA:
		p.Opcode = roce.OpFetchAdd
		if r.op == sq.OpAtomicCS {
			p.Opcode = roce.OpCompareSwap
		}
		p.Opcode |= base
		p.Atomic = roce.AtomicETH{VA: r.raddr, RKey: uint32(r.rkey), SwapAdd: r.swapAdd, Compare: r.compare}
		w.tx(u, to, &p, nil, 0, 0)
		return
	}
	// The wire bytes: the memory's own, or its signature transform's,
	// made once per message (a retransmission sends them again).
	src := r.src
	if r.srcSig != nil {
		if r.wireData == nil {
			r.wireData = make([]byte, r.srcSig.wlen)
			e, err := r.srcSig.run([][]byte{r.wireData}, r.src)
			if e != nil {
				r.srcSig.report(e)
			}
			if err != nil {
				r.memMu.Lock()
				r.peerSigFail = true // fails the WQE when answered
				r.memMu.Unlock()
			}
		}
		src = [][]byte{r.wireData}
	}
	if !r.hooked && w.dev.fabric.hook.Load() != nil {
		// The wire hook sees the message once; retransmissions resend
		// what it left (a corruption it made stays in the message).
		r.hooked = true
		b := w.hook(qp.dev.lid, qp.qpn, a.remoteLID, a.remoteQPN, src, r.length)
		if len(b) == 1 {
			r.wireData = b[0]
		}
	}
	if r.hooked && r.wireData != nil {
		src = [][]byte{r.wireData}
	}
	kind := roce.MsgSend
	switch r.op {
	case sq.OpSendImm:
		kind = roce.MsgSendImm
	case sq.OpSendInval:
		kind = roce.MsgSendInv
	case sq.OpRDMAWrite:
		kind = roce.MsgWrite
	case sq.OpRDMAWriteImm:
		kind = roce.MsgWriteImm
	}
	n := max(r.npkts, 1)
	start := 0
	if r.nakSeen && r.holds(r.txFrom) {
		start = int(roce.PSNDiff(r.txFrom, r.psn)) // the responder has the packets before
	}
	off := uint64(start) * uint64(mtu)
	for i := start; i < n; i++ {
		op, size, ok := roce.Segment(kind, int(r.length), mtu, i)
		if !ok {
			return
		}
		p.Opcode, p.PSN = op|base, roce.PSNAdd(r.psn, i) // UC's or XRC's opcodes for the same message
		p.RETH, p.Imm, p.InvRKey = roce.RETH{}, 0, 0
		if kind == roce.MsgWrite || kind == roce.MsgWriteImm {
			if i == 0 {
				p.RETH = roce.RETH{VA: r.raddr, RKey: uint32(r.rkey), DMALen: uint32(r.length)}
			}
		}
		last := i == n-1
		p.AckReq, p.SE = !qp.uc && (last || i%ackEvery == ackEvery-1), last && r.solicited
		if last {
			switch kind {
			case roce.MsgSendImm, roce.MsgWriteImm:
				p.Imm = r.imm
			case roce.MsgSendInv:
				p.InvRKey = r.imm
			}
		}
		w.tx(u, to, &p, src, off, size)
		off += uint64(size)
	}
}

// answer transmits a responder's answers: consecutive ACKs coalesce into
// the last; READ data goes as response packets, atomics as atomic ACKs,
// NAKs as NAKs.
func (w *wire) answer(qp *QP, a *qpAttr, _ *QP, ans []response) {
	to := w.peer(a)
	mtu := a.mtu()
	u := w.newBurst()
	defer u.done()
	var ack *response
	base := qp.wireBase() // XRC's responses for a target's
	flush := func() {
		if ack != nil {
			p := roce.Packet{BTH: roce.BTH{Opcode: roce.OpAcknowledge | base, PKey: 0xFFFF, DestQP: a.remoteQPN, PSN: ack.psn},
				AETH: roce.AETH{Syndrome: roce.SyndromeACK, MSN: ack.msn}}
			w.tx(u, to, &p, nil, 0, 0)
			ack = nil
		}
	}
	for i := range ans {
		r := &ans[i]
		if r.kind == respACK && !r.read {
			ack = r
			continue
		}
		flush()
		p := roce.Packet{BTH: roce.BTH{PKey: 0xFFFF, DestQP: a.remoteQPN, PSN: r.psn}, AETH: roce.AETH{MSN: r.msn}}
		switch {
		case r.kind == respACK && r.atomic:
			p.Opcode, p.AETH.Syndrome, p.AtomicAck = roce.OpAtomicAcknowledge|base, roce.SyndromeACK, r.value
			w.tx(u, to, &p, nil, 0, 0)
		case r.kind == respACK:
			// A READ's response: its last PSN is r.psn.
			data := w.hook(a.remoteLID, a.remoteQPN, qp.dev.lid, qp.qpn, [][]byte{r.data}, uint64(len(r.data)))
			n := roce.Packets(len(r.data), mtu)
			first := roce.PSNAdd(r.psn, 1-n)
			off := uint64(0)
			for i := range n {
				op, size, _ := roce.Segment(roce.MsgReadResponse, len(r.data), mtu, i)
				p.Opcode, p.PSN = op|base, roce.PSNAdd(first, i)
				p.AETH.Syndrome = 0
				if op != roce.OpReadResponseMiddle {
					p.AETH.Syndrome = roce.SyndromeACK
				}
				w.tx(u, to, &p, data, off, size)
				off += uint64(size)
			}
		default:
			p.Opcode = roce.OpAcknowledge | base
			switch r.kind {
			case respRNR:
				p.AETH.Syndrome = roce.SyndromeRNR(r.rnrDly)
			case respSeq:
				p.AETH.Syndrome = roce.SyndromeNAKPSNSequence
			case respAccess:
				p.AETH.Syndrome = roce.SyndromeNAKRemoteAccess
			case respInvalid:
				p.AETH.Syndrome = roce.SyndromeNAKInvalidRequest
			default:
				p.AETH.Syndrome = roce.SyndromeNAKRemoteOperational
			}
			w.dev.count(&w.dev.ctr.naksSent)
			w.tx(u, to, &p, nil, 0, 0)
		}
	}
	flush()
}

// tx builds one packet whose payload is n bytes of the stream src from
// off, in place in u's run when the port batches (else in a packet
// buffer, sent at once through fault injection), and seals its ICRC. The
// wire hook has seen the message before.
func (w *wire) tx(u *burst, to netip.AddrPort, p *roce.Packet, src [][]byte, off uint64, n int) {
	size := p.Opcode.HeaderLen() + n + int(roce.PadFor(n)) + roce.ICRCSize
	if size > packetSize {
		return
	}
	// The payload straight from memory when it lies in one segment.
	data, ok := segSlice(src, off, n)
	if !ok {
		scratch := getPacketBuf()
		defer scratch.put()
		data = scratch.b[:n]
		copyFrom(data, src, off)
	}
	dst := u.space(size, to)
	var buf *packetBuf
	if dst == nil {
		buf = getPacketBuf()
		defer buf.put()
		dst = buf.b[:0]
	}
	b, err := p.Append(dst, data)
	if err != nil {
		w.dev.log.Error("roce: packet not built", "op", p.Opcode.String(), "err", err)
		return
	}
	w.seal(b[len(dst):], to)
	if buf != nil {
		w.send1(b, to)
		return
	}
	u.commit(b)
}

// send1 sends one datagram now, through fault injection.
func (w *wire) send1(b []byte, to netip.AddrPort) {
	if w.faults.any() {
		w.inject(b, to, roce.Opcode(b[0]).HeaderLen(), len(b)-roce.Opcode(b[0]).HeaderLen()-int(b[1]>>4&3)-roce.ICRCSize)
		return
	}
	w.write(b, to)
}

// hook shows a message's wire bytes to the fabric's wire hook, if one is
// set (a test's "bit flips on the wire", before the ICRC is computed, so
// only the data's PI can catch them), and returns the bytes to send: a
// copy the hook may have changed.
func (w *wire) hook(reqLID uint16, reqQPN uint32, respLID uint16, respQPN uint32, src [][]byte, n uint64) [][]byte {
	hk := w.dev.fabric.hook.Load()
	if hk == nil || n == 0 {
		return src
	}
	b := make([]byte, n)
	copyFrom(b, src, 0)
	(*hk)(&WireMsg{ReqLID: reqLID, ReqQPN: reqQPN, RespLID: respLID, RespQPN: respQPN, Wire: b})
	return [][]byte{b}
}

// seal writes the ICRC of datagram b sent to to.
func (w *wire) seal(b []byte, to netip.AddrPort) {
	crc, err := roce.DatagramICRC(w.local, to, b[:len(b)-roce.ICRCSize])
	if err == nil {
		binary.LittleEndian.PutUint32(b[len(b)-roce.ICRCSize:], crc)
	}
}

// inject applies the fault rates to a datagram about to be sent.
func (w *wire) inject(b []byte, to netip.AddrPort, h, n int) {
	f := &w.faults
	c := &w.dev.ctr
	w.fmu.Lock()
	roll := func(p float64) bool { return p > 0 && w.rng.Float64() < p }
	loss, dup, reorder, corrupt, corruptPL, delay := roll(f.Loss), roll(f.Duplicate), roll(f.Reorder), roll(f.Corrupt), roll(f.CorruptPayload), roll(f.Delay)
	bit := w.rng.IntN(8)
	pos := w.rng.IntN(len(b))
	ppos := 0
	if n > 0 {
		ppos = h + w.rng.IntN(n)
	}
	var release []byte
	var releaseTo netip.AddrPort
	if !loss && !reorder && w.held != nil {
		release, releaseTo = w.held, w.heldTo
		w.held = nil
	}
	w.fmu.Unlock()
	if loss {
		c.injLoss.Add(1)
		return
	}
	if corruptPL && n > 0 {
		c.injCorrupt.Add(1)
		b[ppos] ^= 1 << bit
		w.seal(b, to)
	} else if corrupt {
		c.injCorrupt.Add(1)
		b[pos] ^= 1 << bit
	}
	switch {
	case reorder:
		// Held back until the port's next packet, or reorderWindow.
		c.injReorder.Add(1)
		cp := append([]byte(nil), b...)
		w.fmu.Lock()
		prev, prevTo := w.held, w.heldTo
		w.held, w.heldTo = cp, to
		w.fmu.Unlock()
		if prev != nil {
			w.write(prev, prevTo)
		}
		w.timers.Add(1)
		time.AfterFunc(reorderWindow, func() {
			defer w.timers.Done()
			w.fmu.Lock()
			mine := len(w.held) > 0 && &w.held[0] == &cp[0]
			if mine {
				w.held = nil
			}
			w.fmu.Unlock()
			if mine {
				w.write(cp, to)
			}
		})
		return
	case delay:
		c.injDelay.Add(1)
		d := f.DelayTime
		if d <= 0 {
			d = time.Millisecond
		}
		cp := append([]byte(nil), b...)
		w.timers.Add(1)
		time.AfterFunc(d, func() {
			defer w.timers.Done()
			if !w.closed.Load() {
				w.write(cp, to)
			}
		})
	default:
		w.write(b, to)
	}
	if dup {
		c.injDup.Add(1)
		w.write(b, to)
	}
	if release != nil {
		w.write(release, releaseTo)
	}
}

// write sends one datagram and captures it.
func (w *wire) write(b []byte, to netip.AddrPort) {
	if w.closed.Load() {
		return
	}
	wireRelease()
	if _, err := w.conn.WriteToUDPAddrPort(b, to); err != nil {
		return // as lost on the wire: the requester's timer recovers
	}
	w.dev.ctr.txPackets.Add(1)
	w.dev.ctr.txBytes.Add(uint64(len(b)))
	w.capture(w.local, to, b)
}

// capture writes a datagram to the pcap file as an Ethernet frame.
func (w *wire) capture(src, dst netip.AddrPort, b []byte) {
	if w.pcap == nil {
		return
	}
	w.pmu.Lock()
	defer w.pmu.Unlock()
	frame, err := w.fb.BuildDatagram(endpoint(src), endpoint(dst), roce.FrameOptions{}, b)
	if err == nil {
		err = w.pcap.WriteFrame(frame)
	}
	if err != nil {
		w.dev.log.Error("roce: capture", "err", err)
	}
}

// endpoint is the Ethernet end of a UDP endpoint in a capture: a locally
// administered MAC made of the IP's last four bytes.
func endpoint(a netip.AddrPort) roce.Endpoint {
	ip := a.Addr().As16()
	return roce.Endpoint{MAC: net.HardwareAddr{0x02, 0x00, ip[12], ip[13], ip[14], ip[15]}, IP: a.Addr(), Port: a.Port()}
}

// receive reads datagrams until the port closes.
func (w *wire) receive() {
	big := make([]byte, 1<<16)
	var oob [64]byte
	for {
		n, oobn, _, from, err := w.conn.ReadMsgUDPAddrPort(big, oob[:])
		if err != nil {
			if w.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		wireAcquire()
		seg := n
		if w.gro && oobn > 0 {
			if s := groSize(oob[:oobn]); s > 0 {
				seg = s
			}
		}
		for off := 0; off < n; off += seg {
			d := big[off:min(off+seg, n)]
			w.dev.ctr.rxPackets.Add(1)
			w.dev.ctr.rxBytes.Add(uint64(len(d)))
			w.capture(from, w.local, d)
			if len(d) > packetSize {
				w.dev.ctr.rxDropped.Add(1) // longer than any packet
				continue
			}
			buf := getPacketBuf()
			copy(buf.b, d)
			if !w.deliver(from, buf, len(d)) {
				buf.put()
			}
		}
	}
}

// deliver checks and decodes a datagram and hands it to its QP: a request
// to the responder, an answer to the requester. It reports whether it
// kept buf.
func (w *wire) deliver(from netip.AddrPort, buf *packetBuf, n int) bool {
	c := &w.dev.ctr
	b := buf.b[:n]
	if n < roce.BTHSize+roce.ICRCSize {
		c.rxDropped.Add(1)
		return false
	}
	crc, err := roce.DatagramICRC(from, w.local, b[:n-roce.ICRCSize])
	if err != nil || crc != binary.LittleEndian.Uint32(b[n-roce.ICRCSize:]) {
		c.icrcErrors.Add(1)
		return false
	}
	p := &buf.pkt
	if err := p.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
		c.rxDropped.Add(1)
		return false
	}
	if p.DestQP == GSIQPN {
		w.deliverMAD(from, p)
		return false
	}
	qp := w.dev.qp(p.DestQP)
	switch t := p.Opcode.Transport(); {
	case qp == nil:
		c.rxDropped.Add(1)
		return false
	case t == roce.TransportUD && qp.ud:
		return w.deliverUD(qp, GIDOf(from.Addr()), buf)
	case t == roce.TransportUC && qp.uc:
		// A UC request: served as the RC opcode it mirrors (UC has no
		// responses).
		p.Opcode &^= roce.UCBase
	case t == roce.TransportXRC && qp.xrc && p.Opcode.IsRequest() == qp.tgt:
		// A request to a target, a response to an initiator: as the RC
		// opcode it mirrors (the XRCETH stays in p).
		p.Opcode &^= roce.XRCBase
	case t != roce.TransportRC || qp.uc || qp.ud || qp.xrc || qp.raw:
		c.rxDropped.Add(1) // a transport the QP does not have
		return false
	}
	_, a, _ := qp.snapshot()
	if (a.remoteGID != GIDOf(from.Addr()) || from.Port() != w.port) && !w.dev.anySrc {
		c.notPeer.Add(1) // not from the QP's peer
		return false
	}
	if p.Opcode.IsRequest() {
		r := newRequest()
		r.pkt = buf
		if qp.inbox.put(r) == 0 {
			r.pkt = nil
			r.release()
			c.rxDropped.Add(1)
			return false
		}
		return true
	}
	resp := response{psn: p.PSN, msn: p.AETH.MSN}
	kept := false
	switch p.Opcode {
	case roce.OpAtomicAcknowledge:
		resp.kind, resp.read, resp.atomic, resp.value = respACK, true, true, p.AtomicAck
	case roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseLast, roce.OpReadResponseOnly:
		resp.kind, resp.data, resp.buf = respData, p.Payload, buf
		resp.last = p.Opcode == roce.OpReadResponseLast || p.Opcode == roce.OpReadResponseOnly
		kept = true
	default: // ACKNOWLEDGE
		s := p.AETH.Syndrome
		switch s.Kind() {
		case roce.KindACK:
			resp.kind = respACK
		case roce.KindRNR:
			resp.kind, resp.rnrDly = respRNR, s.Code()
		case roce.KindNAK:
			switch s {
			case roce.SyndromeNAKPSNSequence:
				resp.kind = respSeq
			case roce.SyndromeNAKInvalidRequest:
				resp.kind = respInvalid
			case roce.SyndromeNAKRemoteAccess:
				resp.kind = respAccess
			default:
				resp.kind = respRemoteOp
			}
		default:
			c.rxDropped.Add(1)
			return false
		}
	}
	if qp.acks.put(resp) == 0 {
		c.rxDropped.Add(1)
		return false
	}
	return kept
}
