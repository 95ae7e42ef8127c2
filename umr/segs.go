// Package umr is the user-mode memory registration of the modelled HCA:
// the UMR control segment and the mkey context segment as typed views, the
// decoding of a UMR work request's segments, and [Apply], which changes an
// mkey in a klm.Table exactly as the request's mkey_mask says, atomically:
// fast registration (REG_MR), LOCAL_INV, the free checks, key variant
// updates and signature keys (BSF carried to the mkey).
package umr

import (
	"encoding/binary"

	"github.com/hcasim/hcasim/klm"
)

// Segment sizes in bytes.
const (
	CtrlSegSize = 48 // mlx5_wqe_umr_ctrl_seg
	MkeySegSize = 64 // mlx5_mkey_seg, mlx5_wqe_mkey_context_seg, ifc mkc
	BSFSize     = 64 // the BSF a signature UMR carries
	DataSegSize = 16 // mlx5_wqe_data_seg pointing to a translation
)

// UMR control segment flags.
const (
	FlagInline       = 0x80 // the translation follows inline (else a data segment points to it)
	FlagCheckFree    = 0x40 // fail if the mkey is free (MLX5_UMR_CHECK_FREE)
	FlagCheckNotFree = 0x20 // fail if the mkey is not free (MLX5_UMR_CHECK_NOT_FREE)
	FlagXLTOffset    = 0x10 // write the translation at xlt_offset
	FlagCheckQPN     = 0x08 // rdma-core: fail if the mkey is bound to a QP other than the poster
)

// Mask is the mkey_mask: the mkey context fields a UMR modifies.
type Mask uint64

// mkey_mask bits.
const (
	MaskLen        Mask = 1 << 0
	MaskPageSize   Mask = 1 << 1
	MaskStartAddr  Mask = 1 << 6
	MaskPD         Mask = 1 << 7
	MaskEnRInval   Mask = 1 << 8
	MaskEnSigErr   Mask = 1 << 9
	MaskBSFEnable  Mask = 1 << 12
	MaskKey        Mask = 1 << 13
	MaskQPN        Mask = 1 << 14
	MaskLR         Mask = 1 << 17
	MaskLW         Mask = 1 << 18
	MaskRR         Mask = 1 << 19
	MaskRW         Mask = 1 << 20
	MaskA          Mask = 1 << 21
	MaskSmallFence Mask = 1 << 23
	MaskFree       Mask = 1 << 29

	// MaskKnown has every bit the model understands; others are refused.
	MaskKnown = MaskLen | MaskPageSize | MaskStartAddr | MaskPD | MaskEnRInval | MaskEnSigErr |
		MaskBSFEnable | MaskKey | MaskQPN | MaskLR | MaskLW | MaskRR | MaskRW | MaskA |
		MaskSmallFence | MaskFree

	// Composites mlx5 uses.
	MaskFastReg    Mask = 0x209E2143 // REG_MR: LEN PAGE_SIZE START_ADDR EN_RINVAL KEY LR LW RR RW SMALL_FENCE FREE
	MaskSignature  Mask = 0x209E3343 // MaskFastReg | EN_SIGERR | BSF_EN
	MaskInvalidate Mask = MaskFree   // LOCAL_INV
)

// CtrlSeg is a view of the 48-byte UMR control segment.
//
//	0       1        4              6                   8           16             20          48
//	| flags | rsvd   | xlt_octowords | bsf_octowords or  | mkey_mask | xlt_offset   | reserved  |
//	|       |        |               | xlt_offset[15:0]  |           | [47:16]      |           |
type CtrlSeg []byte

// CtrlFields are the fields of a UMR control segment.
type CtrlFields struct {
	Flags        uint8
	XLTOctowords uint16 // translation size supplied, in 16-byte units
	// BSFOctowords is the BSF size when the mask enables a BSF; with
	// FlagXLTOffset the same bytes are the low bits of the offset.
	BSFOctowords uint16
	Mask         Mask
	XLTOffsetHi  uint32 // xlt_offset[47:16]
}

// Fields decodes the segment.
func (c CtrlSeg) Fields() CtrlFields {
	return CtrlFields{
		Flags:        c[0],
		XLTOctowords: binary.BigEndian.Uint16(c[4:]),
		BSFOctowords: binary.BigEndian.Uint16(c[6:]),
		Mask:         Mask(binary.BigEndian.Uint64(c[8:])),
		XLTOffsetHi:  binary.BigEndian.Uint32(c[16:]),
	}
}

// Encode writes f into the segment; reserved bytes are zeroed.
func (c CtrlSeg) Encode(f *CtrlFields) {
	clear(c[:CtrlSegSize])
	c[0] = f.Flags
	binary.BigEndian.PutUint16(c[4:], f.XLTOctowords)
	binary.BigEndian.PutUint16(c[6:], f.BSFOctowords)
	binary.BigEndian.PutUint64(c[8:], uint64(f.Mask))
	binary.BigEndian.PutUint32(c[16:], f.XLTOffsetHi)
}

// XLTOffset returns the translation offset in octowords (FlagXLTOffset).
func (f *CtrlFields) XLTOffset() uint64 {
	return uint64(f.XLTOffsetHi)<<16 | uint64(f.BSFOctowords)
}

// MkeySeg is a view of the 64-byte mkey context segment (the UMR's
// mlx5_mkey_seg and the CREATE_MKEY command's mkc share this layout).
//
//	0        1          2       3    4              8     12         16          24    32        36   52           56   59        60
//	| status | pcie_ctl | flags | sf | qpn | mkey7_0 | rsvd | flags_pd | start_addr | len | bsf_size | rsvd | xlt_size | rsvd | log_page | rsvd |
//
// status: bit 6 free, bits 4:2 access_mode[4:2]; pcie_ctl: bit 0
// small_fence_on_rdma_read_response; flags: bit 7 umr_en, bits 6:2 A RW RR
// LW LR, bits 1:0 access_mode[1:0]; flags_pd: bit 31 length64, bit 30
// bsf_en, bit 26 expected_sigerr_count, bit 24 en_rinval, bits 23:0 PD.
type MkeySeg []byte

// MkeyFields are the fields of an mkey context segment.
type MkeyFields struct {
	Free             bool
	Mode             klm.AccessMode
	SmallFence       bool
	UMREnabled       bool
	Access           klm.Access
	QPN              uint32 // 24 bits
	Variant          uint8
	Length64         bool
	BSFEnabled       bool
	ExpectedSigErr   uint8 // 1 bit
	RemoteInvalidate bool
	PD               uint32 // 24 bits
	StartAddr        uint64
	Len              uint64
	BSFOctowords     uint32
	XLTOctowords     uint32
	LogPageSize      uint8 // 6 bits
}

// Fields decodes the segment.
func (s MkeySeg) Fields() MkeyFields {
	qk := binary.BigEndian.Uint32(s[4:])
	fp := binary.BigEndian.Uint32(s[12:])
	return MkeyFields{
		Free:             s[0]&0x40 != 0,
		Mode:             klm.AccessMode((s[0]>>2&7)<<2 | s[2]&3),
		SmallFence:       s[1]&1 != 0,
		UMREnabled:       s[2]&0x80 != 0,
		Access:           klm.Access(s[2]) & klm.AccessMask,
		QPN:              qk >> 8,
		Variant:          uint8(qk),
		Length64:         fp&(1<<31) != 0,
		BSFEnabled:       fp&(1<<30) != 0,
		ExpectedSigErr:   uint8(fp >> 26 & 1),
		RemoteInvalidate: fp&(1<<24) != 0,
		PD:               fp & 0xFFFFFF,
		StartAddr:        binary.BigEndian.Uint64(s[16:]),
		Len:              binary.BigEndian.Uint64(s[24:]),
		BSFOctowords:     binary.BigEndian.Uint32(s[32:]),
		XLTOctowords:     binary.BigEndian.Uint32(s[52:]),
		LogPageSize:      s[59] & 0x3F,
	}
}

// Encode writes f into the segment; reserved bytes are zeroed.
func (s MkeySeg) Encode(f *MkeyFields) {
	clear(s[:MkeySegSize])
	if f.Free {
		s[0] |= 0x40
	}
	s[0] |= uint8(f.Mode>>2&7) << 2
	if f.SmallFence {
		s[1] |= 1
	}
	s[2] = uint8(f.Access&klm.AccessMask) | uint8(f.Mode&3)
	if f.UMREnabled {
		s[2] |= 0x80
	}
	binary.BigEndian.PutUint32(s[4:], f.QPN<<8|uint32(f.Variant))
	fp := f.PD & 0xFFFFFF
	if f.Length64 {
		fp |= 1 << 31
	}
	if f.BSFEnabled {
		fp |= 1 << 30
	}
	fp |= uint32(f.ExpectedSigErr&1) << 26
	if f.RemoteInvalidate {
		fp |= 1 << 24
	}
	binary.BigEndian.PutUint32(s[12:], fp)
	binary.BigEndian.PutUint64(s[16:], f.StartAddr)
	binary.BigEndian.PutUint64(s[24:], f.Len)
	binary.BigEndian.PutUint32(s[32:], f.BSFOctowords)
	binary.BigEndian.PutUint32(s[52:], f.XLTOctowords)
	s[59] = f.LogPageSize & 0x3F
}

// Mkey returns the mkey context f describes, as CREATE_MKEY creates it:
// translation capacity XLTOctowords, an empty translation.
func (f *MkeyFields) Mkey() klm.Mkey {
	return klm.Mkey{
		Variant:          f.Variant,
		Free:             f.Free,
		PD:               f.PD,
		Access:           f.Access,
		UMREnabled:       f.UMREnabled,
		Mode:             f.Mode,
		StartAddr:        f.StartAddr,
		Len:              f.Len,
		Length64:         f.Length64,
		LogPageSize:      f.LogPageSize,
		QPN:              f.QPN,
		RemoteInvalidate: f.RemoteInvalidate,
		SmallFence:       f.SmallFence,
		BSFEnabled:       f.BSFEnabled,
		ExpectedSigErr:   f.ExpectedSigErr,
		XLTOctowords:     f.XLTOctowords,
	}
}
