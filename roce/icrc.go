package roce

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/netip"
)

// The invariant CRC (IBA annex A17, rxe_icrc.c): CRC-32 as hash/crc32's
// IEEE (reflected, initial and final inversion) over 8 bytes of 0xFF that
// stand for the masked LRH, then the IP header, the UDP header, the BTH,
// the extension headers, the payload and the pad, with the fields routers
// may change set to ones: the IPv4 TOS, TTL and header checksum; the IPv6
// traffic class, flow label and hop limit; the UDP checksum; BTH byte 4
// (FECN, BECN and its reserved bits). Everything else, the IPv4
// identification and flags included, is covered. The result goes on the
// wire little-endian (low byte first), as rxe and ConnectX write it.

var crcAfterPrefix = crc32.Update(0, crc32.IEEETable, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})

const (
	ipv4MinHeader = 20
	ipv4MaxHeader = 60
	ipv6Header    = 40
	udpHeader     = 8
)

// ICRC returns the invariant CRC of a RoCEv2 packet: ip is its IP header
// (IPv4 with any options, or the fixed IPv6 header), udp its UDP header,
// and pkt the UDP payload from the BTH to the end of the pad (without the
// ICRC).
func ICRC(ip, udp, pkt []byte) (uint32, error) {
	var hdr [ipv4MaxHeader + udpHeader + BTHSize]byte
	n, err := maskIP(hdr[:], ip)
	if err != nil {
		return 0, err
	}
	if len(udp) != udpHeader || len(pkt) < BTHSize {
		return 0, fmt.Errorf("icrc: %d-byte UDP header, %d-byte packet: %w", len(udp), len(pkt), ErrTruncated)
	}
	copy(hdr[n:], udp)
	hdr[n+6], hdr[n+7] = 0xFF, 0xFF // UDP checksum
	n += udpHeader
	copy(hdr[n:], pkt[:BTHSize])
	hdr[n+4] = 0xFF // FECN, BECN, reserved
	n += BTHSize
	// The masked headers a byte at a time here: hdr passed to crc32 would
	// move to the heap. The rest (payload) through crc32's fast path.
	reg := ^crcAfterPrefix
	for _, c := range hdr[:n] {
		reg = crc32.IEEETable[byte(reg)^c] ^ reg>>8
	}
	return crc32.Update(^reg, crc32.IEEETable, pkt[BTHSize:]), nil
}

// maskIP copies the IP header ip into dst with its variant fields set to
// ones and returns its length.
func maskIP(dst, ip []byte) (int, error) {
	if len(ip) == 0 {
		return 0, fmt.Errorf("icrc: no IP header: %w", ErrTruncated)
	}
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < ipv4MinHeader || len(ip) > ipv4MaxHeader || int(ip[0]&0x0F)*4 != len(ip) {
			return 0, fmt.Errorf("icrc: %d-byte IPv4 header (IHL %d): %w", len(ip), ip[0]&0x0F, ErrNotRoCE)
		}
		copy(dst, ip)
		dst[1] = 0xFF                 // TOS
		dst[8] = 0xFF                 // TTL
		dst[10], dst[11] = 0xFF, 0xFF // header checksum
		return len(ip), nil
	case 6:
		if len(ip) != ipv6Header {
			return 0, fmt.Errorf("icrc: %d-byte IPv6 header: %w", len(ip), ErrNotRoCE)
		}
		copy(dst, ip)
		dst[0] |= 0x0F                            // traffic class, high nibble
		dst[1], dst[2], dst[3] = 0xFF, 0xFF, 0xFF // traffic class low nibble, flow label
		dst[7] = 0xFF                             // hop limit
		return ipv6Header, nil
	}
	return 0, fmt.Errorf("icrc: IP version %d: %w", ip[0]>>4, ErrNotRoCE)
}

// splitL3 splits an IP packet carrying UDP and a RoCEv2 packet into the IP
// header, the UDP header, the packet up to its ICRC, and the ICRC; bytes
// past the IP length (Ethernet padding) are left out.
func splitL3(l3 []byte) (ip, udp, pkt, icrc []byte, err error) {
	if len(l3) == 0 {
		return nil, nil, nil, nil, fmt.Errorf("icrc: empty packet: %w", ErrTruncated)
	}
	var h, total int
	switch l3[0] >> 4 {
	case 4:
		if len(l3) < ipv4MinHeader {
			return nil, nil, nil, nil, fmt.Errorf("icrc: %d bytes: %w", len(l3), ErrTruncated)
		}
		h, total = int(l3[0]&0x0F)*4, int(binary.BigEndian.Uint16(l3[2:]))
		if l3[9] != 17 {
			return nil, nil, nil, nil, fmt.Errorf("icrc: IP protocol %d: %w", l3[9], ErrNotRoCE)
		}
	case 6:
		if len(l3) < ipv6Header {
			return nil, nil, nil, nil, fmt.Errorf("icrc: %d bytes: %w", len(l3), ErrTruncated)
		}
		h, total = ipv6Header, ipv6Header+int(binary.BigEndian.Uint16(l3[4:]))
		if l3[6] != 17 {
			return nil, nil, nil, nil, fmt.Errorf("icrc: next header %d: %w", l3[6], ErrNotRoCE)
		}
	default:
		return nil, nil, nil, nil, fmt.Errorf("icrc: IP version %d: %w", l3[0]>>4, ErrNotRoCE)
	}
	if h < ipv4MinHeader || total > len(l3) || total < h+udpHeader+BTHSize+ICRCSize {
		return nil, nil, nil, nil, fmt.Errorf("icrc: IP length %d of %d bytes: %w", total, len(l3), ErrTruncated)
	}
	return l3[:h], l3[h : h+udpHeader], l3[h+udpHeader : total-ICRCSize], l3[total-ICRCSize : total], nil
}

// l3ICRC returns the ICRC the RoCEv2 packet in l3 should carry and the
// 4 bytes that carry it.
func l3ICRC(l3 []byte) (uint32, []byte, error) {
	ip, udp, pkt, field, err := splitL3(l3)
	if err != nil {
		return 0, nil, err
	}
	crc, err := ICRC(ip, udp, pkt)
	return crc, field, err
}

// SealICRC computes the ICRC of the RoCEv2 packet in l3 (an IPv4 or IPv6
// packet carrying UDP and the RoCEv2 packet, its ICRC the last 4 bytes by
// the IP length) and writes it there.
func SealICRC(l3 []byte) error {
	crc, field, err := l3ICRC(l3)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(field, crc)
	return nil
}

// CheckICRC returns ErrICRC if the ICRC of the RoCEv2 packet in l3 is not
// the one its bytes give.
func CheckICRC(l3 []byte) error {
	crc, field, err := l3ICRC(l3)
	if err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint32(field); got != crc {
		return fmt.Errorf("icrc %#08x, want %#08x: %w", got, crc, ErrICRC)
	}
	return nil
}

// DatagramICRC returns the ICRC of pkt (a RoCEv2 packet from the BTH to
// the end of the pad) sent in a UDP datagram from src to dst as a Linux
// UDP socket sends it, so that both ends of a socket link agree without
// seeing the IP header: IPv4 without options, with DF set and
// identification 0 (what an unconnected socket with IP_PMTUDISC_DO
// sends), or IPv6. src and dst must be of one family (IPv4-mapped IPv6
// addresses count as IPv4).
func DatagramICRC(src, dst netip.AddrPort, pkt []byte) (uint32, error) {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if !s.IsValid() || s.Is4() != d.Is4() {
		return 0, fmt.Errorf("icrc: addresses %v and %v: %w", src, dst, ErrNotRoCE)
	}
	var ip [ipv6Header]byte
	var udp [udpHeader]byte
	n := udpHeader + len(pkt) + ICRCSize
	if n > 0xFFFF-ipv6Header {
		return 0, fmt.Errorf("icrc: %d-byte packet: %w", len(pkt), ErrLength)
	}
	var hdr []byte
	if s.Is4() {
		hdr = ip[:ipv4MinHeader]
		hdr[0] = 0x45
		binary.BigEndian.PutUint16(hdr[2:], uint16(ipv4MinHeader+n))
		hdr[6] = 0x40 // DF; identification 0
		hdr[9] = 17
		a, b := s.As4(), d.As4()
		copy(hdr[12:], a[:])
		copy(hdr[16:], b[:])
	} else {
		hdr = ip[:]
		hdr[0] = 0x60
		binary.BigEndian.PutUint16(hdr[4:], uint16(n))
		hdr[6] = 17
		a, b := s.As16(), d.As16()
		copy(hdr[8:], a[:])
		copy(hdr[24:], b[:])
	}
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(n))
	return ICRC(hdr, udp[:], pkt)
}
