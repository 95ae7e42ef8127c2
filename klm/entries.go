package klm

import "encoding/binary"

// Translation entry layouts (all big-endian), as the UMR carries them and
// as mlx5dv.h declares them.

// Entry sizes in bytes.
const (
	KLMSize         = 16 // mlx5_klm, mlx5_wqe_umr_klm_seg, mlx5_wqe_data_seg
	KSMSize         = 16 // mlx5_ksm
	MTTSize         = 8  // mlx5_mtt
	RepeatCtrlSize  = 16 // mlx5_wqe_umr_repeat_block_seg
	RepeatEntrySize = 16 // mlx5_wqe_umr_repeat_ent_seg
	OctowordSize    = 16 // the unit of translation sizes
)

// RepeatBlockOp is the op value that marks a repeat-block control segment
// (MLX5_STRIDE_BLOCK_OP) where a KLM list would have its first key.
const RepeatBlockOp = 0x400

// KLM is a view of one KLM entry (also the layout of a data segment).
//
//	0        4        8                16
//	| bcount |  key   |       va       |
type KLM []byte

// KLMFields are the fields of a KLM entry.
type KLMFields struct {
	ByteCount uint32
	Key       Key
	VA        uint64
}

// ByteCount returns the entry's length.
func (e KLM) ByteCount() uint32 { return binary.BigEndian.Uint32(e) }

// Key returns the key the entry points through.
func (e KLM) Key() Key { return Key(binary.BigEndian.Uint32(e[4:])) }

// VA returns the address in the key's space.
func (e KLM) VA() uint64 { return binary.BigEndian.Uint64(e[8:]) }

// Fields decodes the entry.
func (e KLM) Fields() KLMFields { return KLMFields{e.ByteCount(), e.Key(), e.VA()} }

// Encode writes f into the entry.
func (e KLM) Encode(f *KLMFields) {
	binary.BigEndian.PutUint32(e, f.ByteCount)
	binary.BigEndian.PutUint32(e[4:], uint32(f.Key))
	binary.BigEndian.PutUint64(e[8:], f.VA)
}

// KSM is a view of one KSM entry: a key and an address for a fixed-size
// entity of the translation.
//
//	0          4        8                16
//	| reserved |  key   |       va       |
type KSM []byte

// KSMFields are the fields of a KSM entry.
type KSMFields struct {
	Key Key
	VA  uint64
}

// Fields decodes the entry.
func (e KSM) Fields() KSMFields {
	return KSMFields{Key(binary.BigEndian.Uint32(e[4:])), binary.BigEndian.Uint64(e[8:])}
}

// Encode writes f into the entry (reserved bytes zero).
func (e KSM) Encode(f *KSMFields) {
	binary.BigEndian.PutUint32(e, 0)
	binary.BigEndian.PutUint32(e[4:], uint32(f.Key))
	binary.BigEndian.PutUint64(e[8:], f.VA)
}

// MTT is a view of one MTT entry: a page address with read- and
// write-enable bits in its low bits.
//
//	63                          2   1    0
//	|       page address        | .. | WR | RD |
type MTT []byte

// MTT entry flags.
const (
	MTTRead  = 1 << 0 // MLX5_EN_RD
	MTTWrite = 1 << 1 // MLX5_EN_WR
)

// MTTFields are the fields of an MTT entry.
type MTTFields struct {
	Addr  uint64 // page address (low bits ignored)
	Read  bool
	Write bool
}

// Fields decodes the entry; Addr keeps the bits above the flags.
func (e MTT) Fields() MTTFields {
	v := binary.BigEndian.Uint64(e)
	return MTTFields{Addr: v &^ 3, Read: v&MTTRead != 0, Write: v&MTTWrite != 0}
}

// Encode writes f into the entry.
func (e MTT) Encode(f *MTTFields) {
	v := f.Addr &^ 3
	if f.Read {
		v |= MTTRead
	}
	if f.Write {
		v |= MTTWrite
	}
	binary.BigEndian.PutUint64(e, v)
}

// RepeatCtrl is a view of a repeat-block control segment, followed in the
// translation by NumEntries RepeatEntry segments. The block maps
// RepeatCount cycles; each takes every entry's ByteCount bytes in order and
// then advances the entry by its stride.
//
//	0                  4        8              12       14            16
//	| bcount per cycle | op=0x400 | repeat count | rsvd | num entries |
type RepeatCtrl []byte

// RepeatCtrlFields are the fields of a repeat-block control segment.
type RepeatCtrlFields struct {
	BytesPerCycle uint32 // the sum of the entries' ByteCount
	Op            uint32 // RepeatBlockOp
	RepeatCount   uint32
	NumEntries    uint16
}

// Fields decodes the segment.
func (c RepeatCtrl) Fields() RepeatCtrlFields {
	return RepeatCtrlFields{
		BytesPerCycle: binary.BigEndian.Uint32(c),
		Op:            binary.BigEndian.Uint32(c[4:]),
		RepeatCount:   binary.BigEndian.Uint32(c[8:]),
		NumEntries:    binary.BigEndian.Uint16(c[14:]),
	}
}

// Encode writes f into the segment (reserved bytes zero).
func (c RepeatCtrl) Encode(f *RepeatCtrlFields) {
	binary.BigEndian.PutUint32(c, f.BytesPerCycle)
	binary.BigEndian.PutUint32(c[4:], f.Op)
	binary.BigEndian.PutUint32(c[8:], f.RepeatCount)
	binary.BigEndian.PutUint16(c[12:], 0)
	binary.BigEndian.PutUint16(c[14:], f.NumEntries)
}

// RepeatEntry is a view of one repeat-block entry.
//
//	0        2        4        8                16
//	| stride | bcount |  key   |       va       |
type RepeatEntry []byte

// RepeatEntryFields are the fields of a repeat-block entry.
type RepeatEntryFields struct {
	Stride    uint16
	ByteCount uint16
	Key       Key
	VA        uint64
}

// Fields decodes the entry.
func (e RepeatEntry) Fields() RepeatEntryFields {
	return RepeatEntryFields{
		Stride:    binary.BigEndian.Uint16(e),
		ByteCount: binary.BigEndian.Uint16(e[2:]),
		Key:       Key(binary.BigEndian.Uint32(e[4:])),
		VA:        binary.BigEndian.Uint64(e[8:]),
	}
}

// Encode writes f into the entry.
func (e RepeatEntry) Encode(f *RepeatEntryFields) {
	binary.BigEndian.PutUint16(e, f.Stride)
	binary.BigEndian.PutUint16(e[2:], f.ByteCount)
	binary.BigEndian.PutUint32(e[4:], uint32(f.Key))
	binary.BigEndian.PutUint64(e[8:], f.VA)
}
