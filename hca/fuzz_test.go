package hca_test

import (
	"encoding/binary"
	"github.com/hcasim/hcasim/hca/ifc"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/sq"
)

// FuzzCommand: any mailbox gets an output with a status, never a panic; a
// successful create can be undone.
func FuzzCommand(f *testing.F) {
	for _, op := range []uint16{ifc.CmdQueryHCACap, ifc.CmdAllocPD, ifc.CmdCreateMkey, ifc.CmdCreateCQ, ifc.CmdCreateQP,
		ifc.CmdRST2INIT, ifc.CmdCreatePSV, ifc.CmdDestroyQP, ifc.CmdCreateSRQ, ifc.CmdDestroySRQ, ifc.CmdQuerySRQ, ifc.CmdArmRQ, ifc.CmdModifyCQ, 0xFFFF} {
		f.Add([]byte(ifc.NewIn(op, 64)))
	}
	// A valid UC and UD CREATE_QP on the fixture's PD and CQ, and one with a
	// transport the device does not have.
	for _, typ := range []uint8{ifc.QPTypeUC, ifc.QPTypeUD, ifc.QPTypeXRC, 7} {
		f.Add([]byte(ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSize).Put32(ifc.QPInPD, 1).Put32(ifc.QPInSendCQ, 1).Put32(ifc.QPInRecvCQ, 1).
			Put8(ifc.QPInLogSQ, 4).Put8(ifc.QPInLogRQ, 4).Put8(ifc.QPInLogStride, 4).Put8(ifc.QPInType, typ).Put64(ifc.QPInSQ, 0x10000).Put64(ifc.QPInRQ, 0x20000).Put64(ifc.QPInDBRec, 0x30000)))
	}
	// XRC: a target of the fixture's domain (1), an XRC SRQ of it on its
	// CQ, a domain freed while used.
	f.Add([]byte(ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSizeXRC).Put8(ifc.QPInType, ifc.QPTypeXRC).Put32(ifc.QPInXRCD, 1).Put8(ifc.QPInLogStride, 4)))
	f.Add([]byte(ifc.NewIn(ifc.CmdCreateSRQ, ifc.SRQInSizeXRC).Put32(ifc.SRQInPD, 1).Put8(ifc.SRQInLogSize, 4).Put8(ifc.SRQInLogStride, 5).
		Put64(ifc.SRQInRing, 0x10000).Put64(ifc.SRQInDBRec, 0x18000).Put32(ifc.SRQInXRCD, 1).Put32(ifc.SRQInCQN, 1)))
	f.Add([]byte(ifc.NewIn(ifc.CmdDeallocXRCD, 12).Put32(ifc.XRCDOff, 1)))
	f.Add([]byte(ifc.NewIn(ifc.CmdAllocXRCD, 8)))
	// Raw packet: a work queue (no send queue) and an RSS QP over a table
	// of two entries naming QPN 0x100 (the fixture has none).
	f.Add([]byte(ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSize).Put32(ifc.QPInPD, 1).Put32(ifc.QPInSendCQ, 1).Put32(ifc.QPInRecvCQ, 1).
		Put32(ifc.QPInFlags, ifc.QPFlagNoSQ).Put8(ifc.QPInLogRQ, 4).Put8(ifc.QPInLogStride, 4).Put8(ifc.QPInType, ifc.QPTypeRaw).
		Put64(ifc.QPInRQ, 0x20000).Put64(ifc.QPInDBRec, 0x30000)))
	f.Add([]byte(ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSizeRSS+8).Put32(ifc.QPInPD, 1).Put32(ifc.QPInFlags, ifc.QPFlagRSS).
		Put8(ifc.QPInLogStride, 4).Put8(ifc.QPInType, ifc.QPTypeRaw).Put8(ifc.QPInRSSFunc, 1).Put8(ifc.QPInRSSKeyLen, ifc.RSSKeySize).
		Put8(ifc.QPInRSSLogTbl, 1).Put32(ifc.QPInRSSWQNs, 0x100).Put32(ifc.QPInRSSWQNs+4, 0x100)))
	f.Fuzz(func(t *testing.T, in []byte) {
		dev := hca.New(hca.Options{})
		defer dev.Close()
		fn, err := dev.Open()
		require.NoError(t, err)
		// Some objects for the command to refer to.
		fn.Command(ifc.NewIn(ifc.CmdAllocPD, 8))
		buf, iova, _ := fn.AllocDMA(1<<16, 4096)
		_ = buf
		fn.Command(ifc.NewIn(ifc.CmdCreateCQ, ifc.CQInSize).Put8(ifc.CQInLogSize, 4).Put64(ifc.CQInRing, iova).Put64(ifc.CQInDBRec, iova+4096))
		fn.Command(ifc.NewIn(ifc.CmdAllocXRCD, 8))
		out := ifc.Out(fn.Command(in))
		require.GreaterOrEqual(t, len(out), ifc.OutHeaderSize, "output too short")
		require.NotEqual(t, ifc.StatusIntErr, out.Status(), "internal error: %s", out[8:])
		require.NoError(t, fn.Close())
	})
}

// FuzzWQE: random bytes posted as WQEs, then a signaled NOP: the NOP
// completes (successfully, or flushed after an error) before a deadline;
// the device never panics or hangs.
func FuzzWQE(f *testing.F) {
	nop := make([]byte, 64)
	sq.CtrlSeg(nop).Encode(&sq.CtrlFields{Opcode: sq.OpNOP, DS: 1, CE: sq.CECQUpdate})
	f.Add(nop, uint8(1))
	wr := make([]byte, 64)
	sq.CtrlSeg(wr).Encode(&sq.CtrlFields{Opcode: sq.OpRDMAWrite, DS: 3, CE: sq.CECQUpdate})
	f.Add(wr, uint8(2))
	f.Add([]byte{0x00, 0x00, 0x00, 0x25, 0, 0, 0, 0x10}, uint8(1))
	// On an XRC initiator (copies bit 7): a SEND with its XRC segment, and
	// one without (the XRC segment then reads the SGE).
	xs := make([]byte, 64)
	sq.CtrlSeg(xs).Encode(&sq.CtrlFields{Opcode: sq.OpSend, DS: 3, CE: sq.CECQUpdate})
	sq.XRCSeg(xs[sq.CtrlSegSize:]).Encode(1)
	f.Add(xs, uint8(0x80|1))
	f.Add(wr, uint8(0x80|2))
	// On a raw packet QP (copies bit 6): a frame with an 18-byte inline
	// header and one SGE, and the RDMA WRITE (its raddr read as the
	// Ethernet segment).
	rs := make([]byte, 64)
	sq.CtrlSeg(rs).Encode(&sq.CtrlFields{Opcode: sq.OpSend, DS: 4, CE: sq.CECQUpdate})
	sq.EthSeg(rs[sq.CtrlSegSize:]).Encode(make([]byte, 18), 0)
	sq.DataSeg(rs[sq.CtrlSegSize+32:]).Encode(&sq.DataFields{ByteCount: 64, LKey: 0x100, Addr: 0x10000})
	f.Add(rs, uint8(0x40|1))
	f.Add(wr, uint8(0x40|2))
	f.Fuzz(func(t *testing.T, raw []byte, copies uint8) {
		if len(raw) > sq.MaxWQEBBs*sq.WQEBBSize {
			raw = raw[:sq.MaxWQEBBs*sq.WQEBBSize]
		}
		dev := hca.New(hca.Options{TimeScale: 1000})
		defer dev.Close()
		ctx, err := verbs.Open(dev)
		require.NoError(t, err)
		defer ctx.Close()
		pd, _ := ctx.AllocPD()
		cq, err := ctx.CreateCQ(1024, nil)
		require.NoError(t, err)
		typ := verbs.QPTypeRC
		switch {
		case copies&0x80 != 0:
			typ = verbs.QPTypeXRCSend
		case copies&0x40 != 0:
			typ = verbs.QPTypeRaw // its frames loop back to it through a sniffer
		}
		qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 2}})
		require.NoError(t, err)
		opts := &verbs.ConnectOptions{Timeout: 1, RetryCnt: 1, RNRRetry: 1, MinRNRTimer: 1}
		if typ == verbs.QPTypeXRCSend {
			// Its peer: a target of a domain whose SRQ (number 1) holds a receive.
			x, err := ctx.AllocXRCD()
			require.NoError(t, err)
			srq, err := pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1, XRCD: x, CQ: cq})
			require.NoError(t, err)
			buf, err := ctx.Alloc(4096)
			require.NoError(t, err)
			mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
			require.NoError(t, err)
			_, err = srq.PostRecv([]verbs.RecvWR{{WRID: 1 << 40, SG: []verbs.SGE{mr.SGE(0, 4096)}}})
			require.NoError(t, err)
			tgt, err := x.CreateTarget()
			require.NoError(t, err)
			require.NoError(t, tgt.Connect(qp.Info(), opts))
			require.NoError(t, qp.Connect(tgt.Info(), opts))
		} else {
			require.NoError(t, qp.Connect(qp.Info(), opts))
		}
		if typ == verbs.QPTypeRaw {
			_, err := qp.CreateFlow(&verbs.FlowAttr{Kind: verbs.FlowSniffer})
			require.NoError(t, err)
		}
		posted := 0
		for range max(int(copies%8), 1) {
			w := append([]byte(nil), raw...)
			if len(w) >= 4 {
				// Keep the driver's index in the WQE index field so CQEs map back.
				idx := qp.CurPost()
				binary.BigEndian.PutUint16(w[1:3], idx)
			}
			if qp.PostRawWQE(w, uint64(posted)) != nil {
				break
			}
			posted++
		}
		if _, err := qp.PostSend([]verbs.SendWR{{WRID: 999, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, XRCSRQN: 1}}); err != nil {
			t.Skip("no room for the final WR:", err)
		}
		wcs := make([]verbs.WC, 64)
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, _ := cq.Poll(wcs)
			for _, wc := range wcs[:n] {
				if wc.WRID == 999 {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the final WR did not complete; QP state %v", qp.State())
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
}

// FuzzFlow: any CREATE_FLOW specs on a raw packet QP, then any frame sent
// from another: the command answers with a status (never INT_ERR), the
// send completes, and a frame a sniffer or a matching rule takes arrives
// whole.
func FuzzFlow(f *testing.F) {
	eth := make([]byte, 4+32)
	binary.BigEndian.PutUint16(eth, ifc.FlowSpecEth)
	binary.BigEndian.PutUint16(eth[2:], 36)
	copy(eth[4:], []byte{1, 0x50, 0x56, 0x19, 0x20, 0xa7})
	copy(eth[4+16:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	frame := append([]byte{1, 0x50, 0x56, 0x19, 0x20, 0xa7, 2, 2, 2, 2, 2, 2, 0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0,
		1, 1, 1, 1, 2, 2, 2, 2, 0x04, 0xd2, 0x16, 0x2e, 0, 8, 0, 0}, make([]byte, 20)...)
	f.Add(eth, uint8(ifc.FlowNormal), uint8(1), frame)
	f.Add([]byte{}, uint8(ifc.FlowSniffer), uint8(0), frame)
	f.Add([]byte{0x10, 0x01, 0, 4}, uint8(ifc.FlowNormal), uint8(1), frame[:14])
	f.Add([]byte{0, 0x40, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(ifc.FlowAllDef), uint8(1), []byte{0x81, 0})
	f.Fuzz(func(t *testing.T, specs []byte, kind, n uint8, frame []byte) {
		if len(specs) > 4096 || len(frame) > 8192 {
			return
		}
		dev := hca.New(hca.Options{})
		defer dev.Close()
		ctx, err := verbs.Open(dev)
		require.NoError(t, err)
		defer ctx.Close()
		pd, _ := ctx.AllocPD()
		cq, err := ctx.CreateCQ(64, nil)
		require.NoError(t, err)
		var qps [2]*verbs.QP
		for i := range qps {
			qps[i], err = pd.CreateQP(&verbs.QPInitAttr{Type: verbs.QPTypeRaw, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			require.NoError(t, err)
			require.NoError(t, qps[i].Connect(qps[i].Info(), nil))
		}
		in := ifc.NewIn(ifc.CmdCreateFlow, ifc.FlowInSpecs+len(specs)).Put32(ifc.FlowInQPN, qps[1].QPN()).Put8(ifc.FlowInKind, kind).Put8(ifc.FlowInNumSpecs, n)
		copy(in[ifc.FlowInSpecs:], specs)
		out := ifc.Out(ctx.Function().Command(in))
		require.NotEqual(t, ifc.StatusIntErr, out.Status(), "internal error: %s", out[8:])
		buf, err := ctx.Alloc(16384)
		require.NoError(t, err)
		mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
		require.NoError(t, err)
		_, err = qps[1].PostRecv([]verbs.RecvWR{{WRID: 2, SG: []verbs.SGE{mr.SGE(8192, 8192)}}})
		require.NoError(t, err)
		copy(buf, frame)
		_, err = qps[0].PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SG: []verbs.SGE{mr.SGE(0, len(frame))}}})
		require.NoError(t, err)
		wcs := make([]verbs.WC, 4)
		deadline := time.Now().Add(10 * time.Second)
		// A sniffer takes every frame the device sends (a whole header).
		mustRecv := out.Status() == ifc.StatusOK && kind == ifc.FlowSniffer && len(frame) >= 14
		sent, got := false, false
		for !sent || mustRecv && !got {
			k, _ := cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.WRID == 2 {
					require.Equal(t, uint32(len(frame)), wc.ByteLen)
					require.Equal(t, frame, buf[8192:8192+len(frame)])
					got = true
				}
				sent = sent || wc.WRID == 1
			}
			require.False(t, time.Now().After(deadline), "the send (or the sniffer's receive) did not complete")
			time.Sleep(10 * time.Microsecond)
		}
	})
}
