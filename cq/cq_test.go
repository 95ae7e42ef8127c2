package cq

import (
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	require.NoError(t, err, "hex %q", s)
	return b
}

// Offsets from mlx5dv.h: mlx5_cqe64 byte_cnt 44, sop_drop_qpn 56,
// wqe_counter 60, signature 62, op_own 63; mlx5_err_cqe srqn 32,
// vendor_err_synd 54, syndrome 55, s_wqe_opcode_qpn 56.
func TestCQELayouts(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Fields
		want string
	}{
		{"requester RDMA READ", Fields{Opcode: OpReq, QPN: 0xABCDEF, WQEOpcode: 0x10, WQECounter: 0x1234, ByteCount: 4096, Timestamp: 0x0102030405060708},
			strings.Repeat("00", 44) + "00001000 0102030405060708 10abcdef 1234 00 00"},
		{"responder SEND with invalidate", Fields{Opcode: OpRespSendInv, QPN: 0x11, WQECounter: 7, ByteCount: 100, Immediate: 0x00001234, SRQN: 0},
			strings.Repeat("00", 36) + "00001234 00000000 00000064 0000000000000000 00000011 0007 00 40"},
		// UD over RoCE: flags_rqpn's SL bits are the packet type (mlx5's
		// handle_responder, UCX's check_grh): RoCEv2 sets bit 27 (UDP).
		{"UD responder, RoCEv2 over IPv4", Fields{Opcode: OpRespSend, QPN: 0x11, WQECounter: 1, ByteCount: 104, SrcQP: 0x107, GRH: true, L3: L3IPv4},
			strings.Repeat("00", 24) + "1a000107" + strings.Repeat("00", 16) + "00000068 0000000000000000 00000011 0001 00 20"},
		{"UD responder, RoCE v1", Fields{Opcode: OpRespSend, QPN: 0x11, WQECounter: 1, ByteCount: 104, SrcQP: 0x107, GRH: true, L3: L3GRH},
			strings.Repeat("00", 24) + "10000107" + strings.Repeat("00", 16) + "00000068 0000000000000000 00000011 0001 00 20"},
		{"requester error", Fields{Opcode: OpReqErr, QPN: 0x123, WQEOpcode: 0x08, WQECounter: 9, Syndrome: SyndromeRemoteAccess, VendorSyndrome: 0x88},
			strings.Repeat("00", 54) + "88 13 08000123 0009 00 d0"},
		{"signature error", Fields{Opcode: OpSigErr, QPN: 0x55, Sig: SigFields{ExpectedTransSig: 0xAAAA0000, ActualTransSig: 0xBBBB0000,
			ExpectedRefTag: 7, ActualRefTag: 8, Syndrome: SigErrGuard, Domain: 1, Mkey: 0x00123456, ErrOffset: 0x1040}},
			strings.Repeat("00", 16) + "aaaa0000 bbbb0000 00000007 00000008 2000 00 01 00123456 0000000000001040 0000000000000000 00000055 0000 00 c0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := make(CQE, CQESize)
			last := c.Encode(&tc.f, 0)
			copy(c[60:], last[:])
			require.Equal(t, unhex(t, tc.want), []byte(c), "%s: encoded bytes", tc.name)
			require.Equal(t, tc.f, c.Fields(), "%s: decoded fields", tc.name)
		})
	}
}

func newRing(t *testing.T, logSize uint8, notify func()) (*Ring, []byte, []byte) {
	t.Helper()
	buf := make([]byte, CQESize<<logSize)
	db := make([]byte, DBRecSize)
	InitRing(buf)
	r, err := NewRing(buf, db, logSize, notify)
	require.NoError(t, err)
	return r, buf, db
}

// The owner bit flips every pass; the driver sees exactly the CQEs written.
func TestRingOwnerBitAndOverflow(t *testing.T) {
	r, buf, db := newRing(t, 2, nil)
	ci := uint32(0)
	for pass := range 5 {
		for i := range 4 {
			require.NoError(t, r.Push(&Fields{Opcode: OpReq, QPN: 1, WQECounter: uint16(pass*4 + i)}, false), "pass %d push %d", pass, i)
		}
		for range 4 {
			c, ok := Poll(buf, 2, ci)
			require.True(t, ok, "poll %d: no valid CQE", ci)
			require.Equal(t, uint16(ci), c.WQECounter(), "poll %d: WQE counter", ci)
			require.Equal(t, uint8(ci>>2)&1, c.Owner(), "poll %d: owner bit", ci)
			ci++
			SetConsumerIndex(db, ci)
		}
		_, ok := Poll(buf, 2, ci)
		require.False(t, ok, "pass %d: a CQE beyond the producer looks valid", pass)
	}
	// Fill without consuming: the fifth CQE overflows, and the ring stays broken.
	for i := range 4 {
		require.NoError(t, r.Push(&Fields{Opcode: OpReq}, false), "fill push %d", i)
	}
	before := append([]byte(nil), buf...)
	require.ErrorIs(t, r.Push(&Fields{Opcode: OpReq}, false), ErrOverflow, "push into a full ring")
	require.Equal(t, before, buf, "an overflowing push wrote into the ring")
	require.True(t, r.Broken(), "the ring is not broken after an overflow")
	SetConsumerIndex(db, ci+4)
	require.ErrorIs(t, r.Push(&Fields{Opcode: OpReq}, false), ErrOverflow, "a broken ring accepted a CQE")
	_, err := NewRing(make([]byte, 100), db, 2, nil)
	require.ErrorIs(t, err, ErrGeometry, "bad geometry accepted")
}

func TestArm(t *testing.T) {
	var events atomic.Int32
	r, _, db := newRing(t, 4, func() { events.Add(1) })
	push := func(op Opcode, sol bool) {
		require.NoError(t, r.Push(&Fields{Opcode: op}, sol), "push opcode %v solicited %v", op, sol)
	}
	push(OpReq, false)
	require.Equal(t, int32(0), events.Load(), "event without arming")
	// Arming at ci 0 with a CQE already there fires at once.
	r.Arm(ArmWord(0, ArmNext, 0))
	require.Equal(t, int32(1), events.Load(), "events after arming over a pending CQE")
	// Consumed: arm, then the next CQE fires once.
	SetConsumerIndex(db, 1)
	r.Arm(ArmWord(1, ArmNext, 1))
	require.Equal(t, int32(1), events.Load(), "arming an empty CQ fired")
	push(OpReq, false)
	push(OpReq, false)
	require.Equal(t, int32(2), events.Load(), "events: want one per arming")
	// Solicited arming: an unsolicited CQE does not fire, a solicited or an
	// error CQE does.
	SetConsumerIndex(db, 3)
	r.Arm(ArmWord(2, ArmSolicited, 3))
	push(OpRespSend, false)
	require.Equal(t, int32(2), events.Load(), "unsolicited CQE fired a solicited arming")
	push(OpRespSend, true)
	require.Equal(t, int32(3), events.Load(), "solicited CQE did not fire")
	r.Arm(ArmWord(3, ArmSolicited, 5))
	push(OpReqErr, false)
	require.Equal(t, int32(4), events.Load(), "error CQE did not fire a solicited arming")
	require.Equal(t, ArmWord(3, ArmSolicited, 5), dbWord(db), "arm word in the doorbell record")
}

func dbWord(db []byte) uint32 {
	return uint32(db[4])<<24 | uint32(db[5])<<16 | uint32(db[6])<<8 | uint32(db[7])
}

// Producers and a consumer on different goroutines: every CQE arrives once,
// in order per producer (run with -race).
func TestConcurrentProducers(t *testing.T) {
	r, buf, db := newRing(t, 6, nil)
	const per = 2000
	var wg sync.WaitGroup
	for p := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; {
				err := r.Push(&Fields{Opcode: OpReq, QPN: uint32(p), WQECounter: uint16(i)}, false)
				if !assert.NoError(t, err, "producer %d push %d (an overflow: the consumer checks space below)", p, i) {
					return
				}
				i++
				for r.Outstanding() >= r.Size()-4 { // leave room: this test is not about overflow
				}
			}
		}()
	}
	next := [3]uint16{}
	for ci := uint32(0); ci < 3*per; {
		c, ok := Poll(buf, 6, ci)
		if !ok {
			continue
		}
		q := c.QPN()
		require.Equal(t, next[q], c.WQECounter(), "producer %d: WQE counter", q)
		next[q]++
		ci++
		SetConsumerIndex(db, ci)
	}
	wg.Wait()
}

// PushN writes a batch in order under one lock, as Push would one by
// one: an overflow in the middle writes the CQEs before it and breaks the
// ring; a consumer index that moved during the batch is seen before an
// overflow is declared; an armed CQ fires once for the batch.
func TestPushN(t *testing.T) {
	var events atomic.Int32
	r, buf, db := newRing(t, 2, func() { events.Add(1) })
	r.Arm(ArmWord(0, ArmNext, 0))
	fs := make([]Fields, 3)
	for i := range fs {
		fs[i] = Fields{Opcode: OpReq, QPN: 7, WQECounter: uint16(i)}
	}
	n, err := r.PushN(fs, false)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, int32(1), events.Load(), "events for one batch after arming")
	for ci := range uint32(3) {
		c, ok := Poll(buf, 2, ci)
		require.True(t, ok, "CQE %d", ci)
		require.Equal(t, uint16(ci), c.WQECounter(), "CQE %d", ci)
	}
	// The driver consumed two: a batch of three fits (one slot left plus two).
	SetConsumerIndex(db, 2)
	n, err = r.PushN(fs, false)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	// Nothing consumed since: one more batch of two overflows at once.
	n, err = r.PushN(fs[:2], false)
	require.ErrorIs(t, err, ErrOverflow)
	require.Equal(t, 0, n)
	require.True(t, r.Broken())
	// A batch that overflows in its middle writes what fits.
	r2, _, db2 := newRing(t, 2, nil)
	n, err = r2.PushN(append(fs, fs[:2]...), false)
	require.ErrorIs(t, err, ErrOverflow)
	require.Equal(t, 4, n, "CQEs written before the overflow")
	SetConsumerIndex(db2, 4)
	_, err = r2.PushN(fs[:1], false)
	require.ErrorIs(t, err, ErrOverflow, "a broken ring took a CQE")
}
