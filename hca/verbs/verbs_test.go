package verbs_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
)

type side struct {
	ctx  *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	buf  []byte
	mr   *verbs.MR
	mkey *verbs.Mkey
}

func newSide(t *testing.T, dev *hca.Device) *side {
	t.Helper()
	ctx, err := verbs.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	s := &side{ctx: ctx}
	if s.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.cq, err = ctx.CreateCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}}); err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, 1<<16)
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	return s
}

func connect(t *testing.T, a, b *side) {
	t.Helper()
	if err := a.qp.Connect(b.qp.Info(), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), nil); err != nil {
		t.Fatal(err)
	}
}

// connectAgain resets both QPs (after an error) and connects them again.
func connectAgain(t *testing.T, a, b *side) {
	t.Helper()
	for _, s := range []*side{a, b} {
		if err := s.qp.Modify(&verbs.QPAttr{State: verbs.StateReset}); err != nil {
			t.Fatal(err)
		}
	}
	connect(t, a, b)
}

// wait waits up to 5 s for n completions on s's CQ.
func wait(t *testing.T, s *side, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, n)
	k, err := s.cq.PollWait(ctx, wcs, n)
	require.NoError(t, err, "completions so far: %+v", wcs[:k])
	return wcs[:k]
}

func TestWriteSendReadAtomic(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	a, b := newSide(t, dev), newSide(t, dev)
	connect(t, a, b)
	copy(a.buf, "hello, hcasim")
	// RDMA WRITE a → b.
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 13)}, RemoteAddr: b.mr.Addr + 100, RKey: b.mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	wc := wait(t, a, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.WRID != 1 || wc.Opcode != verbs.WCRDMAWrite {
		t.Fatalf("write completion %+v", wc)
	}
	if !bytes.Equal(b.buf[100:113], a.buf[:13]) {
		t.Fatalf("b got %q", b.buf[100:113])
	}
	// SEND with immediate a → b.
	if _, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SG: []verbs.SGE{b.mr.SGE(1000, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSendWithImm, Imm: 0x1234, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 5)}}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 2 {
		t.Fatalf("send completion %+v", wc)
	}
	if wc := wait(t, b, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 7 || wc.ByteLen != 5 || !wc.WithImm || wc.Imm != 0x1234 {
		t.Fatalf("recv completion %+v", wc)
	}
	if string(b.buf[1000:1005]) != "hello" {
		t.Fatalf("recv data %q", b.buf[1000:1005])
	}
	// RDMA READ b → a.
	copy(b.buf[2000:], "remote data")
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(3000, 11)}, RemoteAddr: b.mr.Addr + 2000, RKey: b.mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a, 1)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != 11 || wc.Opcode != verbs.WCRDMARead {
		t.Fatalf("read completion %+v", wc)
	}
	if string(a.buf[3000:3011]) != "remote data" {
		t.Fatalf("read data %q", a.buf[3000:3011])
	}
	// Fetch-and-add and compare-and-swap on b.
	b.buf[4007] = 5
	if _, err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 4, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(4000, 8)}, RemoteAddr: b.mr.Addr + 4000, RKey: b.mr.RKey, CompareAdd: 10},
		{WRID: 5, Opcode: verbs.WRAtomicCmpSwp, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(4008, 8)}, RemoteAddr: b.mr.Addr + 4000, RKey: b.mr.RKey, CompareAdd: 15, Swap: 99},
	}); err != nil {
		t.Fatal(err)
	}
	wcs := wait(t, a, 2)
	if wcs[0].Status != verbs.WCSuccess || wcs[1].Status != verbs.WCSuccess {
		t.Fatalf("atomics %+v", wcs)
	}
	if a.buf[4007] != 5 || a.buf[4015] != 15 || b.buf[4007] != 99 {
		t.Fatalf("atomic values: fetched %d, %d; remote now %d", a.buf[4007], a.buf[4015], b.buf[4007])
	}
}
