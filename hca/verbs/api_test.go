package verbs_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

// regInteg posts a signaled REG_MR_INTEGRITY of mr on s and waits for its
// completion (PA mode: one signaled WQE).
func regInteg(t *testing.T, s *side, mr *verbs.MR, access verbs.Access) {
	t.Helper()
	mr.IncKey()
	_, err := s.qp.PostSend([]verbs.SendWR{{WRID: 900, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled, Access: access}})
	require.NoError(t, err)
	wc := wait(t, s, 1)[0]
	require.Equal(t, verbs.WCSuccess, wc.Status, "registration %+v", wc)
}

// readWire READs n wire bytes through key into target's buffer at 0.
func readWire(t *testing.T, target *side, key uint32, n int) verbs.WC {
	t.Helper()
	clear(target.buf[:n+1])
	_, err := target.qp.PostSend([]verbs.SendWR{{WRID: 901, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{target.mr.SGE(0, n)}, RKey: key}})
	require.NoError(t, err)
	return wait(t, target, 1)[0]
}

// fieldOf returns the field a *verbs.FieldError in err names ("" if none).
func fieldOf(err error) string {
	var fe *verbs.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

func TestSetSigAttrsValidation(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, 4096)}, nil))
	good := verbs.T10DIFDomain(verbs.DIFType1, 512, 0x100)
	for _, c := range []struct {
		name  string
		edit  func(a *verbs.SigAttrs)
		field string
	}{
		{"interval 0", func(a *verbs.SigAttrs) { a.Wire.PIInterval = 0 }, "Wire.PIInterval"},
		{"interval 1024", func(a *verbs.SigAttrs) { a.Wire.PIInterval = 1024 }, "Wire.PIInterval"},
		{"memory interval 8192", func(a *verbs.SigAttrs) { a.Mem = good; a.Mem.PIInterval = 8192 }, "Mem.PIInterval"},
		{"1 GiB interval (a selector, not a capability)", func(a *verbs.SigAttrs) { a.Wire.PIInterval = 1 << 30 }, "Wire.PIInterval"},
		{"guard type", func(a *verbs.SigAttrs) { a.Wire.BgType = 2 }, "Wire.BgType"},
		{"signature type", func(a *verbs.SigAttrs) { a.Mem.Type = 7 }, "Mem.Type"},
		{"no domain", func(a *verbs.SigAttrs) { a.Wire = verbs.SigDomain{} }, "Mem.Type"},
		{"DIF type 4", func(a *verbs.SigAttrs) { a.Wire.DIFType = 4 }, "Wire.DIFType"},
		{"Type 3 with RefRemap", func(a *verbs.SigAttrs) { a.Wire = verbs.T10DIFDomain(verbs.DIFType3, 512, 0); a.Wire.RefRemap = true }, "Wire.RefRemap"},
		{"Type 1 with RefEscape", func(a *verbs.SigAttrs) { a.Wire.RefEscape = true }, "Wire.RefEscape"},
	} {
		a := verbs.SigAttrs{CheckMask: verbs.SigCheckAll, Wire: good}
		c.edit(&a)
		err := mr.SetSigAttrs(a)
		require.ErrorIs(t, err, verbs.ErrInvalid, c.name)
		assert.Equal(t, c.field, fieldOf(err), "%s: %v", c.name, err)
		assert.Contains(t, err.Error(), c.field, c.name)
		// A refused SetSigAttrs leaves the MR unable to register, naming
		// the same field, whatever attributes it had before.
		_, err = host.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRegMRIntegrity, MR: mr, Access: verbs.AccessRemoteRead}})
		require.ErrorIs(t, err, verbs.ErrInvalid, c.name)
		assert.Equal(t, c.field, fieldOf(err), "%s: registration: %v", c.name, err)
	}
	// Every block size the device reports is accepted, and the error for
	// the others lists them.
	caps, err := host.ctx.QuerySigCaps()
	require.NoError(t, err)
	require.Equal(t, []int{512, 520, 4048, 4096, 4160}, caps.BlockSizes())
	for _, iv := range caps.BlockSizes() {
		d := good
		d.PIInterval = uint32(iv)
		assert.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: verbs.SigCheckAll, Mem: d, Wire: d}), "interval %d", iv)
	}
	err = mr.SetSigAttrs(verbs.SigAttrs{Wire: verbs.T10DIFDomain(verbs.DIFType1, 1024, 0)})
	assert.ErrorContains(t, err, "512, 520, 4048, 4096, 4160")
	// Ref escape without app escape is mlx5's (it ignores it): accepted.
	d := good
	d.AppEscape, d.RefEscape, d.DIFType = false, true, 0
	assert.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{Wire: d}))
	// After valid attributes the MR registers.
	require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: verbs.SigCheckGuard | verbs.SigCheckRefTag, Wire: good}))
	regInteg(t, host, mr, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	// SetSigAttrs on an MR without signature.
	require.ErrorIs(t, host.mr.SetSigAttrs(verbs.SigAttrs{Wire: good}), verbs.ErrInvalid)
}

// A registration without SetSigAttrs fails in the driver, saying why.
func TestRegisterWithoutSigAttrs(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, 4096)}, nil))
	_, err = host.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRegMRIntegrity, MR: mr, Access: verbs.AccessRemoteRead}})
	require.ErrorIs(t, err, verbs.ErrInvalid)
	assert.ErrorContains(t, err, "SetSigAttrs not called")
}

// Intervals other than 512 and 4096 work end to end: 520-byte blocks
// inserted on the wire as t10dif generates them.
func TestInterval520(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	const iv, blocks = 520, 3
	data := host.buf[:iv*blocks]
	for i := range data {
		data[i] = byte(i*13 + 5)
	}
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, len(data))}, nil))
	require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: verbs.SigCheckAll, Wire: verbs.T10DIFDomain(verbs.DIFType1, iv, 0x77)}))
	regInteg(t, host, mr, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	n := int(mr.WireLen(mr.Len))
	require.Equal(t, blocks*(iv+8), n)
	wc := readWire(t, target, mr.RKey, n)
	require.Equal(t, verbs.WCSuccess, wc.Status, "%+v", wc)
	want := make([]byte, n)
	_, err = t10dif.Generate(t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 0x77}, t10dif.Buf{Data: want}, data)
	require.NoError(t, err)
	assert.Equal(t, want, target.buf[:n])
}

func TestMapSGPIValidation(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host := intSide(t, dev)
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	otherPD, err := host.ctx.AllocPD()
	require.NoError(t, err)
	otherBuf, err := host.ctx.Alloc(8192)
	require.NoError(t, err)
	otherMR, err := otherPD.RegMR(otherBuf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	frmr, err := host.pd.AllocMR(verbs.MRTypeMemReg, 4)
	require.NoError(t, err)
	_, err = frmr.MapSG([]verbs.SGE{host.mr.SGE(8192, 4096)})
	require.NoError(t, err)
	ok := host.mr.SGE(0, 4096)
	end := host.mr.SGE(len(host.buf)-64, 64)
	for _, c := range []struct {
		name       string
		data, meta []verbs.SGE
		field      string
	}{
		{"unknown lkey", []verbs.SGE{{Addr: ok.Addr, Length: 4096, LKey: 0xBAD00}}, nil, "data[0].LKey"},
		{"stale lkey", []verbs.SGE{{Addr: ok.Addr, Length: 4096, LKey: host.mr.LKey + 1}}, nil, "data[0].LKey"},
		{"another PD's MR", []verbs.SGE{otherMR.SGE(0, 4096)}, nil, "data[0].LKey"},
		{"a signature key", []verbs.SGE{{Addr: 0, Length: 4096, LKey: mr.LKey}}, nil, "data[0].LKey"},
		{"before the MR", []verbs.SGE{{Addr: host.mr.Addr - 8, Length: 64, LKey: host.mr.LKey}}, nil, "data[0].Addr"},
		{"past its end", []verbs.SGE{ok, {Addr: end.Addr, Length: 65, LKey: host.mr.LKey}}, nil, "data[1].Addr"},
		{"metadata outside", []verbs.SGE{ok}, []verbs.SGE{{Addr: 1 << 40, Length: 64, LKey: host.mr.LKey}}, "meta[0].Addr"},
		{"length 0", []verbs.SGE{ok}, []verbs.SGE{host.mr.SGE(4096, 0)}, "meta[0].Length"},
		{"no data", nil, []verbs.SGE{host.mr.SGE(4096, 64)}, "data"},
		{"outside the fast-registration MR's mapping", []verbs.SGE{{Addr: frmr.Addr + 4000, Length: 200, LKey: frmr.LKey}}, nil, "data[0].Addr"},
	} {
		err := mr.MapSGPI(c.data, c.meta)
		require.ErrorIs(t, err, verbs.ErrInvalid, c.name)
		assert.Equal(t, c.field, fieldOf(err), "%s: %v", c.name, err)
	}
	// What is inside a registration of the PD maps: a RegMR MR's range up
	// to its last byte, a fast-registration MR's mapped range.
	assert.NoError(t, mr.MapSGPI([]verbs.SGE{ok}, []verbs.SGE{end}))
	assert.NoError(t, mr.MapSGPI([]verbs.SGE{frmr.SGE(0, 4096)}, nil))
	// A deregistered MR's key is unknown.
	require.NoError(t, otherMR.Dereg())
	err = mr.MapSGPI([]verbs.SGE{otherMR.SGE(0, 64)}, nil)
	assert.Equal(t, "data[0].LKey", fieldOf(err), "%v", err)
}

func TestT10DIFDomain(t *testing.T) {
	for _, c := range []struct {
		typ                           verbs.DIFType
		remap, appEscape, refEscapeOK bool
	}{{verbs.DIFType1, true, true, false}, {verbs.DIFType2, true, true, false}, {verbs.DIFType3, false, true, true}} {
		d := verbs.T10DIFDomain(c.typ, 4096, 0x1234)
		assert.Equal(t, verbs.SigDomain{Type: verbs.SigTypeT10DIF, DIFType: c.typ, BgType: verbs.BgCRC, PIInterval: 4096, RefTag: 0x1234,
			RefRemap: c.remap, AppEscape: c.appEscape, RefEscape: c.refEscapeOK, ApptagCheckMask: 0xFFFF}, d, c.typ.String())
	}
	assert.Equal(t, "Type 3", verbs.DIFType3.String())
	assert.Equal(t, "DIFType(9)", verbs.DIFType(9).String())
	assert.Equal(t, 0xFF, verbs.SigCheckAll)
	assert.Equal(t, 0xCF, verbs.SigCheckGuard|verbs.SigCheckRefTag)
}

// Type 3 on the wire from T10DIFDomain: a constant ref tag, as t10dif's
// Type 3 generates it.
func TestType3Insert(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	const iv, blocks = 512, 4
	data := host.buf[:iv*blocks]
	for i := range data {
		data[i] = byte(i * 3)
	}
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, len(data))}, nil))
	w := verbs.T10DIFDomain(verbs.DIFType3, iv, 0xC0FFEE)
	w.AppTag = 0x4242
	require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: verbs.SigCheckAll, Wire: w}))
	regInteg(t, host, mr, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	n := int(mr.WireLen(mr.Len))
	require.Equal(t, verbs.WCSuccess, readWire(t, target, mr.RKey, n).Status)
	want := make([]byte, n)
	_, err = t10dif.Generate(t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type3, Interval: iv, RefTag: 0xC0FFEE, AppTag: 0x4242}, t10dif.Buf{Data: want}, data)
	require.NoError(t, err)
	require.Equal(t, want, target.buf[:n])
	for b := range blocks {
		assert.Equal(t, uint32(0xC0FFEE), binary.BigEndian.Uint32(target.buf[b*(iv+8)+iv+4:]), "block %d's ref tag", b)
	}
}

// The copy rule SigDomain documents: with the same interval in both
// domains, tuple fields whose attributes are equal are copied from memory
// to the wire (an unchecked bad guard goes out as it is), and the others
// are regenerated.
func TestCopyEqualFields(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	const iv, blocks = 512, 2
	data := make([]byte, iv*blocks)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	n := blocks * (iv + 8)
	mem := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 5, AppTag: 0x1111}
	_, err := t10dif.Generate(mem, t10dif.Buf{Data: host.buf[:n]}, data)
	require.NoError(t, err)
	host.buf[iv+8+iv] ^= 0xFF // block 1's guard
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, n)}, nil)) // PI interleaved in memory
	md := verbs.T10DIFDomain(verbs.DIFType1, iv, 5)
	md.AppTag = 0x1111
	wd := md
	wd.AppTag = 0x2222 // differs: regenerated on the wire
	require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0, Mem: md, Wire: wd}))
	regInteg(t, host, mr, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	require.Equal(t, uint64(n), mr.WireLen(mr.Len))
	require.Equal(t, verbs.WCSuccess, readWire(t, target, mr.RKey, n).Status)
	for b := range blocks {
		tuple, memTuple := target.buf[b*(iv+8)+iv:][:8], host.buf[b*(iv+8)+iv:][:8]
		assert.Equal(t, memTuple[:2], tuple[:2], "block %d: guard copied", b)
		assert.Equal(t, uint16(0x2222), binary.BigEndian.Uint16(tuple[2:]), "block %d: app tag regenerated", b)
		assert.Equal(t, memTuple[4:], tuple[4:], "block %d: ref tag copied", b)
	}
	e, err := mr.CheckMRStatus()
	require.NoError(t, err)
	assert.Nil(t, e, "nothing checked, nothing reported")
}

func TestWireLen(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host := intSide(t, dev)
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	d512, d4k := verbs.T10DIFDomain(verbs.DIFType1, 512, 0), verbs.T10DIFDomain(verbs.DIFType1, 4096, 0)
	for _, c := range []struct {
		name       string
		data, meta int // bytes mapped
		mem, wire  verbs.SigDomain
		wireLen    uint64
	}{
		{"insert", 4096, 0, verbs.SigDomain{}, d512, 4096 + 8*8},
		{"strip, separate metadata", 4096, 64, d512, verbs.SigDomain{}, 4096},
		{"strip, interleaved", 4096 + 64, 0, d512, verbs.SigDomain{}, 4096},
		{"pass", 4096, 64, d512, d512, 4096 + 64},
		{"re-block 512 to 4096", 8192, 128, d512, d4k, 8192 + 16},
		{"re-block 4096 to 512", 8192, 16, d4k, d512, 8192 + 128},
	} {
		var meta []verbs.SGE
		if c.meta > 0 {
			meta = []verbs.SGE{host.mr.SGE(16384, c.meta)}
		}
		require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, c.data)}, meta), c.name)
		require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: verbs.SigCheckAll, Mem: c.mem, Wire: c.wire}), c.name)
		assert.Equal(t, uint64(c.data+c.meta), mr.Len, c.name)
		assert.Equal(t, c.wireLen, mr.WireLen(mr.Len), c.name)
	}
	// Part of a registration: the first two blocks of an insert key.
	require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{Wire: d512}))
	assert.Equal(t, uint64(2*520), mr.WireLen(1024))
	// No signature: the wire is the memory.
	assert.Equal(t, uint64(100), host.mr.WireLen(100))
}

func TestSigErrTypeAndStrings(t *testing.T) {
	var e verbs.SigErr
	assert.Equal(t, verbs.SigErrNone, e.Type, "the zero SigErr is no error")
	assert.NotEqual(t, verbs.SigBadGuard, e.Type)
	for typ, s := range map[verbs.SigErrType]string{verbs.SigErrNone: "none", verbs.SigBadGuard: "IB_SIG_BAD_GUARD",
		verbs.SigBadRefTag: "IB_SIG_BAD_REFTAG", verbs.SigBadAppTag: "IB_SIG_BAD_APPTAG", 9: "SigErrType(9)"} {
		assert.Equal(t, s, typ.String())
	}
	for op, s := range map[verbs.WCOpcode]string{verbs.WCSend: "IBV_WC_SEND", verbs.WCRDMAWrite: "IBV_WC_RDMA_WRITE",
		verbs.WCRDMARead: "IBV_WC_RDMA_READ", verbs.WCCompSwap: "IBV_WC_COMP_SWAP", verbs.WCFetchAdd: "IBV_WC_FETCH_ADD",
		verbs.WCBindMW: "IBV_WC_BIND_MW", verbs.WCLocalInv: "IBV_WC_LOCAL_INV", verbs.WCRegMR: "IB_WC_REG_MR",
		verbs.WCRecv: "IBV_WC_RECV", verbs.WCRecvRDMAWithImm: "IBV_WC_RECV_RDMA_WITH_IMM", verbs.WCUMR: "MLX5DV_WC_UMR",
		9: "WCOpcode(9)", 200: "WCOpcode(200)"} {
		assert.Equal(t, s, op.String())
	}
	assert.Equal(t, "ERR", verbs.StateErr.String())
	assert.Equal(t, "QPState(9)", verbs.QPState(9).String())
}

// The device moves a QP to ERR on an error completion: State and Query
// say so, and Query returns what Connect set.
func TestQueryQP(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	a, b := newSide(t, dev), newSide(t, dev)
	assert.Equal(t, verbs.StateReset, a.qp.State())
	connect(t, a, b)
	q, err := a.qp.Query()
	require.NoError(t, err)
	assert.Equal(t, verbs.StateRTS, q.State)
	assert.Equal(t, b.qp.QPN(), q.DestQPN)
	assert.Equal(t, b.qp.Info().LID, q.DestLID)
	assert.Equal(t, b.qp.Info().PSN, q.RQPSN)
	assert.Equal(t, a.qp.Info().PSN, q.SQPSN)
	assert.Equal(t, verbs.AccessRemoteRead|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic, q.Access)
	assert.Equal(t, uint8(14), q.Timeout)
	assert.Equal(t, uint8(7), q.RetryCnt)
	assert.Equal(t, uint8(7), q.RNRRetry)
	assert.Equal(t, uint8(12), q.MinRNRTimer)
	assert.Equal(t, uint8(16), q.MaxRDAtomic)
	assert.Equal(t, uint8(16), q.MaxDestRDAtomic)
	// A WRITE with a bad rkey: remote access error, the requester in ERR.
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr, RKey: 0xBAD00}})
	require.NoError(t, err)
	wc := wait(t, a, 1)[0]
	require.Equal(t, verbs.WCRemAccessErr, wc.Status)
	assert.Equal(t, verbs.StateErr, a.qp.State())
	q, err = a.qp.Query()
	require.NoError(t, err)
	assert.Equal(t, verbs.StateErr, q.State)
	// The driver knows it now: ERR → RTS is refused in the driver, and
	// RESET then a new connection works.
	require.ErrorIs(t, a.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS}), verbs.ErrQPState)
	connectAgain(t, a, b)
	assert.Equal(t, verbs.StateRTS, a.qp.State())
}

func TestPollWait(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	a, b := newSide(t, dev), newSide(t, dev)
	connect(t, a, b)
	wcs := make([]verbs.WC, 4)
	// Nothing to complete: the timeout, as ctx's error.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	n, err := a.cq.PollWait(ctx, wcs, 1)
	cancel()
	assert.Equal(t, 0, n)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	assert.Less(t, time.Since(start), 2*time.Second)
	// A cancelled context.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	_, err = a.cq.PollWait(ctx, wcs, 1)
	require.ErrorIs(t, err, context.Canceled)
	// Bad counts.
	_, err = a.cq.PollWait(context.Background(), wcs, 5)
	require.ErrorIs(t, err, verbs.ErrInvalid)
	_, err = a.cq.PollWait(context.Background(), wcs, -1)
	require.ErrorIs(t, err, verbs.ErrInvalid)
	// Three WRITEs, waited for together.
	for i := range 3 {
		_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(10 + i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}})
		require.NoError(t, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err = a.cq.PollWait(ctx, wcs[:3], 3)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for i, wc := range wcs[:3] {
		assert.Equal(t, verbs.WCSuccess, wc.Status)
		assert.Equal(t, uint64(10+i), wc.WRID)
		assert.Equal(t, verbs.WCRDMAWrite, wc.Opcode)
	}
	// n 0 polls once.
	n, err = a.cq.PollWait(ctx, wcs, 0)
	assert.NoError(t, err)
	assert.Equal(t, 0, n)
}

// Each cause of a refused signature WR is named.
func TestSignatureWRErrors(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	plain, peer := newSide(t, dev), newSide(t, dev)
	connect(t, host, target)
	connect(t, plain, peer)
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, 4096)}, nil))
	require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: verbs.SigCheckAll, Wire: verbs.T10DIFDomain(verbs.DIFType1, 512, 0)}))
	pmr, err := plain.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		s    *side
		wr   verbs.SendWR
		want string
	}{
		{"QP without integrity", plain, verbs.SendWR{Opcode: verbs.WRRegMRIntegrity, MR: pmr}, "created without QPInitAttr.Integrity"},
		{"no MR", host, verbs.SendWR{Opcode: verbs.WRRegMRIntegrity}, "SendWR.MR is nil"},
		{"MR without signature", host, verbs.SendWR{Opcode: verbs.WRRegMRIntegrity, MR: host.mr}, "has no signature"},
		{"remote atomic", host, verbs.SendWR{Opcode: verbs.WRRegMRIntegrity, MR: mr, Access: verbs.AccessLocalWrite | verbs.AccessRemoteAtomic}, "AccessRemoteAtomic"},
	} {
		_, err := c.s.qp.PostSend([]verbs.SendWR{c.wr})
		require.ErrorIs(t, err, verbs.ErrInvalid, c.name)
		assert.ErrorContains(t, err, c.want, c.name)
		assert.NotContains(t, err.Error(), "without integrity, an MR without signature", c.name)
	}
}

// PIMode says which mode MapSGPI chose, and how many completions a
// signaled registration then produces.
func TestPIMode(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	host, target := intSide(t, dev), intSide(t, dev)
	connect(t, host, target)
	mr, err := host.pd.AllocMRIntegrity(8, 8)
	require.NoError(t, err)
	assert.Equal(t, verbs.PIModeNone, mr.PIMode())
	assert.Equal(t, verbs.PIModeNone, host.mr.PIMode())
	require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: verbs.SigCheckAll, Wire: verbs.T10DIFDomain(verbs.DIFType1, 512, 0)}))
	for _, c := range []struct {
		data []verbs.SGE
		mode verbs.PIMode
	}{
		{[]verbs.SGE{host.mr.SGE(0, 4096)}, verbs.PIModePA},
		{[]verbs.SGE{host.mr.SGE(0, 4096), host.mr.SGE(8192, 4096)}, verbs.PIModeMTT},
		{[]verbs.SGE{host.mr.SGE(0, 512), host.mr.SGE(1024, 512)}, verbs.PIModeKLM},
	} {
		require.NoError(t, mr.MapSGPI(c.data, nil))
		require.Equal(t, c.mode, mr.PIMode())
		mr.IncKey()
		_, err := host.qp.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
			Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead}})
		require.NoError(t, err)
		for _, wc := range wait(t, host, c.mode.Completions()) {
			assert.Equal(t, verbs.WCSuccess, wc.Status, "%v: %+v", c.mode, wc)
			assert.Equal(t, verbs.WCRegMR, wc.Opcode)
			assert.Equal(t, uint64(7), wc.WRID)
		}
		n, _ := host.cq.Poll(make([]verbs.WC, 4))
		assert.Zero(t, n, "%v: more completions than Completions says", c.mode)
		// Invalidate before the next registration.
		_, err = host.qp.PostSend([]verbs.SendWR{{WRID: 8, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: mr.RKey}})
		require.NoError(t, err)
		wait(t, host, 1)
		_, err = mr.CheckMRStatus()
		require.NoError(t, err)
	}
	assert.Equal(t, "KLM", verbs.PIModeKLM.String())
	assert.Equal(t, "PIMode(7)", verbs.PIMode(7).String())
}
