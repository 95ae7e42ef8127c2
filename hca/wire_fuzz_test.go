package hca_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/roce"
)

// fuzzHosts is this fuzz process's pair of loopback hosts: the device's
// port and the peer the fuzzer speaks as.
var fuzzHosts = func() [2]netip.AddrPort {
	x, y := byte(1+rand.IntN(254)), byte(rand.IntN(256))
	return [2]netip.AddrPort{
		netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, x, y, 2}), 4791),
		netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, x, y, 3}), 4791),
	}
}()

// fuzzSeedPacket is a RoCEv2 packet (no ICRC: the fuzz body seals it).
func fuzzSeedPacket(p roce.Packet, payload []byte) []byte {
	b, err := p.Append(nil, payload)
	if err != nil {
		panic(err)
	}
	return b[:len(b)-roce.ICRCSize]
}

// FuzzWirePackets: any datagrams from a QP's peer — requests, responses,
// truncated or nonsense, with a good ICRC or not — leave the device
// working: a WRITE posted afterwards gets exactly one completion, and every
// packet the device sends meanwhile decodes with a good ICRC.
func FuzzWirePackets(f *testing.F) {
	h := roce.BTH{PKey: 0xFFFF, AckReq: true}
	with := func(op roce.Opcode, psn uint32) roce.BTH { b := h; b.Opcode, b.PSN = op, psn; return b }
	reth := roce.RETH{VA: 0, RKey: 0, DMALen: 8}
	f.Add(uint8(3), fuzzSeedPacket(roce.Packet{BTH: with(roce.OpWriteOnly, 0), RETH: reth}, make([]byte, 8)))
	f.Add(uint8(3), fuzzSeedPacket(roce.Packet{BTH: with(roce.OpSendOnly, 0)}, []byte("hello")))
	f.Add(uint8(3), fuzzSeedPacket(roce.Packet{BTH: with(roce.OpReadRequest, 0), RETH: roce.RETH{DMALen: 5000}}, nil))
	f.Add(uint8(3), fuzzSeedPacket(roce.Packet{BTH: with(roce.OpFetchAdd, 0), Atomic: roce.AtomicETH{SwapAdd: 1}}, nil))
	f.Add(uint8(3), append(fuzzSeedPacket(roce.Packet{BTH: with(roce.OpWriteFirst, 0), RETH: roce.RETH{DMALen: 8192}}, make([]byte, 4096)),
		fuzzSeedPacket(roce.Packet{BTH: with(roce.OpWriteLast, 2)}, make([]byte, 4096))...))
	f.Add(uint8(1), fuzzSeedPacket(roce.Packet{BTH: with(roce.OpAcknowledge, 0), AETH: roce.AETH{Syndrome: roce.SyndromeNAKPSNSequence}}, nil))
	f.Add(uint8(1), fuzzSeedPacket(roce.Packet{BTH: with(roce.OpReadResponseOnly, 0), AETH: roce.AETH{Syndrome: roce.SyndromeACK}}, make([]byte, 64)))
	// Transports the device's RC QPs do not take: dropped and counted.
	f.Add(uint8(3), fuzzSeedPacket(roce.Packet{BTH: with(roce.OpUDSendOnly, 0), DETH: roce.DETH{QKey: 0x11111111, SrcQP: 1}}, []byte("datagram")))
	f.Add(uint8(3), fuzzSeedPacket(roce.Packet{BTH: with(roce.XRCBase|roce.OpSendOnly, 0), XRCETH: roce.XRCETH{XRCSRQ: 1}}, []byte("xrc")))
	f.Add(uint8(3), fuzzSeedPacket(roce.Packet{BTH: with(roce.UCBase|roce.OpWriteOnly, 0), RETH: reth}, make([]byte, 8)))
	// A UC QP (flag bit 3): its own opcodes, a message with a gap, RC
	// packets it does not take.
	f.Add(uint8(8|3), fuzzSeedPacket(roce.Packet{BTH: with(roce.UCBase|roce.OpSendOnly, 0)}, []byte("uc send")))
	f.Add(uint8(8|3), append(fuzzSeedPacket(roce.Packet{BTH: with(roce.UCBase|roce.OpWriteFirst, 0), RETH: roce.RETH{DMALen: 8192}}, make([]byte, 4096)),
		fuzzSeedPacket(roce.Packet{BTH: with(roce.UCBase|roce.OpWriteLast, 3)}, make([]byte, 4096))...))
	f.Add(uint8(8|3), fuzzSeedPacket(roce.Packet{BTH: with(roce.OpWriteOnly, 0), RETH: reth}, make([]byte, 8)))
	// XRC (flag bit 4): requests to the target with the XRCETH naming its
	// SRQ (1) or none, responses to the initiator, RC packets refused.
	f.Add(uint8(16|3), fuzzSeedPacket(roce.Packet{BTH: with(roce.XRCBase|roce.OpSendOnly, 0), XRCETH: roce.XRCETH{XRCSRQ: 1}}, []byte("xrc send")))
	f.Add(uint8(16|3), fuzzSeedPacket(roce.Packet{BTH: with(roce.XRCBase|roce.OpWriteOnly, 0), XRCETH: roce.XRCETH{XRCSRQ: 1}, RETH: reth}, make([]byte, 8)))
	f.Add(uint8(16|3), fuzzSeedPacket(roce.Packet{BTH: with(roce.XRCBase|roce.OpSendOnly, 0), XRCETH: roce.XRCETH{XRCSRQ: 9}}, []byte("no such srq")))
	f.Add(uint8(16|3), fuzzSeedPacket(roce.Packet{BTH: with(roce.XRCBase|roce.OpReadRequest, 0), XRCETH: roce.XRCETH{XRCSRQ: 1}, RETH: roce.RETH{DMALen: 3000}}, nil))
	f.Add(uint8(16|3), fuzzSeedPacket(roce.Packet{BTH: with(roce.OpSendOnly, 0)}, []byte("rc to a target")))
	f.Add(uint8(16), fuzzSeedPacket(roce.Packet{BTH: with(roce.XRCBase|roce.OpAcknowledge, 0), AETH: roce.AETH{Syndrome: roce.SyndromeACK}}, nil))
	f.Add(uint8(0), []byte{0xFF, 0, 0})
	f.Fuzz(func(t *testing.T, flags uint8, raw []byte) {
		dev := hca.New(hca.Options{TimeScale: 1000})
		defer dev.Close()
		if err := dev.ListenRoCE(hca.WireOptions{Addr: fuzzHosts[0]}); err != nil {
			t.Skip("no loopback port:", err)
		}
		peer, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(fuzzHosts[1]))
		if err != nil {
			t.Skip("no loopback port:", err)
		}
		defer peer.Close()
		ctx, err := verbs.Open(dev)
		require.NoError(t, err)
		defer ctx.Close()
		pd, _ := ctx.AllocPD()
		buf, err := ctx.Alloc(1 << 16)
		require.NoError(t, err)
		mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		require.NoError(t, err)
		// The WRITE posted at the end reads a buffer of its own: the fuzzed
		// packets may write all of mr (two engines on one buffer would be
		// the application's race, not the device's).
		src, err := ctx.Alloc(4096)
		require.NoError(t, err)
		srcMR, err := pd.RegMR(src, verbs.AccessLocalWrite)
		require.NoError(t, err)
		cq, _ := ctx.CreateCQ(256, nil)
		typ := verbs.QPTypeRC
		switch {
		case flags&16 != 0:
			typ = verbs.QPTypeXRCSend
		case flags&8 != 0:
			typ = verbs.QPTypeUC
		}
		qp, err := pd.CreateQP(&verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		remote := verbs.QPInfo{GID: hca.GIDOf(fuzzHosts[1].Addr()), QPN: 0x77, PSN: 0}
		opts := &verbs.ConnectOptions{Timeout: 1, RetryCnt: 1, RNRRetry: 1, MinRNRTimer: 1}
		require.NoError(t, qp.Connect(remote, opts))
		aim := qp.QPN()
		if typ == verbs.QPTypeXRCSend {
			// The packets go to an XRC target of a domain with one SRQ.
			x, err := ctx.AllocXRCD()
			require.NoError(t, err)
			srq, err := pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 16, MaxSGE: 1, XRCD: x, CQ: cq})
			require.NoError(t, err)
			_, err = srq.PostRecv([]verbs.RecvWR{{WRID: 1, SG: []verbs.SGE{mr.SGE(0, 4096)}}})
			require.NoError(t, err)
			tgt, err := x.CreateTarget()
			require.NoError(t, err)
			require.NoError(t, tgt.Connect(remote, opts))
			aim = tgt.QPN()
		} else {
			_, err = qp.PostRecv([]verbs.RecvWR{{WRID: 1, SG: []verbs.SGE{mr.SGE(0, 4096)}}})
			require.NoError(t, err)
		}
		// raw holds packets one after the other: a 16-bit length, then
		// the packet. flags: bit 0 aims them at the QP (an XRC target),
		// bit 1 points a RETH or AtomicETH at the MR, bit 2 leaves the
		// ICRC bad, bit 3 makes the QP UC, bit 4 an XRC initiator with a
		// target beside it.
		to := net.UDPAddrFromAddrPort(fuzzHosts[0])
		for n := 0; len(raw) > 0 && n < 64; n++ {
			k := len(raw)
			if len(raw) >= 2 {
				if l := int(binary.BigEndian.Uint16(raw)); l+2 <= len(raw) && l > 0 {
					k, raw = l, raw[2:]
				}
			}
			pkt := append([]byte(nil), raw[:min(k, len(raw))]...)
			raw = raw[min(k, len(raw)):]
			if len(pkt) >= roce.BTHSize {
				if flags&1 != 0 {
					pkt[5], pkt[6], pkt[7] = byte(aim>>16), byte(aim>>8), byte(aim)
				}
				op := roce.Opcode(pkt[0])
				at := roce.BTHSize // the RETH or AtomicETH, after an XRCETH
				if op.IsValid() && op.Ext()&roce.ExtXRCETH != 0 {
					at += roce.XRCETHSize
				}
				if flags&2 != 0 && op.IsValid() && len(pkt) >= at+16 && (op.Ext()&(roce.ExtRETH|roce.ExtAtomicETH)) != 0 {
					binary.BigEndian.PutUint64(pkt[at:], mr.Addr+uint64(pkt[at]&0x3F)*8)
					binary.BigEndian.PutUint32(pkt[at+8:], mr.RKey)
				}
			}
			crc, err := roce.DatagramICRC(fuzzHosts[1], fuzzHosts[0], pkt)
			if err != nil {
				continue
			}
			if flags&4 != 0 {
				crc ^= 1
			}
			pkt = binary.LittleEndian.AppendUint32(pkt, crc)
			peer.WriteToUDP(pkt, to)
		}
		if _, err := qp.PostSend([]verbs.SendWR{{WRID: 999, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{srcMR.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 0x1234, XRCSRQN: 1}}); err != nil {
			return // the QP went to error: posting is refused, as it should be
		}
		// Every packet the device sends is well formed, until the WRITE
		// completes (with RETRY_EXC_ERR: nobody answers it — or however
		// the fuzzed packets left the QP; a UC WRITE succeeds once sent).
		got := make(chan error, 1)
		var done atomic.Bool
		go func() {
			b := make([]byte, 9000)
			var p roce.Packet
			for {
				if done.Load() {
					got <- nil
					return
				}
				peer.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
				n, from, err := peer.ReadFromUDPAddrPort(b)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					continue
				}
				if err != nil {
					got <- nil
					return
				}
				crc, err := roce.DatagramICRC(from, fuzzHosts[1], b[:n-roce.ICRCSize])
				if err != nil || crc != binary.LittleEndian.Uint32(b[n-roce.ICRCSize:n]) {
					got <- err
					return
				}
				if err := p.DecodeFromBytes(b[:n], gopacket.NilDecodeFeedback); err != nil {
					got <- err
					return
				}
			}
		}()
		wcs := make([]verbs.WC, 16)
		deadline := time.Now().Add(10 * time.Second)
		for seen := 0; ; {
			n, _ := cq.Poll(wcs)
			for _, wc := range wcs[:n] {
				if wc.WRID == 999 {
					seen++
				}
			}
			if seen > 1 {
				t.Fatal("the WRITE completed twice")
			}
			if seen == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the WRITE did not complete; QP %v", qp.State())
			}
			time.Sleep(100 * time.Microsecond)
		}
		done.Store(true)
		require.NoError(t, <-got, "the device sent a bad packet")
	})
}
