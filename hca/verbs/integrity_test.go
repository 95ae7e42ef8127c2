package verbs_test

import (
	"bytes"
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

func intSide(t *testing.T, dev *hca.Device) *side {
	t.Helper()
	ctx, err := verbs.Open(dev)
	require.NoError(t, err, "open")
	t.Cleanup(func() { ctx.Close() })
	s := &side{ctx: ctx}
	s.pd, _ = ctx.AllocPD()
	s.cq, _ = ctx.CreateCQ(256, nil)
	s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Integrity: true,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2}})
	require.NoError(t, err, "create integrity QP")
	s.buf, _ = ctx.Alloc(1 << 16)
	s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err, "register MR")
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
	require.NoError(t, err, "alloc integrity MR")
	wire := verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: iv, RefTag: 0x1000, RefRemap: true, AppEscape: true, ApptagCheckMask: 0xFFFF}
	register := func() {
		t.Helper()
		require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, iv*blocks)}, nil), "map SG/PI")
		mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xCF, Wire: wire})
		mr.IncKey()
		// Signaled, and waited for: a ULP's command SEND after it on the
		// same QP gives the same ordering.
		_, err := host.qp.PostSend([]verbs.SendWR{{WRID: 100, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
			Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite}})
		require.NoError(t, err, "post registration")
		wc := wait(t, host, 1)[0] // PA mode: only the signature UMR is signaled
		require.Equal(t, verbs.WCSuccess, wc.Status, "registration %s", hcatest.FormatWC(wc))
	}
	register()
	// Target reads the wire stream: data with PI inserted.
	wlen := blocks * (iv + 8)
	_, err = target.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{target.mr.SGE(0, wlen)}, RemoteAddr: 0, RKey: mr.RKey}})
	require.NoError(t, err, "post read")
	hcatest.Check(t, "read", wait(t, target, 1)[0], hcatest.Want{WRID: 1, Op: verbs.WCRDMARead, Len: wlen})
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 0x1000, Escape: t10dif.EscapeApp}
	want := make([]byte, wlen)
	_, err = t10dif.Generate(d, t10dif.Buf{Data: want}, data)
	require.NoError(t, err, "t10dif generate")
	require.True(t, bytes.Equal(target.buf[:wlen], want),
		"wire stream differs from t10dif's insert; first tuple % x, want % x", target.buf[iv:iv+8], want[iv:iv+8])
	e, err := mr.CheckMRStatus()
	require.NoError(t, err, "status after a clean read")
	require.Nil(t, e, "status after a clean read")
	// Re-register (LOCAL_INV first), then the target writes the stream back
	// with block 3 corrupted: the host gets the data stripped, the error
	// is reported at block 3.
	_, err = host.qp.PostSend([]verbs.SendWR{{WRID: 101, Opcode: verbs.WRLocalInv, InvalidateRKey: mr.RKey}})
	require.NoError(t, err, "post local invalidate")
	clear(data)
	register()
	target.buf[3*(iv+8)+100] ^= 0x40
	_, err = target.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{target.mr.SGE(0, wlen)}, RemoteAddr: 0, RKey: mr.RKey}})
	require.NoError(t, err, "post write")
	wc := wait(t, target, 1)[0]
	require.Equal(t, verbs.WCSuccess, wc.Status, "write %s", hcatest.FormatWC(wc))
	// The host's CQ carries the SIG_ERR CQE: poll it (no work completion).
	var wcs [4]verbs.WC
	host.cq.Poll(wcs[:])
	e, err = mr.CheckMRStatus()
	require.NoError(t, err, "status: want a guard error at offset %d", 3*(iv+8))
	require.NotNil(t, e, "status: want a guard error at offset %d", 3*(iv+8))
	require.Equal(t, verbs.SigBadGuard, e.Type, "status %+v: want a guard error at offset %d", e, 3*(iv+8))
	require.Equal(t, uint64(3*(iv+8)), e.Offset, "status %+v: want a guard error at offset %d", e, 3*(iv+8))
	require.Equal(t, mr.RKey, e.Key, "status %+v: want a guard error at offset %d", e, 3*(iv+8))
	e, _ = mr.CheckMRStatus()
	require.Nil(t, e, "the error was reported twice")
	for i := range blocks {
		got, exp := data[i*iv:(i+1)*iv], target.buf[i*(iv+8):i*(iv+8)+iv]
		require.True(t, bytes.Equal(got, exp), "block %d not stripped into host memory", i)
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
	require.NoError(t, err, "alloc integrity MR")
	wire := verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: iv, RefRemap: true, ApptagCheckMask: 0xFFFF}
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv}
	_, err = t10dif.Generate(d, t10dif.Buf{Data: target.buf[:wlen]}, make([]byte, iv*blocks))
	require.NoError(t, err, "t10dif generate")
	wrid := uint64(100)
	post := func(wr verbs.SendWR, s *side) {
		t.Helper()
		wrid++
		wr.WRID = wrid
		wr.Flags |= verbs.SendSignaled
		_, err := s.qp.PostSend([]verbs.SendWR{wr})
		require.NoError(t, err, "post %v", wr.Opcode)
		wc := wait(t, s, 1)[0]
		require.Equal(t, verbs.WCSuccess, wc.Status, "%v: %s", wr.Opcode, hcatest.FormatWC(wc))
	}
	register := func(first bool) {
		t.Helper()
		if !first {
			post(verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: mr.RKey}, host)
		}
		require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, iv*blocks)}, nil), "map SG/PI")
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
		n, _ := host.cq.Poll(wcs[:])
		require.Zero(t, n, "the signature error produced work completions %s", hcatest.FormatWCs(wcs[:n]))
		e, err := mr.CheckMRStatus()
		require.NoError(t, err, "check MR status after block %d", b)
		return e
	}
	register(true)
	e := writeBad(1)
	require.NotNil(t, e, "first error: want block 1")
	require.Equal(t, uint64(1*(iv+8)), e.Offset, "first error: %+v, want block 1", e)
	e = writeBad(2)
	require.Nil(t, e, "a second error under one registration was reported")
	register(false)
	e = writeBad(3)
	require.NotNil(t, e, "error after re-registration: want block 3 under key %#x", mr.RKey)
	require.Equal(t, uint64(3*(iv+8)), e.Offset, "error after re-registration: %+v, want block 3 under key %#x", e, mr.RKey)
	require.Equal(t, mr.RKey, e.Key, "error after re-registration: %+v, want block 3 under key %#x", e, mr.RKey)
	register(false)
	e = writeBad(0)
	require.NotNil(t, e, "error after the third registration: want block 0")
	require.Zero(t, e.Offset, "error after the third registration: %+v, want block 0", e)
	require.Equal(t, mr.RKey, e.Key, "error after the third registration: %+v, want block 0", e)
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
	_, err := t10dif.Generate(dix, t10dif.Buf{Data: host.buf[:len(data)], Meta: meta}, data)
	require.NoError(t, err, "t10dif generate (memory, separate metadata)")
	copy(host.buf[metaOff:], meta)
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err, "alloc integrity MR")
	require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, len(data))}, []verbs.SGE{host.mr.SGE(metaOff, len(meta))}), "map SG/PI")
	dom := func(d t10dif.Domain) verbs.SigDomain {
		return verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: uint32(d.Interval), RefTag: uint32(d.RefTag),
			AppTag: d.AppTag, RefRemap: true, ApptagCheckMask: 0xFFFF}
	}
	mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xFF, Mem: dom(mem), Wire: dom(wire)})
	mr.IncKey()
	_, err = host.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite}})
	require.NoError(t, err, "post registration")
	wc := wait(t, host, 1)[0]
	require.Equal(t, verbs.WCSuccess, wc.Status, "registration %s", hcatest.FormatWC(wc))
	// The expected wire stream of units 1 and 2: ref tags 7+1, 7+2.
	wire.RefTag += 1
	want := make([]byte, 2*4104)
	_, err = t10dif.Generate(wire, t10dif.Buf{Data: want}, data[4096:])
	require.NoError(t, err, "t10dif generate (wire)")
	post := func(op verbs.WROpcode) {
		t.Helper()
		_, err := target.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: op, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{target.mr.SGE(0, len(want))}, RemoteAddr: 4104, RKey: mr.RKey}})
		require.NoError(t, err, "post %v", op)
		wc := wait(t, target, 1)[0]
		require.Equal(t, verbs.WCSuccess, wc.Status, "%v through the re-blocking key: %s", op, hcatest.FormatWC(wc))
	}
	post(verbs.WRRDMARead)
	require.True(t, bytes.Equal(target.buf[:len(want)], want), "the READ's wire stream is not t10dif's 4096-byte generate")
	// Back into memory: clear the host's copy of units 1 and 2 first.
	clear(host.buf[4096:len(data)])
	clear(host.buf[metaOff+64 : metaOff+len(meta)])
	post(verbs.WRRDMAWrite)
	var wcs [2]verbs.WC
	host.cq.Poll(wcs[:])
	e, err := mr.CheckMRStatus()
	require.NoError(t, err, "status")
	require.Nil(t, e, "status")
	require.True(t, bytes.Equal(host.buf[:len(data)], data), "data written back differ")
	require.True(t, bytes.Equal(host.buf[metaOff:metaOff+len(meta)], meta), "512-byte metadata written back differ")
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
	require.NoError(t, err, "alloc integrity MR")
	require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, iv*blocks)}, nil), "map SG/PI")
	mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xCF, Wire: verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: iv, RefTag: 7, RefRemap: true}})
	_, err = host.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead}})
	require.NoError(t, err, "post registration")
	wc := wait(t, host, 1)[0]
	require.Equal(t, verbs.WCSuccess, wc.Status, "registration %s", hcatest.FormatWC(wc))
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 7}
	full := make([]byte, blocks*(iv+8))
	_, err = t10dif.Generate(d, t10dif.Buf{Data: full}, data)
	require.NoError(t, err, "t10dif generate")
	for _, n := range []int{2*(iv+8) + iv/2, iv + 8 + iv + 4} {
		clear(target.buf[:len(full)])
		_, err := target.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{target.mr.SGE(0, n)}, RKey: mr.RKey}})
		require.NoError(t, err, "post read of %d wire bytes", n)
		hcatest.Check(t, fmt.Sprintf("read of %d wire bytes", n), wait(t, target, 1)[0], hcatest.Want{WRID: 2, Op: verbs.WCRDMARead, Len: n})
		require.True(t, bytes.Equal(target.buf[:n], full[:n]), "read of %d wire bytes: the stream differs from t10dif's insert", n)
		require.Zero(t, target.buf[n], "read of %d wire bytes wrote past its end", n)
	}
	e, err := mr.CheckMRStatus()
	require.NoError(t, err, "status")
	require.Nil(t, e, "status")
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
		require.NoError(t, err, "create QP (pipelining %v)", pipelining)
		host.qp = qp
		connect(t, host, target)
		const iv, blocks = 512, 2
		mem := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 9}
		data := make([]byte, iv*blocks)
		for i := range data {
			data[i] = byte(i * 3)
		}
		_, err = t10dif.Generate(mem, t10dif.Buf{Data: host.buf[:blocks*(iv+8)]}, data)
		require.NoError(t, err, "t10dif generate")
		host.buf[iv+8+5] ^= 1 // block 1's data: its guard no longer matches
		mr, err := host.pd.AllocMRIntegrity(4, 4)
		require.NoError(t, err, "alloc integrity MR")
		require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, blocks*(iv+8))}, nil), "map SG/PI")
		mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xFF, Mem: verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC,
			PIInterval: iv, RefTag: 9, RefRemap: true, ApptagCheckMask: 0xFFFF}})
		_, err = host.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
			Access: verbs.AccessLocalWrite}})
		require.NoError(t, err, "post registration")
		wc := wait(t, host, 1)[0]
		require.Equal(t, verbs.WCSuccess, wc.Status, "registration %s", hcatest.FormatWC(wc))
		_, err = target.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SG: []verbs.SGE{target.mr.SGE(8192, 16)}}})
		require.NoError(t, err, "post recv")
		_, err = host.qp.PostSend([]verbs.SendWR{
			{WRID: 2, Opcode: verbs.WRRDMAWrite, SG: []verbs.SGE{{Addr: 0, Length: iv * blocks, LKey: mr.LKey}}, RKey: target.mr.RKey, RemoteAddr: target.mr.Addr},
			{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendFence, SG: []verbs.SGE{host.mr.SGE(4096, 16)}},
		})
		require.NoError(t, err, "post write and fenced send")
		if !pipelining {
			hcatest.Check(t, "without pipelining the SEND runs", wait(t, target, 1)[0], hcatest.Want{WRID: 7, Op: verbs.WCRecv, Len: 16})
			dev.Close()
			continue
		}
		select {
		case e := <-host.ctx.AsyncEvents():
			require.Equal(t, ifc.Event{Type: ifc.EventSQDrained, Obj: host.qp.QPN()}, e, "want SQ drained of QP %#x", host.qp.QPN())
		case <-time.After(5 * time.Second):
			require.Fail(t, "no SQ drained event")
		}
		var wcs [4]verbs.WC
		n, _ := target.cq.Poll(wcs[:])
		require.Zero(t, n, "the fenced SEND ran after a signature error: %s", hcatest.FormatWCs(wcs[:n]))
		require.Error(t, host.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS}), "the driver moved a QP it thinks is in RTS to RTS")
		// The driver did not move the QP to SQD itself: SQD→RTS, saying
		// so (IBV_QP_CUR_STATE).
		require.NoError(t, host.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, Mask: verbs.AttrCurState, CurState: verbs.StateSQD}), "SQD→RTS")
		hcatest.Check(t, "the SEND after SQD→RTS", wait(t, target, 1)[0], hcatest.Want{WRID: 7, Op: verbs.WCRecv, Len: 16})
		hcatest.Check(t, "the SEND's completion", wait(t, host, 1)[0], hcatest.Want{WRID: 3, Op: verbs.WCSend, Len: hcatest.AnyLen})
		dev.Close()
	}
}
