package verbs_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

// configure posts one WRMkeyConfigure and waits for its completion.
func configure(t *testing.T, s *side, cfg *verbs.MkeyConfig) {
	t.Helper()
	_, err := s.qp.PostSend([]verbs.SendWR{{WRID: 50, Opcode: verbs.WRMkeyConfigure, Flags: verbs.SendSignaled, Mkey: cfg}})
	require.NoError(t, err, "post mkey configure")
	hcatest.Check(t, "configure", wait(t, s, 1)[0], hcatest.Want{WRID: 50, Op: verbs.WCUMR, Len: hcatest.AnyLen})
}

// sendThrough SENDs n bytes through the client's key at address 0 into
// the server's receive through its key, and returns both completions.
func sendThrough(t *testing.T, client, server *side, ckey, skey uint32, n int) (verbs.WC, verbs.WC) {
	t.Helper()
	_, err := server.qp.PostRecv([]verbs.RecvWR{{WRID: 2, SG: []verbs.SGE{{Addr: 0, Length: uint32(n), LKey: skey}}}})
	require.NoError(t, err, "post recv through key %#x", skey)
	_, err = client.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{{Addr: 0, Length: uint32(n), LKey: ckey}}}})
	require.NoError(t, err, "post send through key %#x", ckey)
	return wait(t, client, 1)[0], wait(t, server, 1)[0]
}

// TestMkeyLayouts: list and interleaved layouts, as rdma-core's
// test_mlx5_mkey does: 16 bytes through two 8-byte pieces 64 bytes apart.
func TestMkeyLayouts(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	client, server := intSide(t, dev), intSide(t, dev)
	connect(t, client, server)
	for _, interleaved := range []bool{false, true} {
		for _, s := range []*side{client, server} {
			m, err := s.pd.CreateMkey(verbs.MkeyIndirect, 3)
			require.NoError(t, err, "create mkey")
			cfg := &verbs.MkeyConfig{Mkey: m, Access: verbs.AccessLocalWrite, SetAccess: true,
				List: []verbs.SGE{s.mr.SGE(0, 8), s.mr.SGE(64, 8)}}
			if interleaved {
				cfg.List = nil
				cfg.Interleaved = &verbs.Interleaved{Repeat: 3, Entries: []verbs.InterleavedEntry{
					{Addr: s.mr.Addr, Count: 8, Skip: 2, LKey: s.mr.LKey}, {Addr: s.mr.Addr + 64, Count: 8, Skip: 2, LKey: s.mr.LKey}}}
			}
			configure(t, s, cfg)
			s.mkey = m
		}
		copy(client.buf, bytes.Repeat([]byte{'c'}, 128))
		copy(server.buf, bytes.Repeat([]byte{'s'}, 128))
		cw, sw := sendThrough(t, client, server, client.mkey.LKey, server.mkey.LKey, 16)
		hcatest.Check(t, fmt.Sprintf("interleaved %v: send", interleaved), cw, hcatest.Want{WRID: 1, Op: verbs.WCSend, Len: hcatest.AnyLen})
		hcatest.Check(t, fmt.Sprintf("interleaved %v: recv", interleaved), sw, hcatest.Want{WRID: 2, Op: verbs.WCRecv, Len: 16})
		want := append(append(bytes.Repeat([]byte{'c'}, 8), bytes.Repeat([]byte{'s'}, 56)...), append(bytes.Repeat([]byte{'c'}, 8), bytes.Repeat([]byte{'s'}, 56)...)...)
		require.Equal(t, want, server.buf[:128], "interleaved %v: server memory", interleaved)
		// Past the layout (16 bytes, or 3 cycles of 16): an error completion.
		_, err := client.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{{Addr: 0, Length: 100, LKey: client.mkey.LKey}}}})
		require.NoError(t, err, "post a SEND past the layout")
		hcatest.CheckErr(t, "a SEND past the layout", wait(t, client, 1)[0], 3, verbs.WCLocProtErr, 0)
		connectAgain(t, client, server)
	}
}

// TestMkeySignatures: T10-DIF and CRC32 inserted on the wire and stripped
// at the receiver (test_mkey_sig_t10dif, test_mkey_sig_crc), and a CRC32
// memory-domain check failing (test_mkey_sig_err).
func TestMkeySignatures(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	client, server := intSide(t, dev), intSide(t, dev)
	connect(t, client, server)
	wireT10 := &verbs.SigBlock{Wire: &verbs.SigBlockDomain{Type: verbs.SigBlockT10DIF, BlockSize: 512, Bg: 0xFFFF, AppTag: 0xABCD,
		RefTag: 0x01234567, RefRemap: true, AppEscape: true, AppRefEscape: true}, CheckMask: 0xFF}
	wireCRC := &verbs.SigBlock{Wire: &verbs.SigBlockDomain{Type: verbs.SigBlockCRC, BlockSize: 512, CRC: verbs.CRC32, Seed: 0xFFFFFFFF}, CheckMask: 0xF0}
	for _, sig := range []*verbs.SigBlock{wireT10, wireCRC} {
		for _, s := range []*side{client, server} {
			m, err := s.pd.CreateMkey(verbs.MkeyIndirect|verbs.MkeyBlockSignature, 3)
			require.NoError(t, err, "create signature mkey")
			configure(t, s, &verbs.MkeyConfig{Mkey: m, Access: verbs.AccessLocalWrite, SetAccess: true, List: []verbs.SGE{s.mr.SGE(0, 512)}, Sig: sig})
			s.mkey = m
		}
		copy(client.buf, bytes.Repeat([]byte{'c'}, 1024))
		copy(server.buf, bytes.Repeat([]byte{'s'}, 1024))
		cw, sw := sendThrough(t, client, server, client.mkey.LKey, server.mkey.LKey, 512)
		hcatest.Check(t, "send", cw, hcatest.Want{WRID: 1, Op: verbs.WCSend, Len: hcatest.AnyLen})
		hcatest.Check(t, "recv", sw, hcatest.Want{WRID: 2, Op: verbs.WCRecv, Len: 512})
		require.True(t, bytes.Equal(server.buf[:1024], append(bytes.Repeat([]byte{'c'}, 512), bytes.Repeat([]byte{'s'}, 512)...)),
			"server memory %q", server.buf[:600])
		for _, s := range []*side{client, server} {
			e, err := s.mkey.Check()
			require.NoError(t, err, "check")
			require.Nil(t, e, "check")
			_, err = s.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRLocalInv, InvalidateRKey: s.mkey.LKey, Flags: verbs.SendSignaled}})
			require.NoError(t, err, "post local invalidate")
			hcatest.Check(t, "local invalidate", wait(t, s, 1)[0], hcatest.Want{WRID: 4, Op: verbs.WCLocalInv, Len: hcatest.AnyLen})
		}
	}
	// CRC32 in memory over 512 + 4 bytes whose CRC is garbage: the SEND
	// completes, the client's key has BAD_GUARD.
	cm, _ := client.pd.CreateMkey(verbs.MkeyIndirect|verbs.MkeyBlockSignature, 3)
	configure(t, client, &verbs.MkeyConfig{Mkey: cm, Access: verbs.AccessLocalWrite, SetAccess: true, List: []verbs.SGE{client.mr.SGE(0, 516)},
		Sig: &verbs.SigBlock{Mem: &verbs.SigBlockDomain{Type: verbs.SigBlockCRC, BlockSize: 512, CRC: verbs.CRC32, Seed: 0xFFFFFFFF}, CheckMask: 0xF0}})
	sm, _ := server.pd.CreateMkey(verbs.MkeyIndirect|verbs.MkeyBlockSignature, 3)
	configure(t, server, &verbs.MkeyConfig{Mkey: sm, Access: verbs.AccessLocalWrite, SetAccess: true, List: []verbs.SGE{server.mr.SGE(0, 512)}})
	cw, sw := sendThrough(t, client, server, cm.LKey, sm.LKey, 512)
	hcatest.Check(t, "send", cw, hcatest.Want{WRID: 1, Op: verbs.WCSend, Len: hcatest.AnyLen})
	hcatest.Check(t, "recv", sw, hcatest.Want{WRID: 2, Op: verbs.WCRecv, Len: 512})
	client.cq.Poll(make([]verbs.WC, 4)) // the SIG_ERR CQE, if it came after
	e, err := cm.Check()
	require.NoError(t, err, "client check")
	require.NotNil(t, e, "client check")
	require.Equal(t, verbs.MkeyBadGuard, e.Type, "client check: %+v", e)
	require.Zero(t, e.Offset, "client check: %+v", e)
	e, _ = sm.Check()
	require.Nil(t, e, "server check")
}

func TestMkeyBadUse(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	s, peer := intSide(t, dev), intSide(t, dev)
	connect(t, s, peer)
	_, err := s.pd.CreateMkey(0, 4)
	assert.ErrorIs(t, err, verbs.ErrInvalid, "no flags")
	m, err := s.pd.CreateMkey(verbs.MkeyIndirect, 2)
	require.NoError(t, err, "create mkey")
	_, err = m.Check()
	assert.ErrorIs(t, err, verbs.ErrInvalid, "check of a key without signature")
	sg := make([]verbs.SGE, 5)
	for i := range sg {
		sg[i] = s.mr.SGE(64*i, 8)
	}
	for _, c := range []struct {
		name string
		cfg  verbs.MkeyConfig
		want error
	}{
		{"layout past the entries", verbs.MkeyConfig{Mkey: m, List: sg}, verbs.ErrMkeyLayout},
		{"signature without BLOCK_SIGNATURE", verbs.MkeyConfig{Mkey: m, Sig: &verbs.SigBlock{Wire: &verbs.SigBlockDomain{BlockSize: 512}}}, verbs.ErrInvalid},
	} {
		_, err := s.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRMkeyConfigure, Mkey: &c.cfg}})
		assert.ErrorIs(t, err, c.want, c.name)
	}
	sm, err := s.pd.CreateMkey(verbs.MkeyBlockSignature, 1)
	require.NoError(t, err, "create signature mkey")
	for _, d := range []verbs.SigBlockDomain{
		{Type: verbs.SigBlockT10DIF, BlockSize: 1000},
		{Type: verbs.SigBlockT10DIF, BlockSize: 512, Bg: 5},
		{Type: verbs.SigBlockCRC, BlockSize: 512, CRC: 7},
		{Type: verbs.SigBlockCRC, BlockSize: 512, Seed: 3},
	} {
		cfg := verbs.MkeyConfig{Mkey: sm, Sig: &verbs.SigBlock{Mem: &d}}
		_, err := s.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRMkeyConfigure, Mkey: &cfg}})
		assert.ErrorIs(t, err, verbs.ErrInvalid, "domain %+v", d)
	}
	require.NoError(t, sm.Destroy(), "destroy signature mkey")
	require.NoError(t, m.Destroy(), "destroy mkey")
}

// TestMkeyInterleavedMemoryPI: a memory domain with PI interleaved,
// gathered through interleaved layouts of two shapes over the same
// stream of four 520-byte blocks: (data, PI) per block from two buffers,
// which the device takes as one data run and one PI run, and (256, 264)
// bytes per block, which it takes segment by segment. Both strip the
// same data onto the wire, and with one guard corrupted both report the
// same error.
func TestMkeyInterleavedMemoryPI(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	client, server := intSide(t, dev), intSide(t, dev)
	connect(t, client, server)
	const blocks, iv = 4, 512
	dom := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 0x100}
	data := make([]byte, blocks*iv)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	stream := make([]byte, blocks*(iv+8))
	_, err := t10dif.Generate(dom, t10dif.Buf{Data: stream}, data)
	require.NoError(t, err, "generate")
	mem := &verbs.SigBlockDomain{Type: verbs.SigBlockT10DIF, BlockSize: iv, RefTag: 0x100, RefRemap: true}
	// Buffer A at 0, buffer B at 8 KiB of the client's MR.
	const bOff = 8192
	shapes := []struct {
		name   string
		counts [2]uint32
	}{{"data and PI", [2]uint32{iv, 8}}, {"256 and 264", [2]uint32{256, 264}}}
	layout := func(counts [2]uint32, st []byte) *verbs.Interleaved {
		c0, c1 := int(counts[0]), int(counts[1])
		for b := range blocks {
			blk := st[b*(iv+8) : (b+1)*(iv+8)]
			copy(client.buf[b*c0:], blk[:c0])
			copy(client.buf[bOff+b*c1:], blk[c0:])
		}
		return &verbs.Interleaved{Repeat: blocks, Entries: []verbs.InterleavedEntry{
			{Addr: client.mr.Addr, Count: counts[0], LKey: client.mr.LKey},
			{Addr: client.mr.Addr + bOff, Count: counts[1], LKey: client.mr.LKey}}}
	}
	sm, err := server.pd.CreateMkey(verbs.MkeyIndirect, 1)
	require.NoError(t, err, "create the server's mkey")
	configure(t, server, &verbs.MkeyConfig{Mkey: sm, Access: verbs.AccessLocalWrite, SetAccess: true, List: []verbs.SGE{server.mr.SGE(0, len(data))}})
	var errs []*verbs.MkeyErr
	for _, corrupt := range []bool{false, true} {
		st := append([]byte(nil), stream...)
		if corrupt {
			st[2*(iv+8)+iv] ^= 0x40 // block 2's guard
		}
		for _, sh := range shapes {
			what := fmt.Sprintf("%s, corrupt %v", sh.name, corrupt)
			m, err := client.pd.CreateMkey(verbs.MkeyIndirect|verbs.MkeyBlockSignature, 2)
			require.NoError(t, err, "%s: create mkey", what)
			configure(t, client, &verbs.MkeyConfig{Mkey: m, Access: verbs.AccessLocalWrite, SetAccess: true,
				Interleaved: layout(sh.counts, st), Sig: &verbs.SigBlock{Mem: mem, CheckMask: 0xFF}})
			clear(server.buf[:len(data)])
			cw, sw := sendThrough(t, client, server, m.LKey, sm.LKey, len(data))
			hcatest.Check(t, what+": send", cw, hcatest.Want{WRID: 1, Op: verbs.WCSend, Len: hcatest.AnyLen})
			hcatest.Check(t, what+": recv", sw, hcatest.Want{WRID: 2, Op: verbs.WCRecv, Len: len(data)})
			require.True(t, bytes.Equal(data, server.buf[:len(data)]), "%s: the data on the wire", what)
			client.cq.Poll(make([]verbs.WC, 4)) // the SIG_ERR CQE, if any
			e, err := m.Check()
			require.NoError(t, err, "%s: check", what)
			if !corrupt {
				require.Nil(t, e, "%s: check", what)
				continue
			}
			require.NotNil(t, e, "%s: check", what)
			require.Equal(t, verbs.MkeyBadGuard, e.Type, "%s: check %+v", what, e)
			errs = append(errs, e)
		}
	}
	require.Len(t, errs, 2)
	require.Equal(t, *errs[0], *errs[1], "the two shapes' errors")
}
