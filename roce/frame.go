package roce

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Endpoint is one end of a RoCEv2 flow on an Ethernet wire.
type Endpoint struct {
	MAC  net.HardwareAddr
	IP   netip.Addr // IPv4 (or IPv4-mapped IPv6) or IPv6
	Port uint16     // UDP port; 0 means UDPPort
}

// FrameOptions are the IP fields of a frame; the zero value gives rxe's
// choices (DSCP/ECN 0, TTL 64, flow label 0, identification 0, DF set).
type FrameOptions struct {
	TrafficClass uint8  // IPv4 TOS or IPv6 traffic class
	HopLimit     uint8  // IPv4 TTL or IPv6 hop limit; 0 means 64
	FlowLabel    uint32 // IPv6 only
	ID           uint16 // IPv4 identification
	NoDF         bool   // IPv4: clear DF
}

// FrameBuilder builds Ethernet/IP/UDP/RoCEv2 frames with gopacket, the
// ICRC sealed and the IPv4 checksum set (the UDP checksum is 0, as RoCEv2
// senders leave it). A FrameBuilder is not safe for concurrent use; its
// layers and buffer are reused, so a frame is valid until the next Build.
type FrameBuilder struct {
	buf  gopacket.SerializeBuffer
	eth  layers.Ethernet
	ip4  layers.IPv4
	ip6  layers.IPv6
	udp  layers.UDP
	data gopacket.Payload
	raw  []byte // BuildDatagram's frame
}

// NewFrameBuilder returns a FrameBuilder.
func NewFrameBuilder() *FrameBuilder { return &FrameBuilder{buf: gopacket.NewSerializeBuffer()} }

func portOr(p uint16) uint16 {
	if p == 0 {
		return UDPPort
	}
	return p
}

// Build returns the frame carrying p with payload from src to dst. The
// pad count is set from the payload; p.ICRC is set to the sealed ICRC.
func (b *FrameBuilder) Build(src, dst Endpoint, o FrameOptions, p *Packet, payload []byte) ([]byte, error) {
	b.data = payload
	p.ICRC = 0
	frame, err := b.build(src, dst, o, p, &b.data)
	if err != nil {
		return nil, err
	}
	crc, field, err := l3ICRC(frame[ethHeader:])
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(field, crc)
	p.ICRC = crc
	return frame, nil
}

// BuildDatagram returns the frame carrying datagram — a RoCEv2 packet as
// a UDP socket sent or received it, ICRC included — from src to dst, its
// bytes as they are (a capture of what went on the wire, a bad ICRC
// included).
func (b *FrameBuilder) BuildDatagram(src, dst Endpoint, o FrameOptions, datagram []byte) ([]byte, error) {
	frame, err := AppendDatagramFrame(b.raw[:0], src, dst, o, datagram)
	b.raw = frame
	return frame, err
}

// AppendDatagramFrame appends to dst the frame BuildDatagram returns,
// written directly (the capture path: no layer serialization, one copy
// of the datagram). TestDatagramFrame checks it against gopacket's.
func AppendDatagramFrame(dst []byte, src, dstEP Endpoint, o FrameOptions, datagram []byte) ([]byte, error) {
	s, d := src.IP.Unmap(), dstEP.IP.Unmap()
	if !s.IsValid() || !d.IsValid() || s.Is4() != d.Is4() {
		return dst, fmt.Errorf("build frame %v → %v: %w", src.IP, dstEP.IP, ErrNotRoCE)
	}
	l3 := ipv6Header
	if s.Is4() {
		l3 = ipv4MinHeader
	}
	n := udpHeader + len(datagram)
	if l3+n > 0xFFFF {
		return dst, fmt.Errorf("build frame: %d-byte datagram: %w", len(datagram), ErrLength)
	}
	start := len(dst)
	total := ethHeader + l3 + n
	pad := max(0, 60-total) // the Ethernet minimum, as gopacket pads
	dst = slices.Grow(dst, total+pad)[:start+total+pad]
	f := dst[start:]
	clear(f[:ethHeader+l3+udpHeader])
	copy(f[0:6], dstEP.MAC)
	copy(f[6:12], src.MAC)
	if s.Is4() {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x86DD)
	}
	ip := f[ethHeader:]
	PutL3Header(ip, s, d, o, n)
	u := ip[l3:]
	binary.BigEndian.PutUint16(u[0:], portOr(src.Port))
	binary.BigEndian.PutUint16(u[2:], portOr(dstEP.Port))
	binary.BigEndian.PutUint16(u[4:], uint16(n))
	copy(u[udpHeader:], datagram)
	clear(f[total:])
	return dst, nil
}

const ethHeader = 14

// PutL3Header writes into b (zeroed, at least 20 or 40 bytes) the IPv4 or
// IPv6 header of a UDP datagram of n bytes (its UDP header included) from
// s to d, both IPv4 or both IPv6 (unmapped), with o's traffic class, ID,
// DF, flow label and hop limit (0: 64), and returns its length. It is the
// header a RoCEv2 frame carries, and what a UD receive buffer's 40 bytes
// hold (the IPv4 header in their last 20).
func PutL3Header(b []byte, s, d netip.Addr, o FrameOptions, n int) int {
	hop := o.HopLimit
	if hop == 0 {
		hop = 64
	}
	if s.Is4() {
		b[0], b[1] = 0x45, o.TrafficClass
		binary.BigEndian.PutUint16(b[2:], uint16(ipv4MinHeader+n))
		binary.BigEndian.PutUint16(b[4:], o.ID)
		if !o.NoDF {
			b[6] = 0x40
		}
		b[8], b[9] = hop, 17
		a, c := s.As4(), d.As4()
		copy(b[12:], a[:])
		copy(b[16:], c[:])
		ipv4Checksum(b[:ipv4MinHeader])
		return ipv4MinHeader
	}
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(o.TrafficClass)<<20|o.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(b[4:], uint16(n))
	b[6], b[7] = 17, hop
	a, c := s.As16(), d.As16()
	copy(b[8:], a[:])
	copy(b[24:], c[:])
	return ipv6Header
}

// build serializes Ethernet, IP and UDP headers before the layers given
// and sets the IPv4 checksum.
func (b *FrameBuilder) build(src, dst Endpoint, o FrameOptions, upper ...gopacket.SerializableLayer) ([]byte, error) {
	s, d := src.IP.Unmap(), dst.IP.Unmap()
	if !s.IsValid() || !d.IsValid() || s.Is4() != d.Is4() {
		return nil, fmt.Errorf("build frame %v → %v: %w", src.IP, dst.IP, ErrNotRoCE)
	}
	hop := o.HopLimit
	if hop == 0 {
		hop = 64
	}
	b.eth = layers.Ethernet{SrcMAC: src.MAC, DstMAC: dst.MAC}
	b.udp = layers.UDP{SrcPort: layers.UDPPort(portOr(src.Port)), DstPort: layers.UDPPort(portOr(dst.Port))}
	var l3 gopacket.SerializableLayer
	if s.Is4() {
		b.eth.EthernetType = layers.EthernetTypeIPv4
		b.ip4 = layers.IPv4{Version: 4, TOS: o.TrafficClass, Id: o.ID, TTL: hop, Protocol: layers.IPProtocolUDP,
			SrcIP: s.AsSlice(), DstIP: d.AsSlice()}
		if !o.NoDF {
			b.ip4.Flags = layers.IPv4DontFragment
		}
		l3 = &b.ip4
	} else {
		b.eth.EthernetType = layers.EthernetTypeIPv6
		b.ip6 = layers.IPv6{Version: 6, TrafficClass: o.TrafficClass, FlowLabel: o.FlowLabel & 0xFFFFF,
			NextHeader: layers.IPProtocolUDP, HopLimit: hop, SrcIP: s.AsSlice(), DstIP: d.AsSlice()}
		l3 = &b.ip6
	}
	all := append([]gopacket.SerializableLayer{&b.eth, l3, &b.udp}, upper...)
	opts := gopacket.SerializeOptions{FixLengths: true}
	if err := gopacket.SerializeLayers(b.buf, opts, all...); err != nil {
		return nil, fmt.Errorf("build frame: %w", err)
	}
	frame := b.buf.Bytes()
	if s.Is4() {
		ipv4Checksum(frame[ethHeader : ethHeader+ipv4MinHeader])
	}
	return frame, nil
}

// ipv4Checksum sets the header checksum of a 20-byte IPv4 header.
func ipv4Checksum(h []byte) {
	h[10], h[11] = 0, 0
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
}

// Parser decodes Ethernet frames carrying RoCEv2 (Ethernet, IPv4 or IPv6,
// UDP, the RoCEv2 packet) with a gopacket DecodingLayerParser, without
// allocating, and checks the ICRC. Its layers point into the last frame
// decoded. A Parser is not safe for concurrent use.
type Parser struct {
	Eth    layers.Ethernet
	IPv4   layers.IPv4
	IPv6   layers.IPv6
	UDP    layers.UDP
	Packet Packet

	data    gopacket.Payload
	parser  *gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
}

// NewParser returns a Parser.
func NewParser() *Parser {
	p := &Parser{decoded: make([]gopacket.LayerType, 0, 8)}
	p.parser = gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &p.Eth, &p.IPv4, &p.IPv6, &p.UDP, &p.Packet, &p.data)
	return p
}

// Decode decodes frame. It returns ErrNotRoCE for a frame that is not
// Ethernet/IP/UDP/RoCEv2, the packet's decode error (ErrTruncated,
// ErrOpcode, ErrLength), or ErrICRC — with the layers decoded — when the
// ICRC is wrong.
func (p *Parser) Decode(frame []byte) error {
	err := p.parser.DecodeLayers(frame, &p.decoded)
	var ip, udp, roce bool
	for _, t := range p.decoded {
		switch t {
		case layers.LayerTypeIPv4, layers.LayerTypeIPv6:
			ip = true
		case layers.LayerTypeUDP:
			udp = true
		case LayerTypeRoCE:
			roce = true
		}
	}
	switch {
	case roce && ip && err == nil:
		return CheckICRC(frame[len(p.Eth.Contents):])
	case roce && ip:
		return fmt.Errorf("decode frame: %w", err)
	case ip && udp && err != nil && p.UDP.DstPort == UDPPort: // RoCEv2 is known by its destination port (the source port is flow entropy)
		return fmt.Errorf("decode frame: %w", err) // the RoCEv2 packet's own error
	}
	return fmt.Errorf("decode frame: %w", ErrNotRoCE)
}

// PcapWriter writes Ethernet frames to a pcap file (pcapgo) with a
// synthetic clock: frame n is stamped start + n µs, so equal runs give
// equal files. It is safe for concurrent use.
type PcapWriter struct {
	mu    sync.Mutex
	w     *pcapgo.Writer
	start time.Time
	n     int64
}

// NewPcapWriter writes the pcap file header to w and returns a writer.
func NewPcapWriter(w io.Writer, start time.Time) (*PcapWriter, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcap header: %w", err)
	}
	return &PcapWriter{w: pw, start: start}, nil
}

// WriteFrame writes one frame.
func (w *PcapWriter) WriteFrame(frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	ci := gopacket.CaptureInfo{Timestamp: w.start.Add(time.Duration(w.n) * time.Microsecond), CaptureLength: len(frame), Length: len(frame)}
	w.n++
	if err := w.w.WritePacket(ci, frame); err != nil {
		return fmt.Errorf("pcap frame %d: %w", w.n, err)
	}
	return nil
}
