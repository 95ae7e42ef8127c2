package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// UDPPort is RoCEv2's UDP destination port (IANA).
const UDPPort = 4791

// LayerTypeRoCE is the gopacket layer type of a RoCEv2 packet (a [Packet]).
// UDP datagrams to or from port 4791 decode to it.
var LayerTypeRoCE = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{
	Name:    "RoCEv2",
	Decoder: gopacket.DecodeFunc(decodePacket),
})

func init() { layers.RegisterUDPPortLayerType(UDPPort, LayerTypeRoCE) }

// Errors callers branch on.
var (
	// ErrTruncated: the bytes end before the headers, pad and ICRC their
	// opcode needs.
	ErrTruncated = errors.New("roce: packet truncated")
	// ErrOpcode: not an RC opcode the package knows.
	ErrOpcode = errors.New("roce: unsupported opcode")
	// ErrLength: a payload on an opcode that carries none.
	ErrLength = errors.New("roce: bad payload length")
	// ErrICRC: the invariant CRC does not match the packet.
	ErrICRC = errors.New("roce: bad ICRC")
	// ErrNotRoCE: a frame that is not Ethernet/IP/UDP to port 4791 with a
	// RoCEv2 packet.
	ErrNotRoCE = errors.New("roce: not a RoCEv2 frame")
)

// BTH is the base transport header (12 bytes):
//
//	byte 0     opcode
//	byte 1     SE(7) M(6) PadCnt(5:4) TVer(3:0)
//	bytes 2–3  P_Key
//	byte 4     FECN(7) BECN(6) reserved(5:0)   (masked out of the ICRC)
//	bytes 5–7  destination QP
//	byte 8     AckReq(7) reserved(6:0)
//	bytes 9–11 PSN
//
// The reserved fields are kept so that decode and encode round-trip.
type BTH struct {
	Opcode   Opcode
	SE       bool  // solicited event
	MigReq   bool  // M: path migration (0 unless APM)
	PadCount uint8 // 0–3 pad bytes after the payload
	TVer     uint8 // transport header version: 0
	PKey     uint16
	FECN     bool
	BECN     bool
	Resv6    uint8  // byte 4 bits 5–0
	DestQP   uint32 // 24 bits
	AckReq   bool
	Resv7    uint8  // byte 8 bits 6–0
	PSN      uint32 // 24 bits
}

// RETH is the RDMA extended transport header of WRITE FIRST/ONLY and READ
// REQUEST: the message's remote address, key and whole length.
type RETH struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// DETH is the datagram extended transport header of UD packets (8 bytes):
// the Q_Key, a reserved byte, the source QP (24 bits).
type DETH struct {
	QKey  uint32
	Resv  uint8
	SrcQP uint32 // 24 bits
}

// XRCETH is the XRC extended transport header of XRC requests (4 bytes):
// a reserved byte and the XRC SRQ the message is for (24 bits).
type XRCETH struct {
	Resv   uint8
	XRCSRQ uint32 // 24 bits
}

// AETH is the ACK extended transport header: a syndrome and the message
// sequence number.
type AETH struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

// AtomicETH is the atomic extended transport header of COMPARE SWAP and
// FETCH ADD.
type AtomicETH struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64 // the swap data (COMPARE SWAP) or the add data (FETCH ADD)
	Compare uint64 // the compare data (ignored by FETCH ADD)
}

// Syndrome is an AETH syndrome: bits 6–5 the kind (ACK, RNR NAK, NAK),
// bits 4–0 a credit count code, RNR timer code or NAK code.
type Syndrome uint8

// Syndromes.
const (
	// SyndromeACK is an ACK without credit information (code 31), which
	// is what rxe and hcasim send.
	SyndromeACK Syndrome = 0x1F
	// SyndromeNAKPSNSequence: PSN sequence error (the PSN is the expected one).
	SyndromeNAKPSNSequence Syndrome = 0x60
	// SyndromeNAKInvalidRequest: invalid request.
	SyndromeNAKInvalidRequest Syndrome = 0x61
	// SyndromeNAKRemoteAccess: remote access error (key, range, rights).
	SyndromeNAKRemoteAccess Syndrome = 0x62
	// SyndromeNAKRemoteOperational: remote operational error.
	SyndromeNAKRemoteOperational Syndrome = 0x63
)

// AckKind is the kind of a syndrome.
type AckKind uint8

// Syndrome kinds (bits 6–5).
const (
	KindACK      AckKind = 0
	KindRNR      AckKind = 1
	KindReserved AckKind = 2
	KindNAK      AckKind = 3
)

// SyndromeRNR returns the RNR NAK syndrome with timer code timer (0–31).
func SyndromeRNR(timer uint8) Syndrome { return Syndrome(0x20 | timer&0x1F) }

// Kind returns the syndrome's kind.
func (s Syndrome) Kind() AckKind { return AckKind(s >> 5 & 3) }

// Code returns the syndrome's low 5 bits: the credit count code of an ACK,
// the timer code of an RNR NAK, the NAK code of a NAK.
func (s Syndrome) Code() uint8 { return uint8(s & 0x1F) }

// Packet is one RoCEv2 packet, the payload of a UDP datagram to port 4791:
// the BTH, the extension headers its opcode selects, the payload, 0–3 pad
// bytes and the 4-byte invariant CRC. It is a gopacket layer: Contents
// are the BTH and extension headers, Payload the data without pad and
// ICRC. Decoding points into the bytes decoded and zeroes the fields of
// extension headers the opcode does not carry.
type Packet struct {
	layers.BaseLayer
	BTH
	RETH      RETH
	Atomic    AtomicETH
	AETH      AETH
	AtomicAck uint64 // AtomicAckETH: the original remote data
	Imm       uint32 // ImmDt: the four wire bytes read big-endian
	InvRKey   uint32 // IETH: the R_Key to invalidate
	DETH      DETH   // UD
	XRCETH    XRCETH // XRC requests
	// ICRC as carried on the wire (its low byte first). Encoding writes it
	// as it is; SealICRC writes the right one once the IP and UDP headers
	// are in place.
	ICRC uint32
}

var _ gopacket.DecodingLayer = (*Packet)(nil)
var _ gopacket.SerializableLayer = (*Packet)(nil)

// LayerType returns LayerTypeRoCE.
func (p *Packet) LayerType() gopacket.LayerType { return LayerTypeRoCE }

// CanDecode returns LayerTypeRoCE.
func (p *Packet) CanDecode() gopacket.LayerClass { return LayerTypeRoCE }

// NextLayerType returns LayerTypePayload when the packet carries data.
func (p *Packet) NextLayerType() gopacket.LayerType {
	if len(p.Payload) > 0 {
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypeZero
}

// DecodeFromBytes decodes a RoCEv2 packet (a UDP payload) into p. It
// returns ErrTruncated, ErrOpcode or ErrLength for bytes that are not one;
// the ICRC is read, not checked (CheckICRC needs the IP and UDP headers).
func (p *Packet) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < BTHSize+ICRCSize {
		df.SetTruncated()
		return fmt.Errorf("decode %d bytes: %w", len(data), ErrTruncated)
	}
	op := Opcode(data[0])
	info := op.info()
	if info == nil {
		return fmt.Errorf("decode opcode %#02x: %w", data[0], ErrOpcode)
	}
	h := int(info.hlen)
	pad := int(data[1] >> 4 & 3)
	if len(data) < h+pad+ICRCSize {
		df.SetTruncated()
		return fmt.Errorf("decode %v: %d bytes: %w", op, len(data), ErrTruncated)
	}
	end := len(data) - ICRCSize - pad
	if !info.data && end != h {
		return fmt.Errorf("decode %v: %d payload bytes: %w", op, end-h, ErrLength)
	}
	p.BTH.decode(data)
	p.RETH, p.Atomic, p.AETH, p.AtomicAck, p.Imm, p.InvRKey = RETH{}, AtomicETH{}, AETH{}, 0, 0, 0
	p.DETH, p.XRCETH = DETH{}, XRCETH{}
	b := data[BTHSize:h]
	if info.ext&ExtDETH != 0 {
		p.DETH = DETH{QKey: binary.BigEndian.Uint32(b), Resv: b[4], SrcQP: binary.BigEndian.Uint32(b[4:]) & PSNMask}
		b = b[DETHSize:]
	}
	if info.ext&ExtXRCETH != 0 {
		p.XRCETH = XRCETH{Resv: b[0], XRCSRQ: binary.BigEndian.Uint32(b) & PSNMask}
		b = b[XRCETHSize:]
	}
	if info.ext&ExtRETH != 0 {
		p.RETH = RETH{VA: binary.BigEndian.Uint64(b), RKey: binary.BigEndian.Uint32(b[8:]), DMALen: binary.BigEndian.Uint32(b[12:])}
		b = b[RETHSize:]
	}
	if info.ext&ExtAtomicETH != 0 {
		p.Atomic = AtomicETH{VA: binary.BigEndian.Uint64(b), RKey: binary.BigEndian.Uint32(b[8:]),
			SwapAdd: binary.BigEndian.Uint64(b[12:]), Compare: binary.BigEndian.Uint64(b[20:])}
		b = b[AtomicETHSize:]
	}
	if info.ext&ExtAETH != 0 {
		p.AETH = AETH{Syndrome: Syndrome(b[0]), MSN: binary.BigEndian.Uint32(b) & PSNMask}
		b = b[AETHSize:]
	}
	if info.ext&ExtAtomicAckETH != 0 {
		p.AtomicAck = binary.BigEndian.Uint64(b)
		b = b[AtomicAckETHSize:]
	}
	if info.ext&ExtImmDt != 0 {
		p.Imm = binary.BigEndian.Uint32(b)
	}
	if info.ext&ExtIETH != 0 {
		p.InvRKey = binary.BigEndian.Uint32(b)
	}
	p.Contents = data[:h]
	p.Payload = data[h:end]
	p.ICRC = binary.LittleEndian.Uint32(data[len(data)-ICRCSize:])
	return nil
}

func (t *BTH) decode(b []byte) {
	t.Opcode = Opcode(b[0])
	t.SE = b[1]&0x80 != 0
	t.MigReq = b[1]&0x40 != 0
	t.PadCount = b[1] >> 4 & 3
	t.TVer = b[1] & 0x0F
	t.PKey = binary.BigEndian.Uint16(b[2:])
	t.FECN = b[4]&0x80 != 0
	t.BECN = b[4]&0x40 != 0
	t.Resv6 = b[4] & 0x3F
	t.DestQP = binary.BigEndian.Uint32(b[4:]) & PSNMask
	t.AckReq = b[8]&0x80 != 0
	t.Resv7 = b[8] & 0x7F
	t.PSN = binary.BigEndian.Uint32(b[8:]) & PSNMask
}

func flag(v bool, bit byte) byte {
	if v {
		return bit
	}
	return 0
}

func (t *BTH) encode(b []byte) {
	b[0] = byte(t.Opcode)
	b[1] = flag(t.SE, 0x80) | flag(t.MigReq, 0x40) | (t.PadCount&3)<<4 | t.TVer&0x0F
	binary.BigEndian.PutUint16(b[2:], t.PKey)
	binary.BigEndian.PutUint32(b[4:], t.DestQP&PSNMask)
	b[4] = flag(t.FECN, 0x80) | flag(t.BECN, 0x40) | t.Resv6&0x3F
	binary.BigEndian.PutUint32(b[8:], t.PSN&PSNMask)
	b[8] = flag(t.AckReq, 0x80) | t.Resv7&0x7F
}

// putHeaders writes the BTH and extension headers into b, which is
// exactly HeaderLen bytes.
func (p *Packet) putHeaders(b []byte) {
	p.BTH.encode(b)
	ext := p.Opcode.Ext()
	b = b[BTHSize:]
	if ext&ExtDETH != 0 {
		binary.BigEndian.PutUint32(b, p.DETH.QKey)
		binary.BigEndian.PutUint32(b[4:], p.DETH.SrcQP&PSNMask)
		b[4] = p.DETH.Resv
		b = b[DETHSize:]
	}
	if ext&ExtXRCETH != 0 {
		binary.BigEndian.PutUint32(b, p.XRCETH.XRCSRQ&PSNMask)
		b[0] = p.XRCETH.Resv
		b = b[XRCETHSize:]
	}
	if ext&ExtRETH != 0 {
		binary.BigEndian.PutUint64(b, p.RETH.VA)
		binary.BigEndian.PutUint32(b[8:], p.RETH.RKey)
		binary.BigEndian.PutUint32(b[12:], p.RETH.DMALen)
		b = b[RETHSize:]
	}
	if ext&ExtAtomicETH != 0 {
		binary.BigEndian.PutUint64(b, p.Atomic.VA)
		binary.BigEndian.PutUint32(b[8:], p.Atomic.RKey)
		binary.BigEndian.PutUint64(b[12:], p.Atomic.SwapAdd)
		binary.BigEndian.PutUint64(b[20:], p.Atomic.Compare)
		b = b[AtomicETHSize:]
	}
	if ext&ExtAETH != 0 {
		binary.BigEndian.PutUint32(b, p.AETH.MSN&PSNMask)
		b[0] = byte(p.AETH.Syndrome)
		b = b[AETHSize:]
	}
	if ext&ExtAtomicAckETH != 0 {
		binary.BigEndian.PutUint64(b, p.AtomicAck)
		b = b[AtomicAckETHSize:]
	}
	if ext&ExtImmDt != 0 {
		binary.BigEndian.PutUint32(b, p.Imm)
	}
	if ext&ExtIETH != 0 {
		binary.BigEndian.PutUint32(b, p.InvRKey)
	}
}

// PadFor returns the pad bytes a payload of n bytes needs: (4 − n mod 4)
// mod 4.
func PadFor(n int) uint8 { return uint8(-n & 3) }

func (p *Packet) check(payload int) error {
	if !p.Opcode.IsValid() {
		return fmt.Errorf("encode opcode %#02x: %w", uint8(p.Opcode), ErrOpcode)
	}
	if payload > 0 && !p.Opcode.HasPayload() {
		return fmt.Errorf("encode %v: %d payload bytes: %w", p.Opcode, payload, ErrLength)
	}
	return nil
}

// SerializeTo prepends the BTH and extension headers to the bytes in b
// (the payload) and appends the pad and the ICRC field (p.ICRC, to be
// sealed with SealICRC once the IP and UDP headers are in place). With
// opts.FixLengths the pad count is set from the payload.
func (p *Packet) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	n := len(b.Bytes())
	if err := p.check(n); err != nil {
		return err
	}
	if opts.FixLengths {
		p.PadCount = PadFor(n)
	}
	hdr, err := b.PrependBytes(p.Opcode.HeaderLen())
	if err != nil {
		return err
	}
	p.putHeaders(hdr)
	tail, err := b.AppendBytes(int(p.PadCount&3) + ICRCSize)
	if err != nil {
		return err
	}
	clear(tail)
	binary.LittleEndian.PutUint32(tail[len(tail)-ICRCSize:], p.ICRC)
	return nil
}

// Append appends the packet with payload to dst (headers, payload, pad
// set from the payload, the ICRC field p.ICRC) without gopacket: the
// datagram path. It returns the extended slice.
func (p *Packet) Append(dst, payload []byte) ([]byte, error) {
	if err := p.check(len(payload)); err != nil {
		return dst, err
	}
	p.PadCount = PadFor(len(payload))
	h := p.Opcode.HeaderLen()
	n := len(dst)
	total := h + len(payload) + int(p.PadCount) + ICRCSize
	dst = slices.Grow(dst, total)[:n+total]
	b := dst[n:]
	p.putHeaders(b[:h])
	copy(b[h:], payload)
	clear(b[h+len(payload) : total-ICRCSize])
	binary.LittleEndian.PutUint32(b[total-ICRCSize:], p.ICRC)
	return dst, nil
}

func decodePacket(data []byte, pb gopacket.PacketBuilder) error {
	p := &Packet{}
	if err := p.DecodeFromBytes(data, pb); err != nil {
		return err
	}
	pb.AddLayer(p)
	return pb.NextDecoder(p.NextLayerType())
}
