// Package cq owns the completion side of the modelled HCA: the 64-byte CQE
// layouts (requester, responder, error and signature error, as mlx5's
// mlx5_cqe64, mlx5_err_cqe and mlx5_sig_err_cqe), the CQ ring in host
// memory with its owner bit and consumer-index doorbell record, arming and
// event delivery, and overflow.
package cq

import (
	"encoding/binary"
	"fmt"
)

// CQESize is the size of a CQE.
const CQESize = 64

// Opcode is a CQE opcode (op_own bits 7:4).
type Opcode uint8

// CQE opcodes.
const (
	OpReq          Opcode = 0 // requester completion
	OpRespWriteImm Opcode = 1 // RDMA WRITE with immediate received
	OpRespSend     Opcode = 2 // SEND received
	OpRespSendImm  Opcode = 3 // SEND with immediate received
	OpRespSendInv  Opcode = 4 // SEND with invalidate received
	OpResizeCQ     Opcode = 5
	OpNoPacket     Opcode = 6
	OpSigErr       Opcode = 12 // signature error
	OpReqErr       Opcode = 13 // requester error
	OpRespErr      Opcode = 14 // responder error
	OpInvalid      Opcode = 15 // not yet written
)

func (o Opcode) String() string {
	switch o {
	case OpReq:
		return "REQ"
	case OpRespWriteImm:
		return "RESP_WR_IMM"
	case OpRespSend:
		return "RESP_SEND"
	case OpRespSendImm:
		return "RESP_SEND_IMM"
	case OpRespSendInv:
		return "RESP_SEND_INV"
	case OpResizeCQ:
		return "RESIZE_CQ"
	case OpNoPacket:
		return "NO_PACKET"
	case OpSigErr:
		return "SIG_ERR"
	case OpReqErr:
		return "REQ_ERR"
	case OpRespErr:
		return "RESP_ERR"
	case OpInvalid:
		return "INVALID"
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// Syndrome is an error CQE's syndrome.
type Syndrome uint8

// Error syndromes (mlx5 MLX5_CQE_SYNDROME_*).
const (
	SyndromeLocalLength    Syndrome = 0x01
	SyndromeLocalQPOp      Syndrome = 0x02
	SyndromeLocalProt      Syndrome = 0x04
	SyndromeWRFlush        Syndrome = 0x05
	SyndromeMWBind         Syndrome = 0x06
	SyndromeBadResp        Syndrome = 0x10
	SyndromeLocalAccess    Syndrome = 0x11
	SyndromeRemoteInvalReq Syndrome = 0x12
	SyndromeRemoteAccess   Syndrome = 0x13
	SyndromeRemoteOp       Syndrome = 0x14
	SyndromeTransportRetry Syndrome = 0x15
	SyndromeRNRRetry       Syndrome = 0x16
	SyndromeRemoteAborted  Syndrome = 0x22
)

var syndromeNames = map[Syndrome]string{
	SyndromeLocalLength: "LOCAL_LENGTH_ERR", SyndromeLocalQPOp: "LOCAL_QP_OP_ERR", SyndromeLocalProt: "LOCAL_PROT_ERR",
	SyndromeWRFlush: "WR_FLUSH_ERR", SyndromeMWBind: "MW_BIND_ERR", SyndromeBadResp: "BAD_RESP_ERR",
	SyndromeLocalAccess: "LOCAL_ACCESS_ERR", SyndromeRemoteInvalReq: "REMOTE_INVAL_REQ_ERR",
	SyndromeRemoteAccess: "REMOTE_ACCESS_ERR", SyndromeRemoteOp: "REMOTE_OP_ERR",
	SyndromeTransportRetry: "TRANSPORT_RETRY_EXC_ERR", SyndromeRNRRetry: "RNR_RETRY_EXC_ERR",
	SyndromeRemoteAborted: "REMOTE_ABORTED_ERR",
}

func (s Syndrome) String() string {
	if n, ok := syndromeNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Syndrome(%#02x)", uint8(s))
}

// Signature error bits of a SIG_ERR CQE's syndrome.
const (
	SigErrGuard  = 1 << 13
	SigErrAppTag = 1 << 12
	SigErrRefTag = 1 << 11
)

// CQE is a view of one 64-byte CQE.
//
//	 0..15  reserved (requester) / various offload fields
//	16..31  sig: expected_trans_sig, actual_trans_sig, expected_reftag, actual_reftag
//	24      flags_rqpn (BE32): [29:28] GRH present, [27:24] the SL field, on RoCE the packet type —
//	        [27] a UDP header (RoCEv2), [25:24] RoCE L3 type —, [23:0] source QP (UD responder)
//	32      srqn_uidx (BE32)          sig: syndrome BE16, sig_type, domain
//	36      imm_inval_pkey (BE32)     sig: mkey
//	40      reserved                  sig: err_offset BE64
//	44      byte_cnt (BE32)
//	48      timestamp (BE64)
//	54      err: vendor_err_synd, 55: syndrome
//	56      sop_drop_qpn: [31:24] WQE opcode, [23:0] QPN
//	60      wqe_counter (BE16)   62 signature   63 op_own: [7:4] opcode, [3:2] format, [0] owner
type CQE []byte

// Byte offsets in a CQE, named as in mlx5_cqe64 / mlx5_err_cqe /
// mlx5_sig_err_cqe.
const (
	offExpectedTransSig = 16 // sig: BE32
	offActualTransSig   = 20 // sig: BE32
	offExpectedRefTag   = 24 // sig: BE32
	offActualRefTag     = 28 // sig: BE32
	offFlagsRQPN        = 24 // flags_rqpn BE32
	offSRQN             = 32 // srqn_uidx BE32
	offSigSyndrome      = 32 // sig: syndrome BE16
	offSigType          = 34 // sig: sig_type
	offSigDomain        = 35 // sig: domain
	offImmediate        = 36 // imm_inval_pkey BE32; sig: mkey
	offErrOffset        = 40 // sig: err_offset BE64
	offByteCount        = 44 // byte_cnt BE32
	offTimestamp        = 48 // timestamp BE64
	offVendorSyndrome   = 54 // err: vendor_err_synd
	offSyndrome         = 55 // err: syndrome
	offSopDropQPN       = 56 // [31:24] WQE opcode, [23:0] QPN
	offWQECounter       = 60 // wqe_counter BE16
	offOpOwn            = 63 // [7:4] opcode, [3:2] format, [0] owner
)

// Opcode returns the CQE opcode.
func (c CQE) Opcode() Opcode { return Opcode(c[offOpOwn] >> 4) }

// Owner returns the owner bit.
func (c CQE) Owner() uint8 { return c[offOpOwn] & 1 }

// ByteCount returns byte_cnt.
func (c CQE) ByteCount() uint32 { return binary.BigEndian.Uint32(c[offByteCount:]) }

// QPN returns the QP number.
func (c CQE) QPN() uint32 { return binary.BigEndian.Uint32(c[offSopDropQPN:]) & 0xFFFFFF }

// WQEOpcode returns the opcode of the completed send WQE (requester and error CQEs).
func (c CQE) WQEOpcode() uint8 { return c[offSopDropQPN] }

// WQECounter returns the WQE index of the completed WQE.
func (c CQE) WQECounter() uint16 { return binary.BigEndian.Uint16(c[offWQECounter:]) }

// Immediate returns imm_inval_pkey: the immediate, or the invalidated rkey.
func (c CQE) Immediate() uint32 { return binary.BigEndian.Uint32(c[offImmediate:]) }

// Syndrome returns an error CQE's syndrome.
func (c CQE) Syndrome() Syndrome { return Syndrome(c[offSyndrome]) }

// VendorSyndrome returns an error CQE's vendor_err_synd.
func (c CQE) VendorSyndrome() uint8 { return c[offVendorSyndrome] }

// Fields are the fields of a CQE of any kind; Encode writes the ones its
// opcode uses.
type Fields struct {
	Opcode Opcode
	// Requester, responder and error CQEs.
	QPN        uint32
	WQEOpcode  uint8 // requester and error CQEs
	WQECounter uint16
	ByteCount  uint32 // requester (RDMA READ, atomics) and responder CQEs
	Immediate  uint32 // responder: immediate data or the invalidated rkey
	SRQN       uint32
	Timestamp  uint64
	// Responder CQEs of UD QPs (flags_rqpn): the source QP, whether the
	// buffer starts with a GRH, and on RoCE the network header it came in.
	SrcQP uint32
	GRH   bool
	L3    L3Type
	// Error CQEs.
	Syndrome       Syndrome
	VendorSyndrome uint8
	// Signature error CQEs.
	Sig SigFields
}

// L3Type is the network header a RoCE packet came in (flags_rqpn bits
// 25:24, MLX5_CQE_ROCE_L3_HEADER_TYPE_*).
type L3Type uint8

// Network header types.
const (
	L3GRH  L3Type = 0 // RoCE v1: a GRH
	L3IPv6 L3Type = 1
	L3IPv4 L3Type = 2
)

// SigFields are the fields of a signature error CQE.
type SigFields struct {
	ExpectedTransSig, ActualTransSig uint32 // T10: guard<<16 | app tag
	ExpectedRefTag, ActualRefTag     uint32
	Syndrome                         uint16 // SigErrGuard, SigErrAppTag or SigErrRefTag
	SigType                          uint8  // 0 block signature
	Domain                           uint8  // 0 wire, 1 memory
	Mkey                             uint32
	ErrOffset                        uint64
}

// Encode writes f into c with the given owner bit, every byte the layout
// does not use zeroed. The last word (wqe_counter, signature, op_own) is
// returned instead of written: the ring publishes it atomically.
func (c CQE) Encode(f *Fields, owner uint8) (last [4]byte) {
	clear(c[:offWQECounter])
	switch f.Opcode {
	case OpSigErr:
		s := &f.Sig
		binary.BigEndian.PutUint32(c[offExpectedTransSig:], s.ExpectedTransSig)
		binary.BigEndian.PutUint32(c[offActualTransSig:], s.ActualTransSig)
		binary.BigEndian.PutUint32(c[offExpectedRefTag:], s.ExpectedRefTag)
		binary.BigEndian.PutUint32(c[offActualRefTag:], s.ActualRefTag)
		binary.BigEndian.PutUint16(c[offSigSyndrome:], s.Syndrome)
		c[offSigType], c[offSigDomain] = s.SigType&7, s.Domain&7
		binary.BigEndian.PutUint32(c[offImmediate:], s.Mkey)
		binary.BigEndian.PutUint64(c[offErrOffset:], s.ErrOffset)
		binary.BigEndian.PutUint32(c[offSopDropQPN:], f.QPN&0xFFFFFF)
	case OpReqErr, OpRespErr:
		binary.BigEndian.PutUint32(c[offSRQN:], f.SRQN)
		c[offVendorSyndrome], c[offSyndrome] = f.VendorSyndrome, uint8(f.Syndrome)
		binary.BigEndian.PutUint32(c[offSopDropQPN:], uint32(f.WQEOpcode)<<24|f.QPN&0xFFFFFF)
	default:
		fr := f.SrcQP&0xFFFFFF | uint32(f.L3&3)<<24
		if f.L3 == L3IPv4 || f.L3 == L3IPv6 {
			fr |= 1 << 27 // RoCEv2: the frame had a UDP header
		}
		if f.GRH {
			fr |= 1 << 28
		}
		binary.BigEndian.PutUint32(c[offFlagsRQPN:], fr)
		binary.BigEndian.PutUint32(c[offSRQN:], f.SRQN)
		binary.BigEndian.PutUint32(c[offImmediate:], f.Immediate)
		binary.BigEndian.PutUint32(c[offByteCount:], f.ByteCount)
		binary.BigEndian.PutUint64(c[offTimestamp:], f.Timestamp)
		op := uint32(0)
		if f.Opcode == OpReq {
			op = uint32(f.WQEOpcode) << 24
		}
		binary.BigEndian.PutUint32(c[offSopDropQPN:], op|f.QPN&0xFFFFFF)
	}
	if f.Opcode != OpSigErr {
		binary.BigEndian.PutUint16(last[:], f.WQECounter)
	}
	last[3] = uint8(f.Opcode)<<4 | owner&1
	return last
}

// Fields decodes the CQE according to its opcode.
func (c CQE) Fields() Fields {
	f := Fields{Opcode: c.Opcode(), QPN: c.QPN(), WQECounter: c.WQECounter()}
	switch f.Opcode {
	case OpSigErr:
		f.Sig = SigFields{
			ExpectedTransSig: binary.BigEndian.Uint32(c[offExpectedTransSig:]),
			ActualTransSig:   binary.BigEndian.Uint32(c[offActualTransSig:]),
			ExpectedRefTag:   binary.BigEndian.Uint32(c[offExpectedRefTag:]),
			ActualRefTag:     binary.BigEndian.Uint32(c[offActualRefTag:]),
			Syndrome:         binary.BigEndian.Uint16(c[offSigSyndrome:]),
			SigType:          c[offSigType] & 7,
			Domain:           c[offSigDomain] & 7,
			Mkey:             binary.BigEndian.Uint32(c[offImmediate:]),
			ErrOffset:        binary.BigEndian.Uint64(c[offErrOffset:]),
		}
		f.WQECounter = 0
	case OpReqErr, OpRespErr:
		f.SRQN = binary.BigEndian.Uint32(c[offSRQN:])
		f.WQEOpcode = c[offSopDropQPN]
		f.Syndrome, f.VendorSyndrome = c.Syndrome(), c.VendorSyndrome()
	default:
		fr := binary.BigEndian.Uint32(c[offFlagsRQPN:])
		f.SrcQP, f.GRH, f.L3 = fr&0xFFFFFF, fr>>28&3 != 0, L3Type(fr>>24&3)
		f.SRQN = binary.BigEndian.Uint32(c[offSRQN:])
		f.Immediate = c.Immediate()
		f.ByteCount = c.ByteCount()
		f.Timestamp = binary.BigEndian.Uint64(c[offTimestamp:])
		if f.Opcode == OpReq {
			f.WQEOpcode = c[offSopDropQPN]
		}
	}
	return f
}
