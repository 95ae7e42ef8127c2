// Package psv holds the signature layer of the modelled HCA: the BSF (the
// 64-byte byte-stream format descriptor a signature mkey carries) as a
// typed view, and Sig, its decoding with the PSVs' guard seeds into the
// memory and wire domains the data path transforms between (wire-domain
// addressing, error offsets, re-blocking).
package psv

import (
	"encoding/binary"
	"fmt"
)

// BSFSize is the size of a BSF with its inline sections (mlx5_bsf).
const BSFSize = 64

// BSF size codes (bsf_size_sbs bits 7:6).
const (
	BSFBasic      = 0
	BSFExtended   = 1
	BSFWithInline = 2 // what mlx5 writes for T10-DIF
	BSFSigCrypto  = 3
)

// Guard types of an inline section (sig_type).
const (
	SigTypeCRC  = 1 // T10 CRC-16 guard (MLX5_DIF_CRC)
	SigTypeIPCS = 2 // IP checksum guard (MLX5_DIF_IPCS)
)

// CRC block format selectors (the bfs byte of w_bfs_psv and m_bfs_psv,
// bits 7:4; rdma-core's mlx5_umr_crc_bfs), for mlx5dv's CRC block
// signatures. A T10-DIF domain has bfs 0 (its type is in the inline
// section).
const (
	BFSCRC32     = 0x20
	BFSCRC32C    = 0x40
	BFSCRC64XP10 = 0x50
	BFSRepeat    = 0x02 // always set by rdma-core
	BFSSeedZero  = 0x01 // the CRC register starts at 0 (else all ones)
	bfsTypeMask  = 0xF0
)

// Escape codes (dif_inc_ref_guard_check bits 1:0).
const (
	EscapeNone   = 0
	EscapeApp    = 1 // MLX5_BSF_APPTAG_ESCAPE
	EscapeAppRef = 2 // MLX5_BSF_APPREF_ESCAPE
)

// Block-size selectors and the intervals they stand for.
var selectorSizes = map[uint8]int{1: 512, 2: 520, 3: 4096, 4: 4160, 5: 1 << 30, 6: 4048}

// BlockSize returns the protection interval of a block-size selector.
func BlockSize(sel uint8) (int, bool) {
	n, ok := selectorSizes[sel]
	return n, ok
}

// Selector returns the block-size selector of an interval (0 if none).
func Selector(interval int) uint8 {
	for s, n := range selectorSizes {
		if n == interval {
			return s
		}
	}
	return 0
}

// BSF is a view of a 64-byte BSF.
//
//	basic  0: size|sbs  1: check_byte_mask  2: wire copy_byte_mask (sbs) or bs_selector
//	       3: mem bs_selector  4: raw_data_size  8: w_bfs_psv  12: m_bfs_psv
//	ext   16: four BE32 words (transaction signature; unused)
//	w_inl 32: wire inline section   m_inl 48: memory inline section
type BSF []byte

// Inline is a view of a 16-byte inline section.
//
//	0: vld_refresh (bit 15 valid, bit 14 refresh)  2: dif_apptag  4: dif_reftag
//	8: sig_type  9: rp_inv_seed (bit 7 repeat block, bit 3 seed)
//	13: dif_inc_ref_guard_check (bit 6 increment ref, bits 1:0 escape)  14: dif_app_bitmask_check
type Inline []byte

// InlineFields are the fields of an inline section.
type InlineFields struct {
	Valid, Refresh bool
	AppTag         uint16
	RefTag         uint32
	SigType        uint8
	RepeatBlock    bool
	Seed           bool
	IncRefTag      bool
	Escape         uint8
	AppTagMask     uint16
}

// BSFFields are the fields of a BSF.
type BSFFields struct {
	Size        uint8 // BSFBasic … BSFSigCrypto
	SBS         bool  // same block structure in both domains
	CheckMask   uint8 // input-domain bytes checked
	WireByte    uint8 // copy_byte_mask when SBS, else the wire bs_selector
	MemSelector uint8
	RawDataSize uint32
	WireBFS     uint8
	WirePSV     uint32 // 24 bits
	MemBFS      uint8
	MemPSV      uint32 // 24 bits
	Ext         [4]uint32
	Wire, Mem   InlineFields
}

// Fields decodes the section.
func (s Inline) Fields() InlineFields {
	v := binary.BigEndian.Uint16(s)
	return InlineFields{
		Valid:       v&0x8000 != 0,
		Refresh:     v&0x4000 != 0,
		AppTag:      binary.BigEndian.Uint16(s[2:]),
		RefTag:      binary.BigEndian.Uint32(s[4:]),
		SigType:     s[8],
		RepeatBlock: s[9]&0x80 != 0,
		Seed:        s[9]&0x08 != 0,
		IncRefTag:   s[13]&0x40 != 0,
		Escape:      s[13] & 3,
		AppTagMask:  binary.BigEndian.Uint16(s[14:]),
	}
}

// Encode writes f into the section; reserved bits are zeroed.
func (s Inline) Encode(f *InlineFields) {
	clear(s[:16])
	var v uint16
	if f.Valid {
		v |= 0x8000
	}
	if f.Refresh {
		v |= 0x4000
	}
	binary.BigEndian.PutUint16(s, v)
	binary.BigEndian.PutUint16(s[2:], f.AppTag)
	binary.BigEndian.PutUint32(s[4:], f.RefTag)
	s[8] = f.SigType
	if f.RepeatBlock {
		s[9] |= 0x80
	}
	if f.Seed {
		s[9] |= 0x08
	}
	if f.IncRefTag {
		s[13] |= 0x40
	}
	s[13] |= f.Escape & 3
	binary.BigEndian.PutUint16(s[14:], f.AppTagMask)
}

// Fields decodes the BSF.
func (b BSF) Fields() BSFFields {
	f := BSFFields{
		Size:        b[0] >> 6,
		SBS:         b[0]&0x10 != 0,
		CheckMask:   b[1],
		WireByte:    b[2],
		MemSelector: b[3],
		RawDataSize: binary.BigEndian.Uint32(b[4:]),
		WireBFS:     b[8],
		WirePSV:     binary.BigEndian.Uint32(b[8:]) & 0xFFFFFF,
		MemBFS:      b[12],
		MemPSV:      binary.BigEndian.Uint32(b[12:]) & 0xFFFFFF,
		Wire:        Inline(b[32:48]).Fields(),
		Mem:         Inline(b[48:64]).Fields(),
	}
	for i := range f.Ext {
		f.Ext[i] = binary.BigEndian.Uint32(b[16+4*i:])
	}
	return f
}

// Encode writes f into the BSF; reserved bits are zeroed.
func (b BSF) Encode(f *BSFFields) {
	clear(b[:BSFSize])
	b[0] = f.Size << 6
	if f.SBS {
		b[0] |= 0x10
	}
	b[1], b[2], b[3] = f.CheckMask, f.WireByte, f.MemSelector
	binary.BigEndian.PutUint32(b[4:], f.RawDataSize)
	binary.BigEndian.PutUint32(b[8:], uint32(f.WireBFS)<<24|f.WirePSV&0xFFFFFF)
	binary.BigEndian.PutUint32(b[12:], uint32(f.MemBFS)<<24|f.MemPSV&0xFFFFFF)
	for i, v := range f.Ext {
		binary.BigEndian.PutUint32(b[16+4*i:], v)
	}
	Inline(b[32:48]).Encode(&f.Wire)
	Inline(b[48:64]).Encode(&f.Mem)
}

// Validate checks that b is a BSF the model can run: 64 bytes, the size
// code for inline sections.
func (b BSF) Validate() error {
	if len(b) != BSFSize {
		return fmt.Errorf("psv: BSF of %d bytes, want %d", len(b), BSFSize)
	}
	if b[0]>>6 != BSFWithInline {
		return fmt.Errorf("psv: BSF size code %d, want %d (with inline)", b[0]>>6, BSFWithInline)
	}
	return nil
}
