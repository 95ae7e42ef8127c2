package hca

import (
	"encoding/binary"
	"testing"

	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/sq"
)

// FuzzSRQTake: an SRQ ring of any bytes, with any posted counter and
// limit: take never reads outside the ring, returns WQE indices inside it,
// at most the WQE's room in data segments, stops once it has taken what is
// posted, and raises the limit event at most once per arming.
func FuzzSRQTake(f *testing.F) {
	ring := make([]byte, 4<<5)
	for i := range 4 {
		binary.BigEndian.PutUint16(ring[i<<5+2:], uint16((i+1)&3))
		sq.DataSeg(ring[i<<5+16:]).Encode(&sq.DataFields{ByteCount: 64, LKey: 0x200, Addr: uint64(i) << 12})
	}
	f.Add(ring, uint16(3), uint8(2), uint8(5), uint16(2))
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF}, uint16(0xFFFF), uint8(0), uint8(5), uint16(0))
	f.Fuzz(func(t *testing.T, raw []byte, posted uint16, log, stride uint8, limit uint16) {
		log, stride = log%6, 5+stride%3
		buf := make([]byte, 1<<(log+stride))
		copy(buf, raw)
		db := make([]byte, 4)
		binary.BigEndian.PutUint32(db, uint32(posted))
		fn := &Func{evSig: make(chan struct{}, 1)}
		s := &SRQ{srqn: 1, fn: fn, buf: buf, db: db, log: log, stride: stride, limit: limit}
		taken := 0
		for {
			list, idx, ok := s.take(nil)
			if !ok {
				break
			}
			taken++
			if int(idx) >= 1<<log {
				t.Fatalf("index %d outside an SRQ of %d WQEs", idx, 1<<log)
			}
			if len(list)*sq.DataSegSize > 1<<stride-srqNextSeg {
				t.Fatalf("%d data segments in a WQE of %d bytes", len(list), 1<<stride)
			}
			if taken > int(posted) {
				t.Fatalf("took %d WQEs of %d posted", taken, posted)
			}
		}
		if taken != int(posted) {
			t.Fatalf("took %d WQEs of %d posted", taken, posted)
		}
		n := 0
		for _, e := range fn.DrainEvents(nil) {
			if e.Type == ifc.EventSRQLimit {
				n++
			}
		}
		if n > 1 {
			t.Fatalf("%d limit events for one arming", n)
		}
	})
}
