// Package sq owns the send side of the modelled HCA's work queues: the WQE
// segment layouts (control, data, remote address, atomic, inline; the
// SET_PSV segment is package psv's),
// the ring arithmetic of a send queue of 64-byte WQEBBs in host memory with
// segments that wrap at its end, the doorbell record, and Ring.Fetch, which
// takes the posted WQEs one at a time in order. The loop that runs them (the
// send engine, its executor) is the device's and lives in package hca.
package sq

import (
	"encoding/binary"
	"fmt"
)

// Sizes.
const (
	WQEBBSize    = 64 // send WQE basic block
	SegSize      = 16 // the DS unit
	CtrlSegSize  = 16
	DataSegSize  = 16
	RaddrSegSize = 16
	AtomicSize   = 16
	MaxWQEBBs    = 16 // MLX5_SEND_WQE_MAX_WQEBBS
	MaxDS        = MaxWQEBBs * WQEBBSize / SegSize
)

// Opcode is a send WQE opcode (the control segment's low byte).
type Opcode uint8

// Send opcodes (mlx5 MLX5_OPCODE_*).
const (
	OpNOP          Opcode = 0x00
	OpSendInval    Opcode = 0x01
	OpRDMAWrite    Opcode = 0x08
	OpRDMAWriteImm Opcode = 0x09
	OpSend         Opcode = 0x0A
	OpSendImm      Opcode = 0x0B
	OpRDMARead     Opcode = 0x10
	OpAtomicCS     Opcode = 0x11
	OpAtomicFA     Opcode = 0x12
	OpSetPSV       Opcode = 0x20
	OpUMR          Opcode = 0x25
)

var opNames = map[Opcode]string{
	OpNOP: "NOP", OpSendInval: "SEND_INVAL", OpRDMAWrite: "RDMA_WRITE", OpRDMAWriteImm: "RDMA_WRITE_IMM",
	OpSend: "SEND", OpSendImm: "SEND_IMM", OpRDMARead: "RDMA_READ", OpAtomicCS: "ATOMIC_CS",
	OpAtomicFA: "ATOMIC_FA", OpSetPSV: "SET_PSV", OpUMR: "UMR",
}

func (o Opcode) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("Opcode(%#02x)", uint8(o))
}

// Fence is the fence mode of a WQE (fm_ce_se bits 7:5, as the byte value).
type Fence uint8

// Fence modes.
const (
	FenceNone           Fence = 0x00
	FenceInitiatorSmall Fence = 0x20 // wait for preceding UMR / SET_PSV (local key operations)
	FenceFence          Fence = 0x40 // IB fence: wait for outstanding RDMA READ and atomics
	FenceStrongOrdering Fence = 0x60 // wait for every preceding WQE
	FenceSmallAndFence  Fence = 0x80 // both INITIATOR_SMALL and FENCE
	fenceMask                 = 0xE0
	CECQUpdate                = 0x08 // generate a CQE (MLX5_WQE_CTRL_CQ_UPDATE)
	CECQUpdateAndEQE          = 0x0C
	SESolicited               = 0x02
)

// CtrlSeg is a view of the 16-byte WQE control segment.
//
//	0: opmod(8) | wqe_index(16) | opcode(8)   4: qpn(24) | ds(6)
//	8: signature  9: reserved(2)  11: fm_ce_se  12: imm / invalidate rkey / umr_mkey (BE32)
type CtrlSeg []byte

// CtrlFields are the fields of a control segment.
type CtrlFields struct {
	OpMod     uint8
	WQEIndex  uint16
	Opcode    Opcode
	QPN       uint32
	DS        uint8 // WQE size in 16-byte units
	Signature uint8
	Fence     Fence
	CE        uint8 // 0, CECQUpdate or CECQUpdateAndEQE
	SE        bool
	Imm       uint32
}

// Fields decodes the segment.
func (c CtrlSeg) Fields() CtrlFields {
	var f CtrlFields
	c.Decode(&f)
	return f
}

// Decode decodes the segment into f (Fields without the copy).
func (c CtrlSeg) Decode(f *CtrlFields) {
	w0, w1 := binary.BigEndian.Uint32(c), binary.BigEndian.Uint32(c[4:])
	f.OpMod, f.WQEIndex, f.Opcode = uint8(w0>>24), uint16(w0>>8), Opcode(w0)
	f.QPN, f.DS = w1>>8, uint8(w1&0x3F)
	f.Signature = c[8]
	f.Fence, f.CE, f.SE = Fence(c[11]&fenceMask), c[11]&0x0C, c[11]&SESolicited != 0
	f.Imm = binary.BigEndian.Uint32(c[12:])
}

// Encode writes f into the segment.
func (c CtrlSeg) Encode(f *CtrlFields) {
	binary.BigEndian.PutUint32(c, uint32(f.OpMod)<<24|uint32(f.WQEIndex)<<8|uint32(f.Opcode))
	binary.BigEndian.PutUint32(c[4:], f.QPN<<8|uint32(f.DS&0x3F))
	c[8], c[9], c[10] = f.Signature, 0, 0
	c[11] = uint8(f.Fence)&fenceMask | f.CE&0x0C
	if f.SE {
		c[11] |= SESolicited
	}
	binary.BigEndian.PutUint32(c[12:], f.Imm)
}

// Signaled reports whether the WQE asks for a CQE.
func (f *CtrlFields) Signaled() bool { return f.CE&CECQUpdate != 0 }

// WQEBBs returns how many WQEBBs a WQE of ds 16-byte units occupies.
func WQEBBs(ds uint8) int { return (int(ds)*SegSize + WQEBBSize - 1) / WQEBBSize }

// DataSeg is a view of a data (scatter/gather) segment.
//
//	0: byte_count  4: lkey  8: addr
type DataSeg []byte

// DataFields are the fields of a data segment.
type DataFields struct {
	ByteCount uint32
	LKey      uint32
	Addr      uint64
}

// Fields decodes the segment.
func (d DataSeg) Fields() DataFields {
	return DataFields{binary.BigEndian.Uint32(d), binary.BigEndian.Uint32(d[4:]), binary.BigEndian.Uint64(d[8:])}
}

// Encode writes f into the segment.
func (d DataSeg) Encode(f *DataFields) {
	binary.BigEndian.PutUint32(d, f.ByteCount)
	binary.BigEndian.PutUint32(d[4:], f.LKey)
	binary.BigEndian.PutUint64(d[8:], f.Addr)
}

// InlineFlag marks an inline segment: the first word is byte_count | InlineFlag.
const InlineFlag = 0x80000000

// RaddrSeg is a view of a remote address segment.
//
//	0: raddr  8: rkey  12: reserved
type RaddrSeg []byte

// RaddrFields are the fields of a remote address segment.
type RaddrFields struct {
	Addr uint64
	RKey uint32
}

// Fields decodes the segment.
func (r RaddrSeg) Fields() RaddrFields {
	return RaddrFields{binary.BigEndian.Uint64(r), binary.BigEndian.Uint32(r[8:])}
}

// Encode writes f into the segment.
func (r RaddrSeg) Encode(f *RaddrFields) {
	binary.BigEndian.PutUint64(r, f.Addr)
	binary.BigEndian.PutUint32(r[8:], f.RKey)
	binary.BigEndian.PutUint32(r[12:], 0)
}

// AtomicSeg is a view of an atomic segment.
//
//	0: swap or add  8: compare
type AtomicSeg []byte

// AtomicFields are the fields of an atomic segment.
type AtomicFields struct {
	SwapAdd uint64
	Compare uint64
}

// Fields decodes the segment.
func (a AtomicSeg) Fields() AtomicFields {
	return AtomicFields{binary.BigEndian.Uint64(a), binary.BigEndian.Uint64(a[8:])}
}

// Encode writes f into the segment.
func (a AtomicSeg) Encode(f *AtomicFields) {
	binary.BigEndian.PutUint64(a, f.SwapAdd)
	binary.BigEndian.PutUint64(a[8:], f.Compare)
}

// DatagramSegSize is the size of the datagram segment of a UD send WQE.
const DatagramSegSize = 48

// DatagramSeg is a view of the datagram segment (mlx5_wqe_datagram_seg,
// its mlx5_wqe_av) that follows the control segment of a UD send WQE.
//
//	0: qkey  4: reserved  8: dqp_dct (bit 31 extended AV, 23:0 dest QPN)
//	12: stat_rate_sl  13: fl_mlid  14: rlid (BE16)  16: reserved(4)
//	20: rmac(6)  26: tclass  27: hop_limit
//	28: grh_gid_fl (bit 30 GRH, 27:20 sgid index, 19:0 flow label)
//	32: rgid(16)
type DatagramSeg []byte

// DatagramFields are the fields of a datagram segment.
type DatagramFields struct {
	QKey      uint32
	DestQPN   uint32
	RLID      uint16
	TClass    uint8
	HopLimit  uint8
	GRH       bool
	SGIDIndex uint8
	FlowLabel uint32
	RGID      [16]byte
}

// Fields decodes the segment.
func (d DatagramSeg) Fields() DatagramFields {
	g := binary.BigEndian.Uint32(d[28:])
	f := DatagramFields{
		QKey: binary.BigEndian.Uint32(d), DestQPN: binary.BigEndian.Uint32(d[8:]) & 0xFFFFFF,
		RLID: binary.BigEndian.Uint16(d[14:]), TClass: d[26], HopLimit: d[27],
		GRH: g&(1<<30) != 0, SGIDIndex: uint8(g >> 20), FlowLabel: g & 0xFFFFF,
	}
	copy(f.RGID[:], d[32:48])
	return f
}

// Encode writes f into the segment (the reserved bytes and rmac zeroed).
func (d DatagramSeg) Encode(f *DatagramFields) {
	clear(d[:DatagramSegSize])
	binary.BigEndian.PutUint32(d, f.QKey)
	binary.BigEndian.PutUint32(d[8:], f.DestQPN&0xFFFFFF)
	binary.BigEndian.PutUint16(d[14:], f.RLID)
	d[26], d[27] = f.TClass, f.HopLimit
	g := uint32(f.SGIDIndex)<<20 | f.FlowLabel&0xFFFFF
	if f.GRH {
		g |= 1 << 30
	}
	binary.BigEndian.PutUint32(d[28:], g)
	copy(d[32:48], f.RGID[:])
}

// XRCSegSize is the size of the XRC segment of an XRC initiator's send
// WQE (mlx5_wqe_xrc_seg): the remote XRC SRQ number in bytes 0–3 (24
// bits), then 12 reserved bytes. It follows the control segment of every
// WQE but a memory window bind or a local invalidate (mlx5's post_send).
const XRCSegSize = 16

// XRCSeg is a view of the XRC segment.
type XRCSeg []byte

// SRQN returns the remote XRC SRQ the message is for.
func (x XRCSeg) SRQN() uint32 { return binary.BigEndian.Uint32(x) & 0xFFFFFF }

// Encode writes the segment for remote XRC SRQ srqn.
func (x XRCSeg) Encode(srqn uint32) {
	clear(x[:XRCSegSize])
	binary.BigEndian.PutUint32(x, srqn&0xFFFFFF)
}

// EthSegMin is the size of the Ethernet segment of a raw packet QP's send
// WQE (mlx5_wqe_eth_seg) without inline header bytes beyond its first two:
// the checksum flags at byte 4, the TSO MSS (BE16) at 6, the inline header
// size (BE16) at 12 and the inline header from byte 14. A longer inline
// header runs on into the next 16-byte units: the segment takes
// EthSegSize(n) bytes, 32 for the 18 bytes (an Ethernet header and a VLAN
// tag) mlx5's provider copies when the device asks for L2 inline headers.
const EthSegMin = 16

// EthInlineOff is the offset of the inline header in the Ethernet segment.
const EthInlineOff = 14

// Checksum offload flags of the Ethernet segment (MLX5_ETH_WQE_L3_CSUM,
// MLX5_ETH_WQE_L4_CSUM).
const (
	EthL3Csum = 0x40
	EthL4Csum = 0x80
)

// EthSegSize returns the bytes an Ethernet segment with an inline header of
// n bytes takes in a WQE: a whole number of 16-byte units, at least one.
func EthSegSize(n int) int { return max(EthSegMin, (EthInlineOff+n+15)&^15) }

// EthSeg is a view of the Ethernet segment and the units after it.
type EthSeg []byte

// Header returns the inline header and the bytes the segment takes; ok is
// false when the segment does not fit in e.
func (e EthSeg) Header() (hdr []byte, size int, ok bool) {
	if len(e) < EthSegMin {
		return nil, 0, false
	}
	n := int(binary.BigEndian.Uint16(e[12:]))
	size = EthSegSize(n)
	if size > len(e) {
		return nil, 0, false
	}
	return e[EthInlineOff : EthInlineOff+n], size, true
}

// CsumFlags returns the checksum offload flags (EthL3Csum, EthL4Csum).
func (e EthSeg) CsumFlags() uint8 { return e[4] }

// MSS returns the TSO segment size (0: not a TSO WQE).
func (e EthSeg) MSS() uint16 { return binary.BigEndian.Uint16(e[6:]) }

// Encode writes a segment with inline header hdr and checksum flags cs; e
// must hold EthSegSize(len(hdr)) bytes. It returns that size.
func (e EthSeg) Encode(hdr []byte, cs uint8) int {
	n := EthSegSize(len(hdr))
	clear(e[:n])
	e[4] = cs
	binary.BigEndian.PutUint16(e[12:], uint16(len(hdr)))
	copy(e[EthInlineOff:], hdr)
	return n
}
