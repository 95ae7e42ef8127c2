package psv

import "encoding/binary"

// SetPSVSegSize is the size of a SET_PSV segment.
const SetPSVSegSize = 16

// SetPSVSeg is a view of a SET_PSV segment (mlx5_seg_set_psv), the data
// segment of a SET_PSV WQE: it loads a PSV with its transient signature.
//
//	0: psv_index (24 bits)  4: syndrome(16)  6: reserved  8: transient signature: BE32 bg<<16|app, BE32 ref_tag
type SetPSVSeg []byte

// SetPSVFields are the fields of a SET_PSV segment.
type SetPSVFields struct {
	Index    uint32
	Syndrome uint16
	Guard    uint16 // bg: the guard seed
	AppTag   uint16
	RefTag   uint32
}

// Fields decodes the segment.
func (p SetPSVSeg) Fields() SetPSVFields {
	ts := binary.BigEndian.Uint32(p[8:])
	return SetPSVFields{
		Index:    binary.BigEndian.Uint32(p) & 0xFFFFFF,
		Syndrome: binary.BigEndian.Uint16(p[4:]),
		Guard:    uint16(ts >> 16),
		AppTag:   uint16(ts),
		RefTag:   binary.BigEndian.Uint32(p[12:]),
	}
}

// Encode writes f into the segment.
func (p SetPSVSeg) Encode(f *SetPSVFields) {
	binary.BigEndian.PutUint32(p, f.Index&0xFFFFFF)
	binary.BigEndian.PutUint16(p[4:], f.Syndrome)
	binary.BigEndian.PutUint16(p[6:], 0)
	binary.BigEndian.PutUint32(p[8:], uint32(f.Guard)<<16|uint32(f.AppTag))
	binary.BigEndian.PutUint32(p[12:], f.RefTag)
}
