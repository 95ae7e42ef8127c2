package umr

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hcasim/hcasim/klm"

	"github.com/stretchr/testify/require"
)

// fuzzEnv has one key of each mode, free and UMR-enabled.
func fuzzEnv(t testing.TB) (*env, []klm.Key) {
	e := newEnv(t)
	var keys []klm.Key
	for _, m := range []klm.AccessMode{klm.ModeKLM, klm.ModeMTT, klm.ModeKSM, klm.ModePA, klm.ModeKLM} {
		keys = append(keys, e.create(t, m, 8, 1))
	}
	return e, keys
}

// FuzzDecodeApply: any bytes as the segments of a UMR work request give an
// error that leaves the table unchanged, or a change after which the key
// resolves (or faults) without touching unmapped memory.
func FuzzDecodeApply(f *testing.F) {
	f.Add(localInv(), uint8(0))
	f.Add(wqe(CtrlFields{Flags: FlagInline, Mask: MaskFastReg}, MkeyFields{Access: klm.LocalRead | klm.LocalWrite, Len: 150, Variant: 0x11},
		klmList(klm.KLMFields{ByteCount: 100, Key: klm.ReservedLKey, VA: 0x10000}, klm.KLMFields{ByteCount: 50, Key: klm.ReservedLKey, VA: 0x18000}), nil), uint8(0))
	sig := make([]byte, 64)
	klm.RepeatCtrl(sig).Encode(&klm.RepeatCtrlFields{BytesPerCycle: 520, Op: klm.RepeatBlockOp, RepeatCount: 8, NumEntries: 2})
	klm.RepeatEntry(sig[16:]).Encode(&klm.RepeatEntryFields{Stride: 512, ByteCount: 512, Key: klm.ReservedLKey, VA: 0x10000})
	klm.RepeatEntry(sig[32:]).Encode(&klm.RepeatEntryFields{Stride: 8, ByteCount: 8, Key: klm.ReservedLKey, VA: 0x18000})
	f.Add(wqe(CtrlFields{Flags: FlagInline | FlagCheckNotFree, Mask: MaskSignature},
		MkeyFields{Access: klm.LocalRead | klm.LocalWrite, Len: 4160, Variant: 0x11, BSFEnabled: true}, sig, bytes.Repeat([]byte{0xC0}, 64)), uint8(4))
	f.Add([]byte(strings.Repeat("\x00", 112)), uint8(1))
	// rdma-core's window binds (type 2 bind, type 2 unbind, type 1 bind).
	f.Add(bindWQE(2, 0x12, 0x42, klm.ReservedLKey, 0x10000, 64, klm.LocalWrite|klm.RemoteWrite), uint8(0))
	f.Add(bindWQE(2, 0, 0x42, klm.ReservedLKey, 0, 0, 0), uint8(0))
	f.Add(bindWQE(1, 0x13, 0, klm.ReservedLKey, 0x10000, 64, klm.LocalWrite|klm.RemoteRead), uint8(4))
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		e, keys := fuzzEnv(t)
		k := keys[int(which)%len(keys)]
		if which >= 128 {
			k = klm.Key(uint32(which) << 8) // also reserved and missing indices
		}
		before := e.tab.Lookup(k.Index())
		op, err := Decode(body, k, func(key klm.Key, addr uint64, n int) ([]byte, error) {
			segs, err := e.tab.Resolve(nil, klm.Request{Key: key, PD: 1, Addr: addr, Len: uint64(n), Access: klm.LocalRead})
			return bytes.Join(segs, nil), err
		})
		if err != nil {
			require.Nil(t, op, "Decode returned an op with an error")
			return
		}
		if err := Apply(e.tab, op); err != nil {
			require.Same(t, before, e.tab.Lookup(k.Index()), "failed UMR changed the table: %v", err)
			return
		}
		m := e.tab.Lookup(k.Index())
		require.NotNil(t, m, "successful UMR did not publish a new context")
		require.NotSame(t, before, m, "successful UMR did not publish a new context")
		require.True(t, m.Access.Valid(), "published invalid access %v", m.Access)
		// Resolving through the new key stays inside mapped memory.
		cur := klm.MakeKey(k.Index(), m.Variant)
		for _, n := range []uint64{1, 64, 4096} {
			segs, err := e.tab.Resolve(nil, klm.Request{Key: cur, PD: m.PD, Addr: m.StartAddr, Len: n, Access: klm.LocalRead})
			if err != nil {
				continue
			}
			total := 0
			for _, s := range segs {
				total += len(s)
			}
			require.EqualValues(t, n, total, "resolved bytes for %d", n)
		}
	})
}
