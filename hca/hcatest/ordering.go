package hcatest

import (
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var orderingScenarios = []scenario{
	{"FencedWriteAfterRead", fencedWriteAfterRead},
	{"FencedSendAfterRead", fencedSendAfterRead},
	{"FencedWriteAfterAtomic", fencedWriteAfterAtomic},
	{"WritesInOrder", writesInOrder},
	{"WritesBeforeWriteImm", writesBeforeImm},
	{"WritesBeforeSend", writesBeforeSend},
}

// fencedWriteAfterRead: a READ fills local buffer X, then a fenced WRITE
// sends X to the peer: the WRITE must carry what the READ brought.
func fencedWriteAfterRead(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	const n = 4096
	for round := range 40 {
		fill(b.buf[:n], byte(round))
		clear(b.buf[32768 : 32768+n])
		fill(a.buf[8192:8192+n], 0xEE) // X holds something else before the READ
		r := read(uint64(round)<<8|1, a.mr.SGE(8192, n), b.mr.Addr, b.mr.RKey)
		r.Flags = 0
		w := write(uint64(round)<<8|2, a.mr.SGE(8192, n), b.mr.Addr+32768, b.mr.RKey)
		w.Flags |= verbs.SendFence
		ea.post(r, w)
		Check(t, "fenced write", Poll1(t, ea.scq), Want{WRID: w.WRID, Op: verbs.WCRDMAWrite, Len: AnyLen})
		sameBytes(t, fmt.Sprintf("round %d: what the fenced write carried", round), b.buf[32768:32768+n], b.buf[:n])
		if t.Failed() {
			return
		}
	}
}

// fencedSendAfterRead: the same with a fenced SEND of X.
func fencedSendAfterRead(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	const n = 2048
	for round := range 40 {
		fill(b.buf[:n], byte(round+100))
		fill(a.buf[8192:8192+n], 0xEE)
		eb.recv(rwr(uint64(round), b.mr.SGE(16384, n)))
		r := read(uint64(round)<<8|1, a.mr.SGE(8192, n), b.mr.Addr, b.mr.RKey)
		sd := send(uint64(round)<<8|2, a.mr.SGE(8192, n))
		sd.Flags |= verbs.SendFence
		ea.post(r, sd)
		Check(t, "read", Poll1(t, ea.scq), Want{WRID: r.WRID, Op: verbs.WCRDMARead, Len: n})
		Check(t, "fenced send", Poll1(t, ea.scq), Want{WRID: sd.WRID, Op: verbs.WCSend, Len: AnyLen})
		Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: uint64(round), Op: verbs.WCRecv, Len: n})
		sameBytes(t, fmt.Sprintf("round %d: what the fenced send carried", round), b.buf[16384:16384+n], b.buf[:n])
		if t.Failed() {
			return
		}
	}
}

// fencedWriteAfterAtomic: a fetch-add returns the old value into X; a
// fenced WRITE then carries X.
func fencedWriteAfterAtomic(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	putBE64(b.buf, 1000)
	for round := range 30 {
		putBE64(a.buf[64:], 0xFFFF)
		fa := verbs.SendWR{WRID: uint64(round)<<8 | 1, Opcode: verbs.WRAtomicFetchAdd, SG: []verbs.SGE{a.mr.SGE(64, 8)},
			RemoteAddr: b.mr.Addr, RKey: b.mr.RKey, CompareAdd: 1}
		w := write(uint64(round)<<8|2, a.mr.SGE(64, 8), b.mr.Addr+uint64(8*(round+1)), b.mr.RKey)
		w.Flags |= verbs.SendFence
		ea.post(fa, w)
		Check(t, "fenced write", Poll1(t, ea.scq), Want{WRID: w.WRID, Op: verbs.WCRDMAWrite, Len: AnyLen})
		if got := be64(b.buf[8*(round+1):]); got != uint64(1000+round) {
			t.Fatalf("round %d: the fenced write carried %d, want %d", round, got, 1000+round)
		}
	}
}

// writesInOrder: WRITEs to one place land in posting order: the last wins.
func writesInOrder(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	for round := range 10 {
		const n = 60
		var wrs []verbs.SendWR
		for i := range n {
			v := uint64(round*1000 + i)
			putBE64(a.buf[8*i:], v)
			w := write(v, a.mr.SGE(8*i, 8), b.mr.Addr, b.mr.RKey)
			if i != n-1 {
				w.Flags = 0
			}
			wrs = append(wrs, w)
		}
		ea.post(wrs...)
		Check(t, "last write", Poll1(t, ea.scq), Want{WRID: uint64(round*1000 + n - 1), Op: verbs.WCRDMAWrite, Len: AnyLen})
		if got := be64(b.buf); got != uint64(round*1000+n-1) {
			t.Fatalf("round %d: remote word %d after in-order writes, want %d", round, got, round*1000+n-1)
		}
	}
}

// writesBeforeImm: when the WRITE with immediate's receive completes,
// every earlier WRITE's data is visible.
func writesBeforeImm(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	fill(a.buf, 0x13)
	for round := range 10 {
		clear(b.buf)
		eb.recv(rwr(uint64(round)))
		var wrs []verbs.SendWR
		for i := range 15 {
			w := write(uint64(i), a.mr.SGE(4000*i, 3000), b.mr.Addr+uint64(4000*i), b.mr.RKey)
			w.Flags = 0
			wrs = append(wrs, w)
		}
		wrs = append(wrs, verbs.SendWR{WRID: 99, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: uint32(round),
			SG: []verbs.SGE{a.mr.SGE(60000, 8)}, RemoteAddr: b.mr.Addr + 60000, RKey: b.mr.RKey})
		ea.post(wrs...)
		Check(t, "write with imm", Poll1(t, eb.rcq), Want{WRID: uint64(round), Op: verbs.WCRecvRDMAWithImm, Len: 8, Imm: uint32(round), WithImm: true})
		for i := range 15 {
			sameBytes(t, fmt.Sprintf("round %d write %d", round, i), b.buf[4000*i:4000*i+3000], a.buf[4000*i:4000*i+3000])
		}
		Check(t, "requester", Poll1(t, ea.scq), Want{WRID: 99, Op: verbs.WCRDMAWrite, Len: AnyLen})
		if t.Failed() {
			return
		}
	}
}

// writesBeforeSend: likewise for a SEND after WRITEs.
func writesBeforeSend(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	fill(a.buf, 0x29)
	for round := range 10 {
		clear(b.buf)
		eb.recv(rwr(uint64(round), b.mr.SGE(62000, 100)))
		var wrs []verbs.SendWR
		for i := range 12 {
			w := write(uint64(i), a.mr.SGE(5000*i, 4999), b.mr.Addr+uint64(5000*i), b.mr.RKey)
			w.Flags = 0
			wrs = append(wrs, w)
		}
		wrs = append(wrs, send(99, a.mr.SGE(0, 10)))
		ea.post(wrs...)
		Check(t, "send", Poll1(t, eb.rcq), Want{WRID: uint64(round), Op: verbs.WCRecv, Len: 10})
		for i := range 12 {
			sameBytes(t, fmt.Sprintf("round %d write %d", round, i), b.buf[5000*i:5000*i+4999], a.buf[5000*i:5000*i+4999])
		}
		Check(t, "requester", Poll1(t, ea.scq), Want{WRID: 99, Op: verbs.WCSend, Len: AnyLen})
		if t.Failed() {
			return
		}
	}
}
