package hca_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

// sigFuzzIntervals are the block sizes an integrity MR takes.
var sigFuzzIntervals = [...]uint32{512, 520, 4048, 4096, 4160}

// sigNode is one side of FuzzSigPath: a context, a CQ, a QP and a buffer
// registered for local and remote write.
type sigNode struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

func newSigNode(t *testing.T, dev *hca.Device, integrity bool, size int) *sigNode {
	ctx, err := verbs.Open(dev)
	require.NoError(t, err)
	t.Cleanup(func() { ctx.Close() })
	n := &sigNode{ctx: ctx}
	n.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	n.cq, err = ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq, Integrity: integrity,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	buf, err := ctx.Alloc(size)
	require.NoError(t, err)
	n.mr, err = n.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	return n
}

// one waits for exactly one work completion on n's CQ and checks that no
// second one follows.
func (n *sigNode) one(t *testing.T, what string) verbs.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 2)
	k, err := n.cq.PollWait(ctx, wcs, 1)
	require.NoError(t, err, "%s: no completion", what)
	k2, err := n.cq.Poll(wcs[k:])
	require.NoError(t, err)
	require.Equal(t, 1, k+k2, "%s: completions %+v", what, wcs[:k+k2])
	return wcs[0]
}

// FuzzSigPath fuzzes the integrity data path: signature attributes from
// knobs (block size, guard type, check mask, tags, ref remap, escapes,
// one or two blocks) and the bytes of the transfer. The host registers an
// integrity MR over plain memory (wire domain T10-DIF, memory domain
// none) and either WRITEs data out through its LKey (PI inserted) or the
// target WRITEs fuzzed wire bytes in through its RKey (PI checked and
// stripped). Invariants: no panic or hang; attributes are taken or refused
// with an error; every signaled WR completes exactly once, successfully;
// inserted PI verifies with package t10dif; an incoming stream is
// reported by CheckMRStatus (after the host's CQ is polled) as bad
// exactly when t10dif refuses it, and a good one lands stripped.
func FuzzSigPath(f *testing.F) {
	f.Add(uint64(0), []byte("hello"))
	f.Add(uint64(1)|0xFF<<8|1<<16, []byte{1, 2, 3})
	f.Add(uint64(3)|0xC0<<8|1<<17|1<<18, make([]byte, 1040))
	f.Add(uint64(2)|0x0F<<8|1<<16|1<<19|1<<20|0x42<<24, []byte{0xFF, 0xFF})
	f.Fuzz(func(t *testing.T, knobs uint64, payload []byte) {
		iv := sigFuzzIntervals[int(knobs&7)%len(sigFuzzIntervals)]
		check := uint8(knobs >> 8)
		strip := knobs&(1<<16) != 0 // the target writes into the MR
		wire := verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: iv,
			RefRemap: knobs&(1<<18) != 0, AppEscape: knobs&(1<<19) != 0, RefEscape: knobs&(1<<20) != 0,
			AppTag: uint16(knobs >> 24), RefTag: uint32(knobs >> 40), ApptagCheckMask: 0xFFFF}
		if knobs&(1<<17) != 0 {
			wire.BgType = verbs.BgCSUM
		}
		blocks := 1 + int(knobs>>21&1)
		dataLen, wireLen := blocks*int(iv), blocks*(int(iv)+8)

		dev := hca.New(hca.Options{TimeScale: 100})
		t.Cleanup(func() { dev.Close() })
		host := newSigNode(t, dev, true, 2*(4160+8))
		target := newSigNode(t, dev, false, 2*(4160+8))
		require.NoError(t, host.qp.Connect(target.qp.Info(), nil))
		require.NoError(t, target.qp.Connect(host.qp.Info(), nil))

		imr, err := host.pd.AllocMRIntegrity(1, 1)
		require.NoError(t, err)
		require.NoError(t, imr.MapSGPI([]verbs.SGE{host.mr.SGE(0, dataLen)}, nil))
		if err := imr.SetSigAttrs(verbs.SigAttrs{CheckMask: check, Wire: wire}); err != nil {
			return // refused with an error: fine
		}
		_, err = host.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled,
			MR: imr, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}})
		require.NoError(t, err, "register")
		require.Equal(t, verbs.WCSuccess, host.one(t, "register").Status, "register")

		// The oracle's view of the wire domain.
		d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: int(iv), RefTag: uint64(wire.RefTag),
			AppTag: wire.AppTag, AppTagMask: wire.ApptagCheckMask, Ref: t10dif.RefConstant, Escape: t10dif.EscapeNone}
		if wire.RefRemap {
			d.Ref = t10dif.RefIncrement
		}
		if wire.BgType == verbs.BgCSUM {
			d.Guard = t10dif.GuardIPChecksum
		}
		switch {
		case wire.AppEscape && wire.RefEscape:
			d.Escape = t10dif.EscapeAppRef
		case wire.AppEscape:
			d.Escape = t10dif.EscapeApp
		}

		if !strip {
			data := host.mr.Buf[:dataLen]
			for i := range data {
				if len(payload) > 0 {
					data[i] = payload[i%len(payload)]
				}
			}
			_, err = host.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SG: []verbs.SGE{{Addr: 0, Length: uint32(wireLen), LKey: imr.LKey}}, RemoteAddr: target.mr.Addr, RKey: target.mr.RKey}})
			require.NoError(t, err, "write out")
			require.Equal(t, verbs.WCSuccess, host.one(t, "write out").Status, "write out")
			out := target.mr.Buf[:wireLen]
			require.NoError(t, t10dif.Verify(d, t10dif.CheckAll, t10dif.Buf{Data: out}), "inserted PI")
			for b := range blocks {
				require.Equal(t, data[b*int(iv):(b+1)*int(iv)], out[b*(int(iv)+8):b*(int(iv)+8)+int(iv)], "block %d's data", b)
			}
			e, err := imr.CheckMRStatus()
			require.NoError(t, err)
			require.Nil(t, e, "a WRITE out reports no signature error")
			return
		}

		in := target.mr.Buf[:wireLen]
		for i := range in {
			if len(payload) > 0 {
				in[i] = payload[i%len(payload)]
			}
		}
		// Half the inputs carry valid PI (bit 22), so that both answers
		// are reached; the payload may still corrupt the tuple's bytes
		// the check ignores.
		if knobs&(1<<22) != 0 {
			require.NoError(t, t10dif.GenerateInPlace(d, t10dif.Buf{Data: in}))
		}
		want := t10dif.Verify(d, t10dif.CheckMask(check), t10dif.Buf{Data: in})
		_, err = target.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{target.mr.SGE(0, wireLen)}, RemoteAddr: 0, RKey: imr.RKey}})
		require.NoError(t, err, "write in")
		require.Equal(t, verbs.WCSuccess, target.one(t, "write in").Status, "write in (a PI error is the host's, not the writer's)")
		// The SIG_ERR CQE, if any, is the host's: polling takes it.
		var wcs [4]verbs.WC
		k, err := host.cq.Poll(wcs[:])
		require.NoError(t, err)
		require.Zero(t, k, "the host's CQ: %+v", wcs[:k])
		e, err := imr.CheckMRStatus()
		require.NoError(t, err)
		if want != nil {
			require.NotNil(t, e, "t10dif refuses the stream (%v), the device reported nothing", want)
			return
		}
		require.Nil(t, e, "t10dif accepts the stream, the device reported %+v", e)
		for b := range blocks {
			require.Equal(t, in[b*(int(iv)+8):b*(int(iv)+8)+int(iv)], host.mr.Buf[b*int(iv):(b+1)*int(iv)], "block %d stripped", b)
		}
	})
}
