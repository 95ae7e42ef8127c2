package roce_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/roce"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
)

// The worked example of docs/reference roce-wire.md §2.2 (built and checked
// with scapy 2.5.0, decoded by tshark): RC SEND ONLY to QP 0x11, PSN 1,
// AckReq, "hello world!", 192.168.0.1:49443 → 192.168.0.2:4791, TOS 0x02,
// TTL 64, ID 0, DF.
func example() (roce.Endpoint, roce.Endpoint, roce.FrameOptions, *roce.Packet, []byte) {
	src := roce.Endpoint{MAC: macA, IP: netip.MustParseAddr("192.168.0.1"), Port: 49443}
	dst := roce.Endpoint{MAC: macB, IP: netip.MustParseAddr("192.168.0.2")}
	p := &roce.Packet{BTH: roce.BTH{Opcode: roce.OpSendOnly, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 1}}
	return src, dst, roce.FrameOptions{TrafficClass: 0x02, HopLimit: 64}, p, []byte("hello world!")
}

const exampleFrame = "020000000002 020000000001 0800" +
	"4502 0038 0000 4000 4011 b95f c0a80001 c0a80002" +
	"c123 12b7 0024 0000" +
	"04 00 ffff 00 000011 80 000001" +
	"68656c6c6f20776f726c6421" +
	"6c2dc289"

func TestWorkedExample(t *testing.T) {
	src, dst, o, p, payload := example()
	frame, err := roce.NewFrameBuilder().Build(src, dst, o, p, payload)
	require.NoError(t, err)
	assert.Equal(t, unhex(t, exampleFrame), frame)
	assert.Equal(t, uint32(0x89c22d6c), p.ICRC, "the zlib value; its low byte goes first")

	parser := roce.NewParser()
	require.NoError(t, parser.Decode(frame))
	assert.Equal(t, roce.OpSendOnly, parser.Packet.Opcode)
	assert.Equal(t, uint32(0x11), parser.Packet.DestQP)
	assert.Equal(t, payload, []byte(parser.Packet.Payload))

	// The same ICRC for the datagram a UDP socket sends (ID 0, DF).
	crc, err := roce.DatagramICRC(netip.MustParseAddrPort("192.168.0.1:49443"), netip.MustParseAddrPort("192.168.0.2:4791"),
		frame[14+20+8:len(frame)-4])
	require.NoError(t, err)
	assert.Equal(t, p.ICRC, crc)
}

// The invariance of roce-wire.md §2.2: the masked fields leave the ICRC
// alone; covered ones give scapy's values (the wire bytes).
func TestICRCVariants(t *testing.T) {
	base := unhex(t, exampleFrame)
	l3 := func(f []byte) []byte { return f[14:] }
	for _, tc := range []struct {
		name string
		edit func(f []byte)
		wire string // "" for unchanged
	}{
		{"TTL 1", func(f []byte) { f[14+8] = 1 }, ""},
		{"DSCP 46", func(f []byte) { f[14+1] = 0xB8 }, ""},
		{"ECN CE", func(f []byte) { f[14+1] = 0x03 }, ""},
		{"IP checksum", func(f []byte) { f[14+10] = 0 }, ""},
		{"UDP checksum", func(f []byte) { binary.BigEndian.PutUint16(f[14+20+6:], 0x1234) }, ""},
		{"FECN BECN", func(f []byte) { f[14+28+4] = 0xC0 }, ""},
		{"IP ID 7", func(f []byte) { f[14+5] = 7 }, "161bdc4c"},
		{"DF clear", func(f []byte) { f[14+6] = 0 }, "7fa727a1"},
		{"UDP sport", func(f []byte) { f[14+21] = 0x24 }, "5bb775a1"},
		{"PSN 2", func(f []byte) { f[14+28+11] = 2 }, "a2410834"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := bytes.Clone(base)
			tc.edit(f)
			if tc.wire == "" {
				assert.NoError(t, roce.CheckICRC(l3(f)))
				return
			}
			assert.ErrorIs(t, roce.CheckICRC(l3(f)), roce.ErrICRC)
			require.NoError(t, roce.SealICRC(l3(f)))
			assert.Equal(t, tc.wire, hex.EncodeToString(f[len(f)-4:]))
		})
	}
}

// roce-wire.md §2.2's IPv6 variant: fe80::1 → fe80::2, TC 0x02, flow
// label 0x12345, hop limit 64.
func TestICRCIPv6(t *testing.T) {
	src, dst, o, p, payload := example()
	src.IP, dst.IP = netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
	o.FlowLabel = 0x12345
	frame, err := roce.NewFrameBuilder().Build(src, dst, o, p, payload)
	require.NoError(t, err)
	assert.Equal(t, "8d253f47", hex.EncodeToString(frame[len(frame)-4:]))
	crc, err := roce.DatagramICRC(netip.MustParseAddrPort("[fe80::1]:49443"), netip.MustParseAddrPort("[fe80::2]:4791"),
		frame[14+40+8:len(frame)-4])
	require.NoError(t, err)
	assert.Equal(t, p.ICRC, crc)
	// Traffic class, flow label and hop limit are masked.
	frame[14+1] ^= 0xFF
	frame[14+7] = 1
	assert.NoError(t, roce.CheckICRC(frame[14:]))
}

// opCase is a packet and its payload.
type opCase struct {
	p       roce.Packet
	payload []byte
}

// allOpcodes returns one packet of every RC opcode with every field of its
// headers set, and a payload for those that carry one.
func allOpcodes() []opCase {
	var out []opCase
	for i := 0; i < 256; i++ {
		op := roce.Opcode(i)
		if !op.IsValid() {
			continue
		}
		p := roce.Packet{
			BTH:       roce.BTH{Opcode: op, SE: op&1 == 1, PKey: 0xFFFF, DestQP: 0x123456, AckReq: op.IsRequest(), PSN: 0xFFFFFE + uint32(op)&roce.PSNMask},
			RETH:      roce.RETH{VA: 0x1122334455667788, RKey: 0xabcd, DMALen: 600},
			Atomic:    roce.AtomicETH{VA: 0x1000, RKey: 0x77, SwapAdd: 0x5555, Compare: 0x4444},
			AETH:      roce.AETH{Syndrome: roce.SyndromeRNR(14), MSN: 0xABCDEF},
			AtomicAck: 0x4444,
			Imm:       0xdeadbeef,
			InvRKey:   0x0badcafe,
			DETH:      roce.DETH{QKey: 0x11111111, SrcQP: 0x000abc},
			XRCETH:    roce.XRCETH{XRCSRQ: 0x00beef},
		}
		p.PSN &= roce.PSNMask
		var payload []byte
		if op.HasPayload() {
			payload = []byte("payload-" + op.String())[:9+int(op)%4]
		}
		out = append(out, opCase{p, payload})
	}
	return out
}

// want returns p with only the fields its opcode carries.
func want(p roce.Packet) roce.Packet {
	ext := p.Opcode.Ext()
	w := roce.Packet{BTH: p.BTH, ICRC: p.ICRC}
	if ext&roce.ExtRETH != 0 {
		w.RETH = p.RETH
	}
	if ext&roce.ExtAtomicETH != 0 {
		w.Atomic = p.Atomic
	}
	if ext&roce.ExtAETH != 0 {
		w.AETH = p.AETH
	}
	if ext&roce.ExtAtomicAckETH != 0 {
		w.AtomicAck = p.AtomicAck
	}
	if ext&roce.ExtImmDt != 0 {
		w.Imm = p.Imm
	}
	if ext&roce.ExtDETH != 0 {
		w.DETH = p.DETH
	}
	if ext&roce.ExtXRCETH != 0 {
		w.XRCETH = p.XRCETH
	}
	if ext&roce.ExtIETH != 0 {
		w.InvRKey = p.InvRKey
	}
	return w
}

func TestRoundTrip(t *testing.T) {
	b, parser := roce.NewFrameBuilder(), roce.NewParser()
	src := roce.Endpoint{MAC: macA, IP: netip.MustParseAddr("127.0.0.2"), Port: 0xC001}
	dst := roce.Endpoint{MAC: macB, IP: netip.MustParseAddr("127.0.0.3")}
	for _, c := range allOpcodes() {
		for _, v6 := range []bool{false, true} {
			s, d := src, dst
			if v6 {
				s.IP, d.IP = netip.MustParseAddr("::1"), netip.MustParseAddr("::1")
			}
			p := c.p
			frame, err := b.Build(s, d, roce.FrameOptions{}, &p, c.payload)
			require.NoError(t, err, "%v", p.Opcode)
			require.NoError(t, parser.Decode(frame), "%v", p.Opcode)
			got := parser.Packet
			assert.Equal(t, string(c.payload), string(got.Payload), "%v", p.Opcode)
			assert.Equal(t, p.Opcode.HeaderLen(), len(got.Contents))
			got.BaseLayer = layers.BaseLayer{}
			assert.Equal(t, want(p), got, "%v", p.Opcode)
			assert.Equal(t, roce.PadFor(len(c.payload)), got.PadCount)

			// The datagram path gives the same bytes as gopacket's.
			q := c.p
			q.ICRC = p.ICRC
			dg, err := q.Append(nil, c.payload)
			require.NoError(t, err)
			assert.Equal(t, []byte(parser.UDP.Payload), dg, "%v", p.Opcode)
		}
	}
}

func TestNewPacket(t *testing.T) {
	src, dst, o, p, payload := example()
	frame, err := roce.NewFrameBuilder().Build(src, dst, o, p, payload)
	require.NoError(t, err)
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	var types []gopacket.LayerType
	for _, l := range pkt.Layers() {
		types = append(types, l.LayerType())
	}
	assert.Equal(t, []gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeUDP, roce.LayerTypeRoCE, gopacket.LayerTypePayload}, types)
	r, ok := pkt.Layer(roce.LayerTypeRoCE).(*roce.Packet)
	require.True(t, ok)
	assert.Equal(t, uint32(1), r.PSN)
}

func TestDecodeErrors(t *testing.T) {
	var p roce.Packet
	df := gopacket.NilDecodeFeedback
	pkt := func(op byte, pad byte, n int) []byte {
		b := make([]byte, n)
		b[0], b[1] = op, pad<<4
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, roce.ErrTruncated},
		{"BTH only", pkt(0x04, 0, 12), roce.ErrTruncated},
		{"reserved opcode", pkt(0x15, 0, 16), roce.ErrOpcode},
		{"FLUSH", pkt(0x1C, 0, 48), roce.ErrOpcode},
		{"UC READ REQUEST (UC has no READ)", pkt(0x2C, 0, 32), roce.ErrOpcode},
		{"UD SEND FIRST (a datagram is one packet)", pkt(0x60, 0, 24), roce.ErrOpcode},
		{"RD", pkt(0x44, 0, 32), roce.ErrOpcode},
		{"UD SEND ONLY without DETH", pkt(0x64, 0, 16), roce.ErrTruncated},
		{"XRC WRITE ONLY without XRCETH and RETH", pkt(0xAA, 0, 28), roce.ErrTruncated},
		{"CNP", pkt(0x81, 0, 32), roce.ErrOpcode},
		{"WRITE ONLY without RETH", pkt(0x0A, 0, 20), roce.ErrTruncated},
		{"pad past the headers", pkt(0x04, 3, 18), roce.ErrTruncated},
		{"ACK with data", pkt(0x11, 0, 24), roce.ErrLength},
		{"READ REQUEST with data", pkt(0x0C, 0, 36), roce.ErrLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p = roce.Packet{}
			assert.ErrorIs(t, p.DecodeFromBytes(tc.b, df), tc.err)
			assert.Equal(t, roce.Packet{}, p, "an error leaves the packet alone")
		})
	}
	// A pad's bytes come off the payload.
	b := pkt(0x04, 2, 12+3+4)
	require.NoError(t, p.DecodeFromBytes(b, df))
	assert.Len(t, p.Payload, 1)

	// Encoding refuses what decoding would.
	_, err := (&roce.Packet{BTH: roce.BTH{Opcode: 0x15}}).Append(nil, nil)
	assert.ErrorIs(t, err, roce.ErrOpcode)
	_, err = (&roce.Packet{BTH: roce.BTH{Opcode: roce.OpAcknowledge}}).Append(nil, []byte{1})
	assert.ErrorIs(t, err, roce.ErrLength)
}

func TestParserRefuses(t *testing.T) {
	src, dst, o, p, payload := example()
	good, err := roce.NewFrameBuilder().Build(src, dst, o, p, payload)
	require.NoError(t, err)
	parser := roce.NewParser()

	f := bytes.Clone(good)
	f[len(f)-5] ^= 1 // a payload bit
	assert.ErrorIs(t, parser.Decode(f), roce.ErrICRC)

	f = bytes.Clone(good)
	binary.BigEndian.PutUint16(f[14+20+2:], 4790) // another UDP port
	assert.ErrorIs(t, parser.Decode(f), roce.ErrNotRoCE)

	f = bytes.Clone(good)
	f[14+28] = 0x15 // a reserved opcode
	assert.ErrorIs(t, parser.Decode(f), roce.ErrOpcode)

	assert.ErrorIs(t, parser.Decode(good[:30]), roce.ErrNotRoCE)
	assert.ErrorIs(t, parser.Decode(nil), roce.ErrNotRoCE)

	// Ethernet padding (a frame under 60 bytes) is not taken for the ICRC.
	p = &roce.Packet{BTH: roce.BTH{Opcode: roce.OpSendOnly, DestQP: 3, PSN: 9}}
	short, err := roce.NewFrameBuilder().Build(src, dst, o, p, nil) // 58 bytes, padded to 60
	require.NoError(t, err)
	assert.Len(t, short, 60)
	assert.NoError(t, parser.Decode(short))
}

func TestSegment(t *testing.T) {
	type seg struct {
		op roce.Opcode
		n  int
	}
	segs := func(m roce.Message, length, pmtu int) []seg {
		var out []seg
		for i := 0; ; i++ {
			op, n, ok := roce.Segment(m, length, pmtu, i)
			if !ok {
				return out
			}
			out = append(out, seg{op, n})
		}
	}
	assert.Equal(t, []seg{{roce.OpWriteOnly, 0}}, segs(roce.MsgWrite, 0, 1024))
	assert.Equal(t, []seg{{roce.OpWriteOnly, 1024}}, segs(roce.MsgWrite, 1024, 1024))
	assert.Equal(t, []seg{{roce.OpWriteFirst, 1024}, {roce.OpWriteLast, 1}}, segs(roce.MsgWrite, 1025, 1024))
	assert.Equal(t, []seg{{roce.OpSendFirst, 256}, {roce.OpSendMiddle, 256}, {roce.OpSendMiddle, 256}, {roce.OpSendLastImm, 232}},
		segs(roce.MsgSendImm, 1000, 256))
	assert.Equal(t, []seg{{roce.OpSendOnlyInv, 10}}, segs(roce.MsgSendInv, 10, 4096))
	assert.Equal(t, []seg{{roce.OpReadResponseFirst, 4096}, {roce.OpReadResponseLast, 4096}}, segs(roce.MsgReadResponse, 8192, 4096))
	assert.Equal(t, []seg{{roce.OpWriteFirst, 512}, {roce.OpWriteLastImm, 488}}, segs(roce.MsgWriteImm, 1000, 512))
	_, _, ok := roce.Segment(roce.MsgWrite, 10, 1000, 0)
	assert.False(t, ok, "1000 is no path MTU")
	_, _, ok = roce.Segment(roce.Message(99), 10, 1024, 0)
	assert.False(t, ok)
	assert.Equal(t, 3, roce.Packets(2049, 1024))
	assert.Equal(t, 1, roce.Packets(0, 256))

	for _, m := range []int{256, 512, 1024, 2048, 4096} {
		assert.True(t, roce.ValidMTU(m))
	}
	for _, m := range []int{0, 128, 1500, 8192} {
		assert.False(t, roce.ValidMTU(m))
	}
}

func TestPSN(t *testing.T) {
	assert.Equal(t, uint32(0), roce.PSNAdd(0xFFFFFF, 1))
	assert.Equal(t, uint32(0xFFFFFE), roce.PSNAdd(1, -3))
	assert.Equal(t, int32(2), roce.PSNDiff(1, 0xFFFFFF))
	assert.Equal(t, int32(-2), roce.PSNDiff(0xFFFFFF, 1))
	assert.Equal(t, int32(-1<<23), roce.PSNDiff(1<<23, 0))
	assert.Equal(t, int32(1<<23-1), roce.PSNDiff(1<<23-1, 0))
}

func TestSyndrome(t *testing.T) {
	assert.Equal(t, roce.KindACK, roce.SyndromeACK.Kind())
	assert.Equal(t, uint8(31), roce.SyndromeACK.Code())
	assert.Equal(t, roce.KindRNR, roce.SyndromeRNR(14).Kind())
	assert.Equal(t, uint8(14), roce.SyndromeRNR(14).Code())
	assert.Equal(t, roce.KindNAK, roce.SyndromeNAKRemoteAccess.Kind())
	assert.Equal(t, uint8(2), roce.SyndromeNAKRemoteAccess.Code())
	assert.Equal(t, "RDMA READ RESPONSE MIDDLE", roce.OpReadResponseMiddle.String())
	assert.Equal(t, "Opcode(0x15)", roce.Opcode(0x15).String())
}

func TestPcap(t *testing.T) {
	write := func() []byte {
		var buf bytes.Buffer
		w, err := roce.NewPcapWriter(&buf, time.Unix(1700000000, 0))
		require.NoError(t, err)
		b := roce.NewFrameBuilder()
		src, dst, o, _, _ := example()
		for _, c := range allOpcodes() {
			frame, err := b.Build(src, dst, o, &c.p, c.payload)
			require.NoError(t, err)
			require.NoError(t, w.WriteFrame(frame))
		}
		return buf.Bytes()
	}
	a := write()
	assert.Equal(t, a, write(), "a synthetic clock: equal runs, equal files")
	r, err := pcapgo.NewReader(bytes.NewReader(a))
	require.NoError(t, err)
	assert.Equal(t, layers.LinkTypeEthernet, r.LinkType())
	parser, n := roce.NewParser(), 0
	var last time.Time
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		require.NoError(t, parser.Decode(data))
		if n > 0 {
			assert.Equal(t, time.Microsecond, ci.Timestamp.Sub(last))
		}
		last = ci.Timestamp
		n++
	}
	assert.Equal(t, len(allOpcodes()), n)
}

func TestNoAllocs(t *testing.T) {
	src, dst, o, p, payload := example()
	frame, err := roce.NewFrameBuilder().Build(src, dst, o, p, payload)
	require.NoError(t, err)
	parser := roce.NewParser()
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = parser.Decode(frame) }), "Parser.Decode")
	dg := make([]byte, 0, 128)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = p.Append(dg[:0], payload) }), "Packet.Append")
	a, b := netip.MustParseAddrPort("127.0.0.2:49152"), netip.MustParseAddrPort("127.0.0.3:4791")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = roce.DatagramICRC(a, b, frame[42:len(frame)-4]) }), "DatagramICRC")
}

func BenchmarkDecode(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			src, dst, o, p, _ := example()
			p.Opcode = roce.OpWriteMiddle
			frame, err := roce.NewFrameBuilder().Build(src, dst, o, p, make([]byte, size))
			require.NoError(b, err)
			parser := roce.NewParser()
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if err := parser.Decode(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDatagram(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			p := &roce.Packet{BTH: roce.BTH{Opcode: roce.OpWriteMiddle, PKey: 0xFFFF, DestQP: 5}}
			payload := make([]byte, size)
			dg := make([]byte, 0, size+64)
			a, d := netip.MustParseAddrPort("127.0.0.2:49152"), netip.MustParseAddrPort("127.0.0.3:4791")
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				out, _ := p.Append(dg[:0], payload)
				crc, _ := roce.DatagramICRC(a, d, out[:len(out)-4])
				binary.LittleEndian.PutUint32(out[len(out)-4:], crc)
			}
		})
	}
}

// TestDatagramFrame: the capture path's hand-built frame is byte for byte
// what gopacket serializes for the same datagram (IPv4 and IPv6, short
// frames padded to 60 bytes).
func TestDatagramFrame(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, size := range []int{0, 5, 4096} {
			src := roce.Endpoint{MAC: net.HardwareAddr{2, 0, 1, 2, 3, 4}, IP: netip.MustParseAddr("127.0.0.2"), Port: 4791}
			dst := roce.Endpoint{MAC: net.HardwareAddr{2, 0, 1, 2, 3, 5}, IP: netip.MustParseAddr("127.0.0.3")}
			if v6 {
				src.IP, dst.IP = netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::3")
			}
			p := roce.Packet{BTH: roce.BTH{Opcode: roce.OpSendOnly, PKey: 0xFFFF, DestQP: 9, PSN: 3}}
			dg, err := p.Append(nil, make([]byte, size))
			require.NoError(t, err)
			o := roce.FrameOptions{TrafficClass: 0x02, FlowLabel: 0x12345, ID: 7}
			got, err := roce.AppendDatagramFrame(nil, src, dst, o, dg)
			require.NoError(t, err)
			// gopacket's, as BuildDatagram made it before.
			eth := &layers.Ethernet{SrcMAC: src.MAC, DstMAC: dst.MAC, EthernetType: layers.EthernetTypeIPv4}
			udp := &layers.UDP{SrcPort: 4791, DstPort: 4791}
			var l3 gopacket.SerializableLayer
			hl := 20
			if v6 {
				eth.EthernetType = layers.EthernetTypeIPv6
				ip6 := &layers.IPv6{Version: 6, TrafficClass: 2, FlowLabel: 0x12345, NextHeader: layers.IPProtocolUDP, HopLimit: 64,
					SrcIP: src.IP.AsSlice(), DstIP: dst.IP.AsSlice()}
				require.NoError(t, udp.SetNetworkLayerForChecksum(ip6))
				l3, hl = ip6, 40
			} else {
				ip4 := &layers.IPv4{Version: 4, IHL: 5, TOS: 2, Id: 7, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
					SrcIP: src.IP.AsSlice(), DstIP: dst.IP.AsSlice()}
				require.NoError(t, udp.SetNetworkLayerForChecksum(ip4))
				l3 = ip4
			}
			buf := gopacket.NewSerializeBuffer()
			require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
				eth, l3, udp, gopacket.Payload(dg)))
			want := buf.Bytes()
			// gopacket computes the UDP checksum too; RoCEv2 sends 0.
			want[14+hl+6], want[14+hl+7] = 0, 0
			require.Equal(t, want, got, "v6 %v size %d", v6, size)
		}
	}
}
