package verbs_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

func intSide(t *testing.T, dev *hca.Device) *side {
	t.Helper()
	ctx, err := verbs.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	s := &side{ctx: ctx}
	s.pd, _ = ctx.AllocPD()
	s.cq, _ = ctx.CreateCQ(256, nil)
	if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Integrity: true,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2}}); err != nil {
		t.Fatal(err)
	}
	s.buf, _ = ctx.Alloc(1 << 16)
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	return s
}

// The NVMe-oF host recipe: memory NONE, wire T10-DIF. The target READs the
// host's data through the signature rkey and gets it with PI inserted;
// WRITEs protected data back and the host's memory gets it stripped; a
// corrupted block is reported by CheckMRStatus once.
func TestHostInsertStrip(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	const iv, blocks = 512, 8
	data := host.buf[:iv*blocks]
	for i := range data {
		data[i] = byte(i*7 + i/512)
	}
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	if err != nil {
		t.Fatal(err)
	}
	wire := verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: iv, RefTag: 0x1000, RefRemap: true, AppEscape: true, ApptagCheckMask: 0xFFFF}
	register := func() {
		t.Helper()
		if err := mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, iv*blocks)}, nil); err != nil {
			t.Fatal(err)
		}
		mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xCF, Wire: wire})
		mr.IncKey()
		// Signaled, and waited for: a ULP's command SEND after it on the
		// same QP gives the same ordering.
		if _, err := host.qp.PostSend([]verbs.SendWR{{WRID: 100, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
			Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite}}); err != nil {
			t.Fatal(err)
		}
		for _, wc := range wait(t, host, 1) { // PA mode: only the signature UMR is signaled
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("registration %+v", wc)
			}
		}
	}
	register()
	// Target reads the wire stream: data with PI inserted.
	wlen := blocks * (iv + 8)
	if _, err := target.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{target.mr.SGE(0, wlen)}, RemoteAddr: 0, RKey: mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, target, 1)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != uint32(wlen) {
		t.Fatalf("read %+v", wc)
	}
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 0x1000, Escape: t10dif.EscapeApp}
	want := make([]byte, wlen)
	if _, err := t10dif.Generate(d, t10dif.Buf{Data: want}, data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(target.buf[:wlen], want) {
		t.Fatalf("wire stream differs from t10dif's insert; first tuple % x, want % x", target.buf[iv:iv+8], want[iv:iv+8])
	}
	if e, err := mr.CheckMRStatus(); e != nil || err != nil {
		t.Fatalf("status after a clean read: %+v %v", e, err)
	}
	// Re-register (LOCAL_INV first), then the target writes the stream back
	// with block 3 corrupted: the host gets the data stripped, the error
	// is reported at block 3.
	if _, err := host.qp.PostSend([]verbs.SendWR{{WRID: 101, Opcode: verbs.WRLocalInv, InvalidateRKey: mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	clear(data)
	register()
	target.buf[3*(iv+8)+100] ^= 0x40
	if _, err := target.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{target.mr.SGE(0, wlen)}, RemoteAddr: 0, RKey: mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, target, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("write %+v", wc)
	}
	// The host's CQ carries the SIG_ERR CQE: poll it (no work completion).
	var wcs [4]verbs.WC
	host.cq.Poll(wcs[:])
	e, err := mr.CheckMRStatus()
	if err != nil || e == nil || e.Type != verbs.SigBadGuard || e.Offset != 3*(iv+8) || e.Key != mr.RKey {
		t.Fatalf("status %+v %v: want a guard error at offset %d", e, err, 3*(iv+8))
	}
	if e, _ := mr.CheckMRStatus(); e != nil {
		t.Fatalf("the error was reported twice: %+v", e)
	}
	for i := range blocks {
		got, exp := data[i*iv:(i+1)*iv], target.buf[i*(iv+8):i*(iv+8)+iv]
		if !bytes.Equal(got, exp) {
			t.Fatalf("block %d not stripped into host memory", i)
		}
	}
}

// expected_sigerr_count: a registration reports only its first signature
// error; the next registration (the driver saw the error CQE and flipped
// the bit) reports the next one.
func TestSigErrOncePerRegistration(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	const iv, blocks = 512, 4
	wlen := blocks * (iv + 8)
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	if err != nil {
		t.Fatal(err)
	}
	wire := verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: iv, RefRemap: true, ApptagCheckMask: 0xFFFF}
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv}
	if _, err := t10dif.Generate(d, t10dif.Buf{Data: target.buf[:wlen]}, make([]byte, iv*blocks)); err != nil {
		t.Fatal(err)
	}
	wrid := uint64(100)
	post := func(wr verbs.SendWR, s *side) {
		t.Helper()
		wrid++
		wr.WRID = wrid
		wr.Flags |= verbs.SendSignaled
		if _, err := s.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if wc := wait(t, s, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("%v: %+v", wr.Opcode, wc)
		}
	}
	register := func(first bool) {
		t.Helper()
		if !first {
			post(verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: mr.RKey}, host)
		}
		if err := mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, iv*blocks)}, nil); err != nil {
			t.Fatal(err)
		}
		mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xCF, Wire: wire})
		mr.IncKey()
		post(verbs.SendWR{Opcode: verbs.WRRegMRIntegrity, MR: mr, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}, host)
	}
	// writeBad writes the stream with block b's guard corrupted (the flip
	// is undone afterwards), polls the host's CQ for the SIG_ERR CQE and
	// returns what CheckMRStatus then reports.
	writeBad := func(b int) *verbs.SigErr {
		t.Helper()
		target.buf[b*(iv+8)+7] ^= 0x10
		post(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SG: []verbs.SGE{target.mr.SGE(0, wlen)}, RKey: mr.RKey}, target)
		target.buf[b*(iv+8)+7] ^= 0x10
		var wcs [4]verbs.WC
		if n, _ := host.cq.Poll(wcs[:]); n != 0 {
			t.Fatalf("the signature error produced work completions %+v", wcs[:n])
		}
		e, err := mr.CheckMRStatus()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	register(true)
	if e := writeBad(1); e == nil || e.Offset != 1*(iv+8) {
		t.Fatalf("first error: %+v, want block 1", e)
	}
	if e := writeBad(2); e != nil {
		t.Fatalf("a second error under one registration was reported: %+v", e)
	}
	register(false)
	if e := writeBad(3); e == nil || e.Offset != 3*(iv+8) || e.Key != mr.RKey {
		t.Fatalf("error after re-registration: %+v, want block 3 under key %#x", e, mr.RKey)
	}
	register(false)
	if e := writeBad(0); e == nil || e.Offset != 0 || e.Key != mr.RKey {
		t.Fatalf("error after the third registration: %+v, want block 0", e)
	}
}

// Re-blocking: PI in memory every 512 bytes (separate metadata), on the
// wire every 4096. The target READs two wire blocks of 4104 bytes from the
// second 4096-byte unit on, and WRITEs them back; memory's 512-byte tuples
// are checked on the way out and regenerated on the way in, their ref tags
// counting 512-byte blocks from the key's start.
func TestReblock(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	const units, metaOff = 3, 32768
	mem := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: 512, RefTag: 100, AppTag: 5, AppTagMask: 0xFFFF}
	wire := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: 4096, RefTag: 7, AppTag: 5, AppTagMask: 0xFFFF}
	data := make([]byte, units*4096)
	for i := range data {
		data[i] = byte(i*31 + i>>7)
	}
	meta := make([]byte, units*8*8)
	dix := mem
	dix.Separate = true
	if _, err := t10dif.Generate(dix, t10dif.Buf{Data: host.buf[:len(data)], Meta: meta}, data); err != nil {
		t.Fatal(err)
	}
	copy(host.buf[metaOff:], meta)
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, len(data))}, []verbs.SGE{host.mr.SGE(metaOff, len(meta))}); err != nil {
		t.Fatal(err)
	}
	dom := func(d t10dif.Domain) verbs.SigDomain {
		return verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: uint32(d.Interval), RefTag: uint32(d.RefTag),
			AppTag: d.AppTag, RefRemap: true, ApptagCheckMask: 0xFFFF}
	}
	mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xFF, Mem: dom(mem), Wire: dom(wire)})
	mr.IncKey()
	if _, err := host.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite}}); err != nil {
		t.Fatal(err)
	}
	for _, wc := range wait(t, host, 1) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("registration %+v", wc)
		}
	}
	// The expected wire stream of units 1 and 2: ref tags 7+1, 7+2.
	wire.RefTag += 1
	want := make([]byte, 2*4104)
	if _, err := t10dif.Generate(wire, t10dif.Buf{Data: want}, data[4096:]); err != nil {
		t.Fatal(err)
	}
	post := func(op verbs.WROpcode) {
		t.Helper()
		if _, err := target.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: op, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{target.mr.SGE(0, len(want))}, RemoteAddr: 4104, RKey: mr.RKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := wait(t, target, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("%v through the re-blocking key: %+v", op, wc)
		}
	}
	post(verbs.WRRDMARead)
	if !bytes.Equal(target.buf[:len(want)], want) {
		t.Fatal("the READ's wire stream is not t10dif's 4096-byte generate")
	}
	// Back into memory: clear the host's copy of units 1 and 2 first.
	clear(host.buf[4096:len(data)])
	clear(host.buf[metaOff+64 : metaOff+len(meta)])
	post(verbs.WRRDMAWrite)
	var wcs [2]verbs.WC
	host.cq.Poll(wcs[:])
	if e, err := mr.CheckMRStatus(); e != nil || err != nil {
		t.Fatalf("status %+v %v", e, err)
	}
	if !bytes.Equal(host.buf[:len(data)], data) || !bytes.Equal(host.buf[metaOff:metaOff+len(meta)], meta) {
		t.Fatal("data or 512-byte metadata written back differ")
	}
}

// TestPartialLastBlock: an access through a signature key may end inside
// its last block (no re-blocking): the data it covers moves, and that
// block's PI, not (or not wholly) carried, is neither generated past the
// end nor checked. Here the target READs 2.5 blocks and then 1 block plus
// 4 bytes of its tuple from a host key that inserts PI on the wire.
func TestPartialLastBlock(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	const iv, blocks = 512, 4
	data := host.buf[:iv*blocks]
	for i := range data {
		data[i] = byte(i*5 + 1)
	}
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, iv*blocks)}, nil); err != nil {
		t.Fatal(err)
	}
	mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xCF, Wire: verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: iv, RefTag: 7, RefRemap: true}})
	if _, err := host.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, host, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("registration %+v", wc)
	}
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 7}
	full := make([]byte, blocks*(iv+8))
	if _, err := t10dif.Generate(d, t10dif.Buf{Data: full}, data); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2*(iv+8) + iv/2, iv + 8 + iv + 4} {
		clear(target.buf[:len(full)])
		if _, err := target.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{target.mr.SGE(0, n)}, RKey: mr.RKey}}); err != nil {
			t.Fatal(err)
		}
		if wc := wait(t, target, 1)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != uint32(n) {
			t.Fatalf("read of %d wire bytes: %+v", n, wc)
		}
		if !bytes.Equal(target.buf[:n], full[:n]) {
			t.Fatalf("read of %d wire bytes: the stream differs from t10dif's insert", n)
		}
		if target.buf[n] != 0 {
			t.Fatalf("read of %d wire bytes wrote past its end", n)
		}
	}
	if e, err := mr.CheckMRStatus(); e != nil || err != nil {
		t.Fatalf("status: %+v %v", e, err)
	}
}

// TestSigPipelining: on a QP created with SigPipelining, a WRITE whose
// memory-domain PI fails its check is completed as usual, but the fenced
// SEND after it does not run: the QP drains to SQD (EventSQDrained) and
// the SEND runs once the QP is moved back to RTS. Without the flag the SEND
// runs at once.
func TestSigPipelining(t *testing.T) {
	for _, pipelining := range []bool{true, false} {
		dev := hca.New(hca.Options{})
		host, target := intSide(t, dev), intSide(t, dev)
		// The host's QP again, with signature pipelining.
		qp, err := host.pd.CreateQP(&verbs.QPInitAttr{SendCQ: host.cq, RecvCQ: host.cq, Integrity: true, SigPipelining: pipelining,
			Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2}})
		if err != nil {
			t.Fatal(err)
		}
		host.qp = qp
		connect(t, host, target)
		const iv, blocks = 512, 2
		mem := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 9}
		data := make([]byte, iv*blocks)
		for i := range data {
			data[i] = byte(i * 3)
		}
		if _, err := t10dif.Generate(mem, t10dif.Buf{Data: host.buf[:blocks*(iv+8)]}, data); err != nil {
			t.Fatal(err)
		}
		host.buf[iv+8+5] ^= 1 // block 1's data: its guard no longer matches
		mr, err := host.pd.AllocMRIntegrity(4, 4)
		if err != nil {
			t.Fatal(err)
		}
		if err := mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, blocks*(iv+8))}, nil); err != nil {
			t.Fatal(err)
		}
		mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xFF, Mem: verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC,
			PIInterval: iv, RefTag: 9, RefRemap: true, ApptagCheckMask: 0xFFFF}})
		if _, err := host.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
			Access: verbs.AccessLocalWrite}}); err != nil {
			t.Fatal(err)
		}
		if wc := wait(t, host, 1)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("registration %+v", wc)
		}
		if _, err := target.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SG: []verbs.SGE{target.mr.SGE(8192, 16)}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := host.qp.PostSend([]verbs.SendWR{
			{WRID: 2, Opcode: verbs.WRRDMAWrite, SG: []verbs.SGE{{Addr: 0, Length: iv * blocks, LKey: mr.LKey}}, RKey: target.mr.RKey, RemoteAddr: target.mr.Addr},
			{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendFence, SG: []verbs.SGE{host.mr.SGE(4096, 16)}},
		}); err != nil {
			t.Fatal(err)
		}
		if !pipelining {
			if wc := wait(t, target, 1)[0]; wc.WRID != 7 || wc.Status != verbs.WCSuccess {
				t.Fatalf("without pipelining the SEND runs: %+v", wc)
			}
			dev.Close()
			continue
		}
		select {
		case e := <-host.ctx.AsyncEvents():
			if e.Type != hca.EventSQDrained || e.Obj != host.qp.QPN() {
				t.Fatalf("event %+v, want SQ drained of QP %#x", e, host.qp.QPN())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no SQ drained event")
		}
		var wcs [4]verbs.WC
		if n, _ := target.cq.Poll(wcs[:]); n != 0 {
			t.Fatalf("the fenced SEND ran after a signature error: %+v", wcs[:n])
		}
		if err := host.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS}); err == nil {
			t.Fatal("the driver moved a QP it thinks is in RTS to RTS")
		}
		// The driver did not move the QP to SQD itself: SQD→RTS, saying
		// so (IBV_QP_CUR_STATE).
		if err := host.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, Mask: verbs.AttrCurState, CurState: verbs.StateSQD}); err != nil {
			t.Fatal(err)
		}
		if wc := wait(t, target, 1)[0]; wc.WRID != 7 || wc.Status != verbs.WCSuccess {
			t.Fatalf("the SEND after SQD→RTS: %+v", wc)
		}
		if wc := wait(t, host, 1)[0]; wc.WRID != 3 || wc.Status != verbs.WCSuccess {
			t.Fatalf("the SEND's completion: %+v", wc)
		}
		dev.Close()
	}
}
