package ucma

// The CM's messages as they cross the wire: InfiniBand CM MADs
// (IBTA vol. 1 ch. 12, the layouts of Linux's ibta_vol1_c12.h), 256
// bytes each — the 24-byte MAD header, then the message. Within one
// daemon the same messages are handed over without their bytes.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// MADSize is the size of a CM MAD.
const MADSize = 256

// ErrMAD is returned for bytes that are not a CM MAD this CM takes.
var ErrMAD = errors.New("ucma: not a cm mad")

// The MAD header's fixed values for the CM.
const (
	madBaseVersion  = 1
	madClassCM      = 0x07
	madClassVersion = 2
	madMethodSend   = 0x03
	madHdr          = 24
)

// CM attribute IDs (the message kinds).
const (
	attrREQ     = 0x0010
	attrMRA     = 0x0011
	attrREJ     = 0x0012
	attrREP     = 0x0013
	attrRTU     = 0x0014
	attrDREQ    = 0x0015
	attrDREP    = 0x0016
	attrSIDRReq = 0x0017
	attrSIDRRep = 0x0018
)

// The private data areas of the messages (bytes).
const (
	reqPDArea     = 92
	mraPDArea     = 222
	rejPDArea     = 148
	repPDArea     = 196
	rtuPDArea     = 224
	dreqPDArea    = 220
	drepPDArea    = 224
	sidrReqPDArea = 216
	sidrRepPDArea = 136
)

// REJ reasons and the REJ's "message rejected" field.
const (
	rejTimeout  = 4 // IB_CM_REJ_TIMEOUT
	rejMsgREQ   = 0
	rejMsgREP   = 1
	rejMsgOther = 2
)

// msg is one CM message in Go form. Fields a kind does not carry stay
// zero; comm IDs are the sender's (local) and the receiver's (remote),
// and a SIDR message's request ID is in local.
type msg struct {
	attr          uint16
	tid           uint64
	local, remote uint32
	serviceID     uint64
	guid          uint64
	qkey          uint32
	qpn, psn      uint32
	respRes       uint8
	initDepth     uint8
	retry         uint8
	rnrRetry      uint8
	flowControl   bool
	srq           bool
	mtu           uint8
	respTimeout   uint8 // REQ: the local and remote CM response timeouts (one value)
	maxRetries    uint8
	ackTimeout    uint8
	rate          uint8
	hopLimit      uint8
	sgid, dgid    [16]byte // REQ: the primary path's local and remote GIDs
	reason        uint16   // REJ
	which         uint8    // REJ: the message rejected; MRA: the message MRAed
	serviceTO     uint8    // MRA
	status        uint8    // SIDR_REP
	pd            []byte   // the private data area (all of it: a REQ's starts with the cma header)
}

// pdArea returns the size of attr's private data area (0: not a CM
// message this CM takes).
func pdArea(attr uint16) int {
	switch attr {
	case attrREQ:
		return reqPDArea
	case attrMRA:
		return mraPDArea
	case attrREJ:
		return rejPDArea
	case attrREP:
		return repPDArea
	case attrRTU:
		return rtuPDArea
	case attrDREQ:
		return dreqPDArea
	case attrDREP:
		return drepPDArea
	case attrSIDRReq:
		return sidrReqPDArea
	case attrSIDRRep:
		return sidrRepPDArea
	}
	return 0
}

var be = binary.BigEndian

// put24 writes v's low 24 bits as the high 24 bits of the big-endian
// word at b, keeping b[3].
func put24(b []byte, v uint32) {
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func bit(v bool, b byte) byte {
	if v {
		return b
	}
	return 0
}

// encode returns m's MAD bytes.
func (m *msg) encode() []byte {
	b := make([]byte, MADSize)
	b[0], b[1], b[2], b[3] = madBaseVersion, madClassCM, madClassVersion, madMethodSend
	be.PutUint64(b[8:], m.tid)
	be.PutUint16(b[16:], m.attr)
	d := b[madHdr:]
	be.PutUint32(d[0:], m.local)
	pdOff := 0
	switch m.attr {
	case attrREQ:
		be.PutUint64(d[8:], m.serviceID)
		be.PutUint64(d[16:], m.guid)
		be.PutUint32(d[28:], m.qkey)
		put24(d[32:], m.qpn)
		d[35] = m.respRes
		d[39] = m.initDepth
		d[43] = m.respTimeout<<3 | bit(m.flowControl, 1) // transport service type 0: RC
		put24(d[44:], m.psn)
		d[47] = m.respTimeout<<3 | m.retry&7
		be.PutUint16(d[48:], 0xFFFF)
		d[50] = m.mtu<<4 | m.rnrRetry&7
		d[51] = m.maxRetries<<4 | bit(m.srq, 0x08)
		be.PutUint16(d[52:], 0xFFFF) // RoCE: the permissive LID, as the kernel sends
		be.PutUint16(d[54:], 0xFFFF)
		copy(d[56:72], m.sgid[:])
		copy(d[72:88], m.dgid[:])
		d[91] = m.rate & 0x3F
		d[93] = m.hopLimit
		d[95] = m.ackTimeout << 3
		pdOff = 140
	case attrMRA:
		be.PutUint32(d[4:], m.remote)
		d[8] = m.which << 6
		d[9] = m.serviceTO << 3
		pdOff = 10
	case attrREJ:
		be.PutUint32(d[4:], m.remote)
		d[8] = m.which << 6
		be.PutUint16(d[10:], m.reason)
		if m.reason == rejTimeout && m.guid != 0 { // the ARI: the sender's CA GUID
			d[9] = 8 << 1
			be.PutUint64(d[12:], m.guid)
		}
		pdOff = 84
	case attrREP:
		be.PutUint32(d[4:], m.remote)
		be.PutUint32(d[8:], m.qkey)
		put24(d[12:], m.qpn)
		put24(d[20:], m.psn)
		d[24], d[25] = m.respRes, m.initDepth
		d[26] = m.ackTimeout<<3 | bit(m.flowControl, 1)
		d[27] = m.rnrRetry<<5 | bit(m.srq, 0x10)
		be.PutUint64(d[28:], m.guid)
		pdOff = 36
	case attrRTU, attrDREP:
		be.PutUint32(d[4:], m.remote)
		pdOff = 8
	case attrDREQ:
		be.PutUint32(d[4:], m.remote)
		put24(d[8:], m.qpn)
		pdOff = 12
	case attrSIDRReq:
		be.PutUint16(d[4:], 0xFFFF)
		be.PutUint64(d[8:], m.serviceID)
		pdOff = 16
	case attrSIDRRep:
		d[4] = m.status
		put24(d[8:], m.qpn)
		be.PutUint64(d[12:], m.serviceID)
		be.PutUint32(d[20:], m.qkey)
		pdOff = 96
	}
	copy(d[pdOff:pdOff+pdArea(m.attr)], m.pd)
	return b
}

// decode parses a CM MAD; it never keeps b.
func decode(b []byte) (msg, error) {
	var m msg
	if len(b) < MADSize {
		return m, fmt.Errorf("%w: %d bytes", ErrMAD, len(b))
	}
	if b[0] != madBaseVersion || b[1] != madClassCM || b[2] != madClassVersion || b[3] != madMethodSend {
		return m, fmt.Errorf("%w: version %d class %#x/%d method %#x", ErrMAD, b[0], b[1], b[2], b[3])
	}
	m.attr = be.Uint16(b[16:])
	area := pdArea(m.attr)
	if area == 0 {
		return m, fmt.Errorf("%w: attribute %#x", ErrMAD, m.attr)
	}
	m.tid = be.Uint64(b[8:])
	d := b[madHdr:MADSize]
	m.local = be.Uint32(d[0:])
	pdOff := 0
	switch m.attr {
	case attrREQ:
		m.serviceID = be.Uint64(d[8:])
		m.guid = be.Uint64(d[16:])
		m.qkey = be.Uint32(d[28:])
		m.qpn, m.respRes = get24(d[32:]), d[35]
		m.initDepth = d[39]
		m.flowControl = d[43]&1 != 0
		m.psn = get24(d[44:])
		m.respTimeout, m.retry = d[47]>>3, d[47]&7
		m.mtu, m.rnrRetry = d[50]>>4, d[50]&7
		m.maxRetries, m.srq = d[51]>>4, d[51]&0x08 != 0
		copy(m.sgid[:], d[56:72])
		copy(m.dgid[:], d[72:88])
		m.rate, m.hopLimit, m.ackTimeout = d[91]&0x3F, d[93], d[95]>>3
		if d[43]>>1&3 != 0 || d[51]&7 != 0 {
			return m, fmt.Errorf("%w: a REQ for a transport other than RC", ErrMAD)
		}
		pdOff = 140
	case attrMRA:
		m.remote, m.which, m.serviceTO = be.Uint32(d[4:]), d[8]>>6, d[9]>>3
		pdOff = 10
	case attrREJ:
		m.remote, m.which, m.reason = be.Uint32(d[4:]), d[8]>>6, be.Uint16(d[10:])
		if m.reason == rejTimeout && d[9]>>1 == 8 {
			m.guid = be.Uint64(d[12:])
		}
		pdOff = 84
	case attrREP:
		m.remote, m.qkey = be.Uint32(d[4:]), be.Uint32(d[8:])
		m.qpn, m.psn = get24(d[12:]), get24(d[20:])
		m.respRes, m.initDepth = d[24], d[25]
		m.ackTimeout, m.flowControl = d[26]>>3, d[26]&1 != 0
		m.rnrRetry, m.srq = d[27]>>5, d[27]&0x10 != 0
		m.guid = be.Uint64(d[28:])
		pdOff = 36
	case attrRTU, attrDREP:
		m.remote = be.Uint32(d[4:])
		pdOff = 8
	case attrDREQ:
		m.remote, m.qpn = be.Uint32(d[4:]), get24(d[8:])
		pdOff = 12
	case attrSIDRReq:
		m.serviceID = be.Uint64(d[8:])
		pdOff = 16
	case attrSIDRRep:
		m.status, m.qpn = d[4], get24(d[8:])
		m.serviceID, m.qkey = be.Uint64(d[12:]), be.Uint32(d[20:])
		pdOff = 96
	}
	m.pd = append([]byte(nil), d[pdOff:pdOff+area]...)
	return m, nil
}

// The rdma_cm header a REQ's and a SIDR_REQ's private data start with
// (the kernel's struct cma_hdr): version 0, the IP version in the high
// nibble, the source port, the source and destination addresses (IPv4
// in the last four bytes of each 16).
const cmaHdrSize = 36

// serviceID is rdma_cm's service ID of a port in a port space.
func serviceID(ps, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// putCMAHdr writes the cma header for src → dst at b.
func putCMAHdr(b []byte, src, dst netip.AddrPort) {
	b[0] = 0
	v := byte(6)
	if src.Addr().Is4() {
		v = 4
	}
	b[1] = v << 4
	be.PutUint16(b[2:], src.Port())
	put := func(o []byte, a netip.Addr) {
		clear(o[:16])
		if a.Is4() {
			x := a.As4()
			copy(o[12:16], x[:])
			return
		}
		x := a.As16()
		copy(o[:16], x[:])
	}
	put(b[4:], src.Addr())
	put(b[20:], dst.Addr())
}

// cmaHdr parses a cma header: the source (address and port) and the
// destination address; ok is false for anything else.
func cmaHdr(b []byte) (src netip.AddrPort, dst netip.Addr, ok bool) {
	if len(b) < cmaHdrSize || b[0] != 0 {
		return src, dst, false
	}
	get := func(o []byte, v4 bool) netip.Addr {
		if v4 {
			return netip.AddrFrom4([4]byte(o[12:16]))
		}
		return netip.AddrFrom16([16]byte(o[:16]))
	}
	switch b[1] >> 4 {
	case 4:
		src, dst = netip.AddrPortFrom(get(b[4:], true), be.Uint16(b[2:])), get(b[20:], true)
	case 6:
		src, dst = netip.AddrPortFrom(get(b[4:], false), be.Uint16(b[2:])), get(b[20:], false)
	default:
		return src, dst, false
	}
	return src, dst, true
}
