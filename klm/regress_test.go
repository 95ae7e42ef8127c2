package klm_test

import (
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/klm"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests for bugs found while writing these tests (against
// dd22471) and fixed in 9784a4b. Each comment says what was wrong.

// TestCloneSharesNoMutableState: Mkey.Clone's comment promises a copy
// "that shares no mutable state"; the copy used to share XLT's and BSF's
// backing arrays (mkey.go, Clone: `c := *m`).
func TestCloneSharesNoMutableState(t *testing.T) {
	m := &klm.Mkey{XLT: []byte{1, 2, 3, 4}, BSF: make([]byte, 64)}
	c := m.Clone()
	c.XLT[0] = 9
	c.BSF[0] = 9
	require.EqualValues(t, 1, m.XLT[0], "writing the clone's XLT changed the original")
	require.EqualValues(t, 0, m.BSF[0], "writing the clone's BSF changed the original")
}

// TestUpdateEditingCloneInPlace: an Update whose build edits the clone's
// translation in place (as a UMR with a translation offset would) and then
// fails validation must leave the table unchanged. While Clone shared XLT,
// the published MTT key's page table was changed (resolve.go reads MTT and
// KSM entries from m.XLT at resolution time).
func TestUpdateEditingCloneInPlace(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x10000, 0x1000)
	e.mapNew(0x20000, 0x1000)
	k := e.create(mttMkey(0x100000, 0x1000, 12, rw(0x10000)))
	req := klm.Request{Key: k, PD: testPD, Addr: 0x100000, Len: 0x10, Access: klm.LocalRead}
	wantRuns(t, e.resolve(req), []run{{0x10000, 0x10}})
	err := e.tbl.Update(k.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		n := cur.Clone()
		klm.MTT(n.XLT).Encode(&klm.MTTFields{Addr: 0x20000, Read: true, Write: true})
		n.LogPageSize = 40 // invalid: the update must fail
		return n, nil
	})
	require.ErrorIs(t, err, klm.ErrBadPageSize, "Update")
	wantRuns(t, e.resolve(req), []run{{0x10000, 0x10}})
}

// TestCreateDoesNotAliasCallerXLT: "Published Mkeys are immutable", but
// Table.Create kept the caller's XLT slice, and MTT and KSM keys read their
// entries from it at every resolution, so a caller reusing its buffer
// rewrote a live key. KLM and repeat-block keys were immune (parsed).
func TestCreateDoesNotAliasCallerXLT(t *testing.T) {
	for _, mode := range []klm.AccessMode{klm.ModeMTT, klm.ModeKSM, klm.ModeKLM} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newTbench(t, klm.ConnectX5)
			e.mapNew(0x10000, 0x1000)
			e.mapNew(0x20000, 0x1000)
			var m klm.Mkey
			var rewrite func(xlt []byte)
			switch mode {
			case klm.ModeMTT:
				m = mttMkey(0x100000, 0x1000, 12, rw(0x10000))
				rewrite = func(x []byte) { klm.MTT(x).Encode(&klm.MTTFields{Addr: 0x20000, Read: true}) }
			case klm.ModeKSM:
				m = ksmMkey(0x100000, 0x1000, 12, klm.KSMFields{Key: klm.ReservedLKey, VA: 0x10000})
				rewrite = func(x []byte) { klm.KSM(x).Encode(&klm.KSMFields{Key: klm.ReservedLKey, VA: 0x20000}) }
			default:
				m = klmMkey(0x100000, 0x1000, klm.KLMFields{ByteCount: 0x1000, Key: klm.ReservedLKey, VA: 0x10000})
				rewrite = func(x []byte) {
					klm.KLM(x).Encode(&klm.KLMFields{ByteCount: 0x1000, Key: klm.ReservedLKey, VA: 0x20000})
				}
			}
			k := e.create(m)
			rewrite(m.XLT) // the caller reuses its buffer
			wantRuns(t, e.resolve(klm.Request{Key: k, PD: testPD, Addr: 0x100000, Len: 0x10, Access: klm.LocalRead}), []run{{0x10000, 0x10}})
		})
	}
}

// TestMTTUnmappedFaultRange: Fault.Addr and Len are "the failing part of
// the access, in Key's address space". For an MTT run that turned out to be
// unmapped, resolveMTT reported the request's start address with the bytes
// remaining after the current page: when the last run failed, Len was 0;
// when a middle run failed, the range did not contain it.
func TestMTTUnmappedFaultRange(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x10000, 0x1000)
	e.mapNew(0x30000, 0x1000)
	const base = 0x100000
	// Pages: mapped, mapped, unmapped, mapped (no two contiguous).
	k := e.create(mttMkey(base, 0x4000, 12, rw(0x10000), rw(0x30000), rw(0x50000), rw(0x10000)))
	for _, c := range []struct {
		name      string
		addr, n   uint64
		badByte   uint64 // an unmapped byte of the request, in the key's space
		badLength uint64
	}{
		{"last page unmapped", base + 0x1800, 0x1000, base + 0x2000, 0x800},
		{"middle page unmapped", base + 0x800, 0x3000, base + 0x2000, 0x1000},
	} {
		f := e.wantFault(klm.Request{Key: k, PD: testPD, Addr: c.addr, Len: c.n, Access: klm.LocalRead}, klm.FaultUnmapped, k, 0)
		what := fmt.Sprintf("%s: fault range %#x+%#x, want a part of %#x+%#x that contains %#x", c.name, f.Addr, f.Len, c.addr, c.n, c.badByte)
		assert.NotZero(t, f.Len, "%s: empty", what)
		assert.GreaterOrEqual(t, f.Addr, c.addr, "%s: starts before the request", what)
		assert.LessOrEqual(t, f.Addr+f.Len, c.addr+c.n, "%s: ends after the request", what)
		assert.LessOrEqual(t, f.Addr, c.badByte, "%s: starts after the unmapped byte", what)
		assert.Greater(t, f.Addr+f.Len, c.badByte, "%s: ends before the unmapped byte", what)
	}
}

// TestNewTableLargeMaxMkeys: a key's index has 24 bits, but NewTable took
// any MaxMkeys; above 2^32-2^12 the chunk count overflowed uint32
// ((c.MaxMkeys+(1<<chunkBits)-1)>>chunkBits) and the first Create panicked
// with an index out of range. MaxMkeys is now capped at MaxIndex+1.
func TestNewTableLargeMaxMkeys(t *testing.T) {
	defer func() { require.Nil(t, recover(), "Create panicked") }()
	tbl := klm.NewTable(klm.Caps{MaxMkeys: ^uint32(0), LogMaxKLMListSize: 4, MaxIndirection: 1, MinLogPageSize: 12, MaxLogPageSize: 12}, klm.NewMemory())
	k, err := tbl.Create(paMkey(0, 1))
	require.NoError(t, err)
	require.NotNil(t, tbl.Lookup(k.Index()), "key %v not found", k)
	require.LessOrEqual(t, tbl.Caps().MaxMkeys, uint32(klm.MaxIndex+1), "MaxMkeys above the 24-bit index space")
	require.Nil(t, tbl.Lookup(klm.MaxIndex+1), "Lookup past the index space")
	require.Nil(t, tbl.Lookup(^uint32(0)), "Lookup past the index space")
}
