package hcatest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var rdmaScenarios = []scenario{
	{"Write", rdmaWrite},
	{"WriteWithImm", rdmaWriteWithImm},
	{"Read", rdmaRead},
	{"FetchAdd", atomicFetchAdd},
	{"CompareSwap", atomicCompareSwap},
	{"InlineSend", inlineSend},
	{"InlineWrite", inlineWrite},
	{"InlineTooBig", inlineTooBig},
	{"InlineRead", inlineRead},
	{"ReadsBeyondMaxRD", readsBeyondMaxRD},
	{"ZeroLengthNoKeyCheck", zeroLengthNoKeyCheck},
	{"LargeTransfers", largeTransfers},
}

// rdmaWrite writes gathered data into the peer's memory at various
// offsets and sizes.
func rdmaWrite(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	fill(a.buf, 1)
	for i, c := range []struct{ loff, roff, n int }{{0, 0, 1}, {1, 4095, 2}, {100, 7, 4096}, {0, 12345, 40000}, {65535, 65535, 1}} {
		clear(b.buf)
		id := uint64(i + 1)
		ea.post(write(id, a.mr.SGE(c.loff, c.n), b.mr.Addr+uint64(c.roff), b.mr.RKey))
		Check(t, "write", Poll1(t, ea.scq), Want{WRID: id, Op: verbs.WCRDMAWrite, Len: AnyLen})
		sameBytes(t, fmt.Sprintf("write %d at %d", c.n, c.roff), b.buf[c.roff:c.roff+c.n], a.buf[c.loff:c.loff+c.n])
		sameBytes(t, "bytes around the write", b.buf[:c.roff], make([]byte, c.roff))
		sameBytes(t, "bytes after the write", b.buf[c.roff+c.n:], make([]byte, bufSize-c.roff-c.n))
	}
	// Three gathered pieces land contiguously.
	clear(b.buf)
	ea.post(verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 10), a.mr.SGE(1000, 20), a.mr.SGE(50000, 30)}, RemoteAddr: b.mr.Addr + 300, RKey: b.mr.RKey})
	Check(t, "gathered write", Poll1(t, ea.scq), Want{WRID: 9, Op: verbs.WCRDMAWrite, Len: AnyLen})
	var msg []byte
	msg = append(msg, a.buf[0:10]...)
	msg = append(msg, a.buf[1000:1020]...)
	msg = append(msg, a.buf[50000:50030]...)
	sameBytes(t, "gathered write data", b.buf[300:360], msg)
}

// rdmaWriteWithImm writes and consumes a receive at the peer, which
// completes with RECV_RDMA_WITH_IMM, the byte count of the write and the
// immediate; the receive's own buffer is not written.
func rdmaWriteWithImm(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	fill(a.buf[:1000], 5)
	clear(b.buf)
	eb.recv(rwr(11, b.mr.SGE(60000, 64)), rwr(12))
	ea.post(verbs.SendWR{WRID: 21, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 0xA1B2C3D4,
		SG: []verbs.SGE{a.mr.SGE(0, 1000)}, RemoteAddr: b.mr.Addr + 512, RKey: b.mr.RKey})
	Check(t, "write with imm", Poll1(t, ea.scq), Want{WRID: 21, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: 11, Op: verbs.WCRecvRDMAWithImm, Len: 1000, Imm: 0xA1B2C3D4, WithImm: true, QPN: eb.qp.QPN()})
	sameBytes(t, "written data", b.buf[512:1512], a.buf[:1000])
	sameBytes(t, "the receive buffer", b.buf[60000:60064], make([]byte, 64))
	// A zero-length write with immediate into a receive without buffers.
	ea.post(verbs.SendWR{WRID: 22, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 7, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
	Check(t, "zero-length write with imm", Poll1(t, ea.scq), Want{WRID: 22, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: 12, Op: verbs.WCRecvRDMAWithImm, Len: 0, Imm: 7, WithImm: true})
}

// rdmaRead reads remote data into scattered local buffers.
func rdmaRead(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	fill(b.buf, 77)
	for i, c := range []struct{ loff, roff, n int }{{0, 0, 1}, {3, 4093, 9}, {0, 100, 30000}, {65535, 0, 1}} {
		clear(a.buf)
		id := uint64(i + 1)
		ea.post(read(id, a.mr.SGE(c.loff, c.n), b.mr.Addr+uint64(c.roff), b.mr.RKey))
		Check(t, "read", Poll1(t, ea.scq), Want{WRID: id, Op: verbs.WCRDMARead, Len: c.n})
		sameBytes(t, fmt.Sprintf("read %d from %d", c.n, c.roff), a.buf[c.loff:c.loff+c.n], b.buf[c.roff:c.roff+c.n])
		sameBytes(t, "local bytes after the read", a.buf[c.loff+c.n:], make([]byte, bufSize-c.loff-c.n))
	}
	clear(a.buf)
	ea.post(verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(8000, 5), a.mr.SGE(100, 3000), a.mr.SGE(40000, 1)}, RemoteAddr: b.mr.Addr + 1, RKey: b.mr.RKey})
	Check(t, "scattered read", Poll1(t, ea.scq), Want{WRID: 9, Op: verbs.WCRDMARead, Len: 3006})
	sameBytes(t, "first piece", a.buf[8000:8005], b.buf[1:6])
	sameBytes(t, "second piece", a.buf[100:3100], b.buf[6:3006])
	sameBytes(t, "third piece", a.buf[40000:40001], b.buf[3006:3007])
}

// atomicFetchAdd adds to a big-endian 64-bit word and returns the old
// value into the local buffer, big-endian.
func atomicFetchAdd(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	for i, c := range []struct{ init, add uint64 }{
		{0x0102030405060708, 0x10},
		{0xFFFFFFFFFFFFFFFF, 2}, // wraps
		{0x00000000FFFFFFFF, 1}, // carries across the 32-bit halves
		{42, 0},
	} {
		putBE64(b.buf[1024:], c.init)
		fill(a.buf[:8], 0xEE)
		id := uint64(i + 1)
		ea.post(verbs.SendWR{WRID: id, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 8)},
			RemoteAddr: b.mr.Addr + 1024, RKey: b.mr.RKey, CompareAdd: c.add})
		Check(t, "fetch-add", Poll1(t, ea.scq), Want{WRID: id, Op: verbs.WCFetchAdd, Len: 8})
		if got := be64(a.buf); got != c.init {
			t.Errorf("fetch-add %d: fetched %#x, want %#x", i, got, c.init)
		}
		if got := be64(b.buf[1024:]); got != c.init+c.add {
			t.Errorf("fetch-add %d: remote %#x, want %#x", i, got, c.init+c.add)
		}
	}
	// A batch of adds to one word: every add counts.
	putBE64(b.buf[2048:], 0)
	const n = 50
	var wrs []verbs.SendWR
	for i := range n {
		wrs = append(wrs, verbs.SendWR{WRID: uint64(100 + i), Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{a.mr.SGE(8*i, 8)}, RemoteAddr: b.mr.Addr + 2048, RKey: b.mr.RKey, CompareAdd: 3})
	}
	ea.post(wrs...)
	for i, wc := range Poll(t, ea.scq, n) {
		Check(t, "fetch-add batch", wc, Want{WRID: uint64(100 + i), Op: verbs.WCFetchAdd, Len: 8})
		if got := be64(a.buf[8*i:]); got != uint64(3*i) {
			t.Errorf("fetch-add batch %d fetched %d, want %d", i, got, 3*i)
		}
	}
	if got := be64(b.buf[2048:]); got != 3*n {
		t.Errorf("after the batch: %d, want %d", got, 3*n)
	}
}

// atomicCompareSwap swaps when the word equals the compare value and
// always returns the old value.
func atomicCompareSwap(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	for i, c := range []struct {
		init, cmp, swap, after uint64
	}{
		{0x1122334455667788, 0x1122334455667788, 0x8877665544332211, 0x8877665544332211}, // equal: swapped
		{0x1122334455667788, 0x1122334455667789, 0xFFFF, 0x1122334455667788},             // differs: kept
		{0, 0, 1, 1},
		{0x8000000000000000, 0x0000000000000080, 5, 0x8000000000000000}, // byte order matters
	} {
		putBE64(b.buf[4096+8*i:], c.init)
		fill(a.buf[:8], 0xEE)
		id := uint64(i + 1)
		ea.post(verbs.SendWR{WRID: id, Opcode: verbs.WRAtomicCmpSwp, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 8)},
			RemoteAddr: b.mr.Addr + 4096 + uint64(8*i), RKey: b.mr.RKey, CompareAdd: c.cmp, Swap: c.swap})
		Check(t, "compare-swap", Poll1(t, ea.scq), Want{WRID: id, Op: verbs.WCCompSwap, Len: 8})
		if got := be64(a.buf); got != c.init {
			t.Errorf("compare-swap %d: fetched %#x, want %#x", i, got, c.init)
		}
		if got := be64(b.buf[4096+8*i:]); got != c.after {
			t.Errorf("compare-swap %d: remote %#x, want %#x", i, got, c.after)
		}
	}
}

// inlineSend sends inline data: it is copied when posted, so changing the
// buffer after PostSend returns does not change what arrives.
func inlineSend(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	for i, n := range []int{1, 12, 13, 64, 100, 256} {
		want1 := pattern(n, byte(i*3))
		copy(a.buf[1000:], want1)
		rid, sid := uint64(10+i), uint64(20+i)
		eb.recv(rwr(rid, b.mr.SGE(0, 4096)))
		// Inline data needs no lkey.
		ea.post(verbs.SendWR{WRID: sid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
			SG: []verbs.SGE{{Addr: a.mr.Addr + 1000, Length: uint32(n)}}})
		fill(a.buf[1000:1000+n], 0xAA) // after posting
		Check(t, "inline send", Poll1(t, ea.scq), Want{WRID: sid, Op: verbs.WCSend, Len: AnyLen})
		Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: rid, Op: verbs.WCRecv, Len: n})
		sameBytes(t, fmt.Sprintf("inline send of %d", n), b.buf[:n], want1)
	}
	// Inline from two pieces, with immediate.
	copy(a.buf[2000:], "abc")
	copy(a.buf[3000:], "defgh")
	eb.recv(rwr(30, b.mr.SGE(100, 64)))
	ea.post(verbs.SendWR{WRID: 31, Opcode: verbs.WRSendWithImm, Imm: 99, Flags: verbs.SendSignaled | verbs.SendInline,
		SG: []verbs.SGE{a.mr.SGE(2000, 3), a.mr.SGE(3000, 5)}})
	copy(a.buf[2000:], "XXX")
	Check(t, "inline send with imm", Poll1(t, ea.scq), Want{WRID: 31, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: 30, Op: verbs.WCRecv, Len: 8, Imm: 99, WithImm: true})
	sameBytes(t, "two inline pieces", b.buf[100:108], []byte("abcdefgh"))
}

// inlineWrite writes inline data, also copied at post time.
func inlineWrite(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	for i, n := range []int{1, 8, 60, 200, 256} {
		want1 := pattern(n, byte(i*5+1))
		copy(a.buf[500:], want1)
		id := uint64(i + 1)
		clear(b.buf[7000 : 7000+512])
		ea.post(verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline,
			SG: []verbs.SGE{a.mr.SGE(500, n)}, RemoteAddr: b.mr.Addr + 7000, RKey: b.mr.RKey})
		clear(a.buf[500 : 500+n])
		Check(t, "inline write", Poll1(t, ea.scq), Want{WRID: id, Op: verbs.WCRDMAWrite, Len: AnyLen})
		sameBytes(t, fmt.Sprintf("inline write of %d", n), b.buf[7000:7000+n], want1)
		sameBytes(t, "after it", b.buf[7000+n:7000+512], make([]byte, 512-n))
	}
}

// inlineTooBig posts more inline data than the QP allows.
func inlineTooBig(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	n, err := ea.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendInline, SG: []verbs.SGE{a.mr.SGE(0, defaultCap.MaxInline+1)}},
	})
	if n != 0 || !errors.Is(err, verbs.ErrInlineTooBig) {
		t.Errorf("inline send of %d bytes on a QP of max inline %d: %d, %v; want 0, ErrInlineTooBig", defaultCap.MaxInline+1, defaultCap.MaxInline, n, err)
	}
	Quiet(t, ea.scq, quiet, "send CQ")
}

// inlineRead: READ and atomics cannot be inline.
func inlineRead(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	r := read(1, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey)
	r.Flags |= verbs.SendInline
	postErr(t, "inline READ", ea.qp, []verbs.SendWR{write(2, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey), r}, 1, verbs.ErrInvalid)
	Check(t, "the WR before", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Quiet(t, ea.scq, quiet, "send CQ")
}

// readsBeyondMaxRD: more READs and atomics than the QP may have
// outstanding (MaxRD 1 and 4) all complete, in order.
func readsBeyondMaxRD(t *testing.T, s *suite) {
	a, b := s.pair(t)
	fill(b.buf, 0x3C)
	for _, maxRD := range []uint8{1, 4} {
		ea, eb := a.ep(nil), b.ep(nil)
		connect(t, ea, eb, &verbs.ConnectOptions{MaxRD: maxRD}, &verbs.ConnectOptions{MaxRD: maxRD})
		clear(a.buf)
		var wrs []verbs.SendWR
		for i := range 40 {
			if i%4 == 3 {
				wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled,
					SG: []verbs.SGE{a.mr.SGE(1000*i, 8)}, RemoteAddr: b.mr.Addr + 60000, RKey: b.mr.RKey, CompareAdd: 0})
				continue
			}
			w := read(uint64(i), a.mr.SGE(1000*i, 1000), b.mr.Addr+uint64(1000*i), b.mr.RKey)
			if i%2 == 0 {
				w.Flags = 0
			}
			wrs = append(wrs, w)
		}
		ea.post(wrs...)
		var exp []verbs.SendWR
		for _, w := range wrs {
			if w.Flags&verbs.SendSignaled != 0 {
				exp = append(exp, w)
			}
		}
		for i, wc := range Poll(t, ea.scq, len(exp)) {
			op, l := verbs.WCRDMARead, 1000
			if exp[i].Opcode == verbs.WRAtomicFetchAdd {
				op, l = verbs.WCFetchAdd, 8
			}
			Check(t, fmt.Sprintf("max_rd %d completion %d", maxRD, i), wc, Want{WRID: exp[i].WRID, Op: op, Len: l})
		}
		for i, w := range wrs {
			if w.Opcode == verbs.WRRDMARead {
				sameBytes(t, fmt.Sprintf("read %d", i), a.buf[1000*i:1000*i+1000], b.buf[1000*i:1000*i+1000])
			}
		}
		Quiet(t, ea.scq, quiet, "send CQ")
	}
}

// zeroLengthNoKeyCheck: a zero-length RDMA WRITE or READ transfers
// nothing, and the responder does not validate its R_Key — IBA C9-88:
// "For an HCA responder using Reliable Connection service, for each
// zero-length RDMA READ or WRITE request, the R_Key shall not be
// validated, even if the request includes Immediate data." (Linux's
// ib_srpt drains its QPs with such a write.)
func zeroLengthNoKeyCheck(t *testing.T, s *suite) {
	a, b := s.pair(t)
	{
		ea, _ := link(t, a, b)
		ea.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: 0x1234, RKey: 0x00BAD000})
		Check(t, "zero-length write with a bogus rkey", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	}
	{
		ea, _ := link(t, a, b)
		ea.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, RemoteAddr: 0x1234, RKey: 0x00BAD000})
		Check(t, "zero-length read with a bogus rkey", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMARead, Len: 0})
	}
	{
		ea, eb := link(t, a, b)
		eb.recv(rwr(3))
		ea.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 4, RKey: 0})
		Check(t, "zero-length write with imm and rkey 0", Poll1(t, ea.scq), Want{WRID: 4, Op: verbs.WCRDMAWrite, Len: AnyLen})
		Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: 3, Op: verbs.WCRecvRDMAWithImm, Len: 0, Imm: 4, WithImm: true})
	}
}

// largeTransfers: a 4 MiB WRITE, READ and SEND through many pages.
func largeTransfers(t *testing.T, s *suite) {
	a, b := s.pair(t)
	const n = 4 << 20
	abuf, bbuf := a.alloc(n), b.alloc(n)
	amr, bmr := a.reg(a.pd, abuf, allAccess), b.reg(b.pd, bbuf, allAccess)
	// A message of a thousand packets: an ACK timeout of 537 ms (14 is
	// 67 ms), as a large transfer over a lossy link wants, so that seven
	// timeouts without progress outlast a loaded machine's stalls (the
	// race detector's two daemons), not only the wire's losses.
	ea, eb := a.ep(nil), b.ep(nil)
	opts := &verbs.ConnectOptions{Timeout: 17}
	connect(t, ea, eb, opts, opts)
	fill(abuf, 0x4B)
	ea.post(write(1, amr.SGE(0, n), bmr.Addr, bmr.RKey))
	Check(t, "large write", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "large write", bbuf, abuf)
	fill(bbuf, 0x4C)
	ea.post(read(2, amr.SGE(0, n), bmr.Addr, bmr.RKey))
	Check(t, "large read", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMARead, Len: n})
	sameBytes(t, "large read", abuf, bbuf)
	fill(abuf, 0x4D)
	clear(bbuf)
	eb.recv(rwr(3, bmr.SGE(1, n-1)))
	ea.post(send(4, amr.SGE(0, n-1)))
	Check(t, "large send", Poll1(t, ea.scq), Want{WRID: 4, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "large receive", Poll1(t, eb.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: n - 1})
	sameBytes(t, "large send", bbuf[1:], abuf[:n-1])
}
