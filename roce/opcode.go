package roce

import "fmt"

// Opcode is a BTH opcode: bits 7–5 the transport (000 RC, 001 UC, 011
// UD, 101 XRC), bits 4–0 the operation. The package knows the RC, UC, UD
// and XRC opcodes (IBA table 38, rxe's rxe_opcode.c, Wireshark's
// packet-infiniband.c); others (RD, CNP, manufacturer-specific) are
// refused with [ErrOpcode].
type Opcode uint8

// Transport is an opcode's transport, its bits 7–5.
type Transport uint8

// Transports.
const (
	TransportRC  Transport = 0
	TransportUC  Transport = 1
	TransportRD  Transport = 2
	TransportUD  Transport = 3
	TransportCNP Transport = 4
	TransportXRC Transport = 5
)

// Transport returns the opcode's transport.
func (o Opcode) Transport() Transport { return Transport(o >> 5) }

// The RC opcodes. F/M/L/O: first, middle, last and only packet of a
// message.
const (
	OpSendFirst          Opcode = 0x00
	OpSendMiddle         Opcode = 0x01
	OpSendLast           Opcode = 0x02
	OpSendLastImm        Opcode = 0x03
	OpSendOnly           Opcode = 0x04
	OpSendOnlyImm        Opcode = 0x05
	OpWriteFirst         Opcode = 0x06
	OpWriteMiddle        Opcode = 0x07
	OpWriteLast          Opcode = 0x08
	OpWriteLastImm       Opcode = 0x09
	OpWriteOnly          Opcode = 0x0A
	OpWriteOnlyImm       Opcode = 0x0B
	OpReadRequest        Opcode = 0x0C
	OpReadResponseFirst  Opcode = 0x0D
	OpReadResponseMiddle Opcode = 0x0E
	OpReadResponseLast   Opcode = 0x0F
	OpReadResponseOnly   Opcode = 0x10
	OpAcknowledge        Opcode = 0x11
	OpAtomicAcknowledge  Opcode = 0x12
	OpCompareSwap        Opcode = 0x13
	OpFetchAdd           Opcode = 0x14
	OpSendLastInv        Opcode = 0x16
	OpSendOnlyInv        Opcode = 0x17
)

// The UD opcodes: a datagram is one packet, with a DETH.
const (
	OpUDSendOnly    Opcode = 0x64
	OpUDSendOnlyImm Opcode = 0x65
)

// UC and XRC opcodes are the RC operation ORed with the transport's bits:
// UC has SEND and RDMA WRITE (0x20–0x2B), XRC every RC operation, its
// requests with an XRCETH (0xA0–0xB7).
const (
	UCBase  Opcode = 0x20
	XRCBase Opcode = 0xA0
)

// Ext is a set of extension headers; an opcode alone selects them (they
// carry no next-header field).
type Ext uint8

// The extension headers RC uses, in their order after the BTH.
const (
	ExtRETH         Ext = 1 << iota // 16 bytes: VA, R_Key, DMA length
	ExtAtomicETH                    // 28 bytes: VA, R_Key, swap or add data, compare data
	ExtAETH                         // 4 bytes: syndrome, MSN
	ExtAtomicAckETH                 // 8 bytes: the original remote data
	ExtImmDt                        // 4 bytes: immediate data
	ExtIETH                         // 4 bytes: the R_Key to invalidate
	ExtDETH                         // 8 bytes: Q_Key, source QP (UD); right after the BTH
	ExtXRCETH                       // 4 bytes: the XRC SRQ (XRC requests); after the BTH, before RETH
)

// Header sizes in bytes.
const (
	BTHSize          = 12
	RETHSize         = 16
	AtomicETHSize    = 28
	AETHSize         = 4
	AtomicAckETHSize = 8
	ImmDtSize        = 4
	IETHSize         = 4
	DETHSize         = 8
	XRCETHSize       = 4
	ICRCSize         = 4
)

// Len returns the bytes the headers of e take.
func (e Ext) Len() int {
	n := 0
	for _, h := range [...]struct {
		bit  Ext
		size int
	}{{ExtRETH, RETHSize}, {ExtAtomicETH, AtomicETHSize}, {ExtAETH, AETHSize}, {ExtAtomicAckETH, AtomicAckETHSize}, {ExtImmDt, ImmDtSize}, {ExtIETH, IETHSize},
		{ExtDETH, DETHSize}, {ExtXRCETH, XRCETHSize}} {
		if e&h.bit != 0 {
			n += h.size
		}
	}
	return n
}

// Position is where a packet sits in its message.
type Position uint8

// Positions. PosNone is for packets that are not part of a segmented
// message (READ REQUEST, acknowledgements, atomics).
const (
	PosNone Position = iota
	PosFirst
	PosMiddle
	PosLast
	PosOnly
)

type opInfo struct {
	name string
	ext  Ext
	pos  Position
	data bool // carries a payload
	req  bool // sent by the requester
	hlen uint8
}

var opTable [256]opInfo

func init() {
	def := func(op Opcode, name string, ext Ext, pos Position, data, req bool) {
		opTable[op] = opInfo{name: name, ext: ext, pos: pos, data: data, req: req, hlen: uint8(BTHSize + ext.Len())}
	}
	def(OpSendFirst, "SEND FIRST", 0, PosFirst, true, true)
	def(OpSendMiddle, "SEND MIDDLE", 0, PosMiddle, true, true)
	def(OpSendLast, "SEND LAST", 0, PosLast, true, true)
	def(OpSendLastImm, "SEND LAST WITH IMM", ExtImmDt, PosLast, true, true)
	def(OpSendOnly, "SEND ONLY", 0, PosOnly, true, true)
	def(OpSendOnlyImm, "SEND ONLY WITH IMM", ExtImmDt, PosOnly, true, true)
	def(OpWriteFirst, "RDMA WRITE FIRST", ExtRETH, PosFirst, true, true)
	def(OpWriteMiddle, "RDMA WRITE MIDDLE", 0, PosMiddle, true, true)
	def(OpWriteLast, "RDMA WRITE LAST", 0, PosLast, true, true)
	def(OpWriteLastImm, "RDMA WRITE LAST WITH IMM", ExtImmDt, PosLast, true, true)
	def(OpWriteOnly, "RDMA WRITE ONLY", ExtRETH, PosOnly, true, true)
	def(OpWriteOnlyImm, "RDMA WRITE ONLY WITH IMM", ExtRETH|ExtImmDt, PosOnly, true, true)
	def(OpReadRequest, "RDMA READ REQUEST", ExtRETH, PosNone, false, true)
	def(OpReadResponseFirst, "RDMA READ RESPONSE FIRST", ExtAETH, PosFirst, true, false)
	def(OpReadResponseMiddle, "RDMA READ RESPONSE MIDDLE", 0, PosMiddle, true, false)
	def(OpReadResponseLast, "RDMA READ RESPONSE LAST", ExtAETH, PosLast, true, false)
	def(OpReadResponseOnly, "RDMA READ RESPONSE ONLY", ExtAETH, PosOnly, true, false)
	def(OpAcknowledge, "ACKNOWLEDGE", ExtAETH, PosNone, false, false)
	def(OpAtomicAcknowledge, "ATOMIC ACKNOWLEDGE", ExtAETH|ExtAtomicAckETH, PosNone, false, false)
	def(OpCompareSwap, "COMPARE SWAP", ExtAtomicETH, PosNone, false, true)
	def(OpFetchAdd, "FETCH ADD", ExtAtomicETH, PosNone, false, true)
	def(OpSendLastInv, "SEND LAST WITH INVALIDATE", ExtIETH, PosLast, true, true)
	def(OpSendOnlyInv, "SEND ONLY WITH INVALIDATE", ExtIETH, PosOnly, true, true)
	for rc := OpSendFirst; rc <= OpSendOnlyInv; rc++ {
		i := opTable[rc]
		if i.name == "" {
			continue
		}
		if rc <= OpWriteOnlyImm { // UC: SEND and RDMA WRITE
			def(UCBase|rc, "UC "+i.name, i.ext, i.pos, i.data, i.req)
		}
		ext := i.ext
		if i.req {
			ext |= ExtXRCETH
		}
		def(XRCBase|rc, "XRC "+i.name, ext, i.pos, i.data, i.req)
	}
	def(OpUDSendOnly, "UD SEND ONLY", ExtDETH, PosOnly, true, true)
	def(OpUDSendOnlyImm, "UD SEND ONLY WITH IMM", ExtDETH|ExtImmDt, PosOnly, true, true)
}

func (o Opcode) info() *opInfo {
	if opTable[o].name == "" {
		return nil
	}
	return &opTable[o]
}

// IsValid reports whether o is an opcode the package knows.
func (o Opcode) IsValid() bool { return o.info() != nil }

// Ext returns the extension headers o carries (0 for an invalid opcode).
func (o Opcode) Ext() Ext {
	if i := o.info(); i != nil {
		return i.ext
	}
	return 0
}

// HeaderLen returns the bytes of the BTH and o's extension headers (0 for
// an invalid opcode).
func (o Opcode) HeaderLen() int {
	if i := o.info(); i != nil {
		return int(i.hlen)
	}
	return 0
}

// HasPayload reports whether packets of o carry data.
func (o Opcode) HasPayload() bool { i := o.info(); return i != nil && i.data }

// IsRequest reports whether the requester sends o (the responder sends
// read responses and acknowledgements).
func (o Opcode) IsRequest() bool { i := o.info(); return i != nil && i.req }

// Position returns where a packet of o sits in its message.
func (o Opcode) Position() Position {
	if i := o.info(); i != nil {
		return i.pos
	}
	return PosNone
}

// String returns the opcode's name as the IBA spells it.
func (o Opcode) String() string {
	if i := o.info(); i != nil {
		return i.name
	}
	return fmt.Sprintf("Opcode(%#02x)", uint8(o))
}

// Message is the kind of a message the requester segments (or, for
// MsgReadResponse, the responder).
type Message uint8

// Message kinds.
const (
	MsgSend Message = iota
	MsgSendImm
	MsgSendInv
	MsgWrite
	MsgWriteImm
	MsgReadResponse
)

// The opcodes of each message kind by position: first, middle, last, only.
var msgOps = [...][4]Opcode{
	MsgSend:         {OpSendFirst, OpSendMiddle, OpSendLast, OpSendOnly},
	MsgSendImm:      {OpSendFirst, OpSendMiddle, OpSendLastImm, OpSendOnlyImm},
	MsgSendInv:      {OpSendFirst, OpSendMiddle, OpSendLastInv, OpSendOnlyInv},
	MsgWrite:        {OpWriteFirst, OpWriteMiddle, OpWriteLast, OpWriteOnly},
	MsgWriteImm:     {OpWriteFirst, OpWriteMiddle, OpWriteLastImm, OpWriteOnlyImm},
	MsgReadResponse: {OpReadResponseFirst, OpReadResponseMiddle, OpReadResponseLast, OpReadResponseOnly},
}

// ValidMTU reports whether pmtu is an IB path MTU: 256, 512, 1024, 2048
// or 4096.
func ValidMTU(pmtu int) bool {
	return pmtu >= 256 && pmtu <= 4096 && pmtu&(pmtu-1) == 0
}

// Packets returns how many packets (and PSNs) a message of length bytes
// takes at path MTU pmtu: ceil(length/pmtu), at least 1. pmtu must be
// valid ([ValidMTU]).
func Packets(length, pmtu int) int {
	if length <= pmtu {
		return 1
	}
	return (length + pmtu - 1) / pmtu
}

// Segment returns the opcode and payload length of packet i (from 0) of a
// message of kind m and length bytes at path MTU pmtu: FIRST and MIDDLE
// packets carry pmtu bytes, the LAST the rest, an ONLY packet all of it.
// It returns false if m, pmtu or i is out of range.
func Segment(m Message, length, pmtu, i int) (Opcode, int, bool) {
	if int(m) >= len(msgOps) || !ValidMTU(pmtu) || length < 0 {
		return 0, 0, false
	}
	n := Packets(length, pmtu)
	ops := msgOps[m]
	switch {
	case i < 0 || i >= n:
		return 0, 0, false
	case n == 1:
		return ops[3], length, true
	case i == 0:
		return ops[0], pmtu, true
	case i == n-1:
		return ops[2], length - i*pmtu, true
	}
	return ops[1], pmtu, true
}

// PSNMask is the width of a PSN: 24 bits.
const PSNMask = 0xFFFFFF

// PSNAdd returns psn + n modulo 2^24.
func PSNAdd(psn uint32, n int) uint32 { return (psn + uint32(n)) & PSNMask }

// PSNDiff returns a − b as a signed distance modulo 2^24, in
// [−2^23, 2^23): positive when a is ahead of b (rxe's psn_compare).
func PSNDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }
