package cq

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
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
			if want := unhex(t, tc.want); !bytes.Equal(c, want) {
				t.Fatalf("\n got % x\nwant % x", []byte(c), want)
			}
			if got := c.Fields(); got != tc.f {
				t.Fatalf("decoded\n got %+v\nwant %+v", got, tc.f)
			}
		})
	}
}

func newRing(t *testing.T, logSize uint8, notify func()) (*Ring, []byte, []byte) {
	t.Helper()
	buf := make([]byte, CQESize<<logSize)
	db := make([]byte, DBRecSize)
	InitRing(buf)
	r, err := NewRing(buf, db, logSize, notify)
	if err != nil {
		t.Fatal(err)
	}
	return r, buf, db
}

// The owner bit flips every pass; the driver sees exactly the CQEs written.
func TestRingOwnerBitAndOverflow(t *testing.T) {
	r, buf, db := newRing(t, 2, nil)
	ci := uint32(0)
	for pass := range 5 {
		for i := range 4 {
			if err := r.Push(&Fields{Opcode: OpReq, QPN: 1, WQECounter: uint16(pass*4 + i)}, false); err != nil {
				t.Fatalf("pass %d push %d: %v", pass, i, err)
			}
		}
		for range 4 {
			c, ok := Poll(buf, 2, ci)
			if !ok || c.WQECounter() != uint16(ci) || c.Owner() != uint8(ci>>2)&1 {
				t.Fatalf("poll %d: ok %v counter %d owner %d", ci, ok, c.WQECounter(), c.Owner())
			}
			ci++
			SetConsumerIndex(db, ci)
		}
		if _, ok := Poll(buf, 2, ci); ok {
			t.Fatalf("pass %d: a CQE beyond the producer looks valid", pass)
		}
	}
	// Fill without consuming: the fifth CQE overflows, and the ring stays broken.
	for range 4 {
		if err := r.Push(&Fields{Opcode: OpReq}, false); err != nil {
			t.Fatal(err)
		}
	}
	before := append([]byte(nil), buf...)
	if err := r.Push(&Fields{Opcode: OpReq}, false); !errors.Is(err, ErrOverflow) {
		t.Fatalf("push into a full ring: %v", err)
	}
	if !bytes.Equal(buf, before) || !r.Broken() {
		t.Fatal("an overflowing push wrote into the ring, or the ring is not broken")
	}
	SetConsumerIndex(db, ci+4)
	if err := r.Push(&Fields{Opcode: OpReq}, false); !errors.Is(err, ErrOverflow) {
		t.Fatal("a broken ring accepted a CQE")
	}
	if _, err := NewRing(make([]byte, 100), db, 2, nil); !errors.Is(err, ErrGeometry) {
		t.Fatal("bad geometry accepted")
	}
}

func TestArm(t *testing.T) {
	var events atomic.Int32
	r, _, db := newRing(t, 4, func() { events.Add(1) })
	push := func(op Opcode, sol bool) {
		if err := r.Push(&Fields{Opcode: op}, sol); err != nil {
			t.Fatal(err)
		}
	}
	push(OpReq, false)
	if events.Load() != 0 {
		t.Fatal("event without arming")
	}
	// Arming at ci 0 with a CQE already there fires at once.
	r.Arm(ArmWord(0, ArmNext, 0))
	if events.Load() != 1 {
		t.Fatalf("events %d after arming over a pending CQE", events.Load())
	}
	// Consumed: arm, then the next CQE fires once.
	SetConsumerIndex(db, 1)
	r.Arm(ArmWord(1, ArmNext, 1))
	if events.Load() != 1 {
		t.Fatal("arming an empty CQ fired")
	}
	push(OpReq, false)
	push(OpReq, false)
	if events.Load() != 2 {
		t.Fatalf("events %d: want one per arming", events.Load())
	}
	// Solicited arming: an unsolicited CQE does not fire, a solicited or an
	// error CQE does.
	SetConsumerIndex(db, 3)
	r.Arm(ArmWord(2, ArmSolicited, 3))
	push(OpRespSend, false)
	if events.Load() != 2 {
		t.Fatal("unsolicited CQE fired a solicited arming")
	}
	push(OpRespSend, true)
	if events.Load() != 3 {
		t.Fatal("solicited CQE did not fire")
	}
	r.Arm(ArmWord(3, ArmSolicited, 5))
	push(OpReqErr, false)
	if events.Load() != 4 {
		t.Fatal("error CQE did not fire a solicited arming")
	}
	if got := dbWord(db); got != ArmWord(3, ArmSolicited, 5) {
		t.Fatalf("arm word in the doorbell record %#x", got)
	}
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
				if err := r.Push(&Fields{Opcode: OpReq, QPN: uint32(p), WQECounter: uint16(i)}, false); err == nil {
					i++
				} else if !errors.Is(err, ErrOverflow) {
					t.Error(err)
					return
				} else {
					t.Error("overflow: the consumer checks space below")
					return
				}
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
		if c.WQECounter() != next[q] {
			t.Fatalf("producer %d: counter %d, want %d", q, c.WQECounter(), next[q])
		}
		next[q]++
		ci++
		SetConsumerIndex(db, ci)
	}
	wg.Wait()
}
