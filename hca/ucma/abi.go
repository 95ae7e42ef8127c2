package ucma

// The byte layouts of the rdma_ucm ABI (rdma/rdma_user_cm.h, ABI version
// 4) and of the verbs structs it embeds (rdma/ib_user_verbs.h,
// rdma/ib_user_sa.h), as x86-64 and arm64 lay them out: host-order (little
// endian) integers, network-order ports and addresses. Offsets are into a
// command's payload, after its 8-byte header.

import (
	"encoding/binary"
	"net/netip"
)

// Commands (RDMA_USER_CM_CMD_*).
const (
	cmdCreateID     = 0
	cmdDestroyID    = 1
	cmdBindIP       = 2
	cmdResolveIP    = 3
	cmdResolveRoute = 4
	cmdQueryRoute   = 5
	cmdConnect      = 6
	cmdListen       = 7
	cmdAccept       = 8
	cmdReject       = 9
	cmdDisconnect   = 10
	cmdInitQPAttr   = 11
	cmdGetEvent     = 12
	cmdGetOption    = 13
	cmdSetOption    = 14
	cmdNotify       = 15
	cmdJoinIPMcast  = 16
	cmdLeaveMcast   = 17
	cmdMigrateID    = 18
	cmdQuery        = 19
	cmdBind         = 20
	cmdResolveAddr  = 21
	cmdJoinMcast    = 22
	numCmds         = 23
)

// Port spaces (enum rdma_ucm_port_space).
const (
	psIPoIB = 0x0002
	psTCP   = 0x0106
	psUDP   = 0x0111
	psIB    = 0x013F
)

// Event types (enum rdma_cm_event_type).
const (
	evAddrResolved    = 0
	evAddrError       = 1
	evRouteResolved   = 2
	evRouteError      = 3
	evConnectRequest  = 4
	evConnectResponse = 5
	evConnectError    = 6
	evUnreachable     = 7
	evRejected        = 8
	evEstablished     = 9
	evDisconnected    = 10
	evDeviceRemoval   = 11
	evTimewaitExit    = 15
)

// Sizes of the payloads librdmacm writes (in) and the answers (out).
const (
	createIDIn      = 24
	destroyIDIn     = 16
	bindIPIn        = 40
	resolveIPIn     = 64
	resolveRouteIn  = 8
	queryIn         = 16
	connectIn       = 280 // the kernel's minimum: through the reserved word before the ECE
	listenIn        = 8
	acceptIn        = 288
	rejectIn        = 264
	disconnectIn    = 4
	initQPAttrIn    = 16
	getEventIn      = 8
	setOptionIn     = 24
	notifyIn        = 8
	migrateIDIn     = 16
	bindIn          = 136
	queryRouteOut   = 208
	queryRouteMin   = 200
	qpAttrOut       = 144
	eventOut        = 336
	eventMin        = 324
	connParamSize   = 272
	maxPrivateData  = 256
	sockaddrIn6Size = 28
)

// Private data lengths the kernel reports (the CM message's room after its
// headers), and the most a caller may send in each.
const (
	reqPD     = 56  // REQ: 92 − the 36-byte cma header
	repPD     = 196 // REP
	rejPD     = 148 // REJ
	sidrReqPD = 180 // SIDR_REQ: 216 − 36
	sidrRepPD = 136 // SIDR_REP
)

// udpQKey is the Q_Key of RDMA_PS_UDP ids (RDMA_UDP_QKEY).
const udpQKey = 0x01234567

// REJ reasons (IBA 12.6.7.2) and SIDR statuses.
const (
	rejInvalidServiceID = 8
	rejConsumer         = 28
	rejVendorOption     = 35
	sidrUnsupported     = 1
	sidrReject          = 2
)

// Address families.
const (
	afInet  = 2
	afInet6 = 10
	afIB    = 27
)

// IBV_QP_* attribute mask bits INIT_QP_ATTR answers with.
const (
	maskInitRC = 0x39     // STATE | ACCESS_FLAGS | PKEY_INDEX | PORT
	maskInitUD = 0x71     // STATE | PKEY_INDEX | PORT | QKEY
	maskRTR    = 0x129181 // STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
	maskRTS    = 0x12E01  // STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC
)

var le = binary.LittleEndian

// sockaddr reads a sockaddr_in or sockaddr_in6 at b (of n bytes room): its
// address and port, and whether it is one.
func sockaddr(b []byte) (netip.AddrPort, bool) {
	if len(b) < 16 {
		return netip.AddrPort{}, false
	}
	port := binary.BigEndian.Uint16(b[2:])
	switch le.Uint16(b) {
	case afInet:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), true
	case afInet6:
		if len(b) < sockaddrIn6Size {
			return netip.AddrPort{}, false
		}
		a := netip.AddrFrom16([16]byte(b[8:24]))
		return netip.AddrPortFrom(a.Unmap(), port), true
	}
	return netip.AddrPort{}, false
}

// putSockaddr writes a as a sockaddr_in (IPv4) or sockaddr_in6 into b,
// which it clears first (28 bytes).
func putSockaddr(b []byte, a netip.AddrPort) {
	clear(b[:sockaddrIn6Size])
	if !a.IsValid() {
		return
	}
	binary.BigEndian.PutUint16(b[2:], a.Port())
	if a.Addr().Is4() {
		le.PutUint16(b, afInet)
		v := a.Addr().As4()
		copy(b[4:8], v[:])
		return
	}
	le.PutUint16(b, afInet6)
	v := a.Addr().As16()
	copy(b[8:24], v[:])
}

// gidOf is the RoCEv2 GID of an IP address: IPv4-mapped for IPv4.
func gidOf(a netip.Addr) [16]byte { return netip.AddrFrom16(a.As16()).As16() }

// connParam is rdma_ucm_conn_param.
type connParam struct {
	qpn                                  uint32
	pd                                   []byte
	srq, respRes, initDepth, flowControl uint8
	retry, rnrRetry                      uint8
	valid                                bool
}

func readConnParam(b []byte) connParam {
	n := int(b[264])
	return connParam{qpn: le.Uint32(b) & 0xFFFFFF, pd: append([]byte(nil), b[8:8+min(n, maxPrivateData)]...),
		srq: b[265], respRes: b[266], initDepth: b[267], flowControl: b[268], retry: b[269], rnrRetry: b[270],
		valid: b[271] != 0}
}

// putConnParam writes p at b with its private data padded to pdLen.
func putConnParam(b []byte, p *connParam, pdLen int) {
	le.PutUint32(b, p.qpn)
	copy(b[8:8+maxPrivateData], p.pd)
	b[264] = uint8(pdLen)
	b[265], b[266], b[267], b[268], b[269], b[270] = p.srq, p.respRes, p.initDepth, p.flowControl, p.retry, p.rnrRetry
}

// ahAttr is the part of ib_uverbs_ah_attr the CM fills for RoCE.
type ahAttr struct {
	dgid      [16]byte
	sgidIndex uint8
	hopLimit  uint8
}

// putAH writes an ib_uverbs_ah_attr (32 bytes): a global route on port 1.
func putAH(b []byte, a *ahAttr) {
	clear(b[:32])
	copy(b, a.dgid[:])
	b[20], b[21] = a.sgidIndex, a.hopLimit
	b[29], b[30] = 1, 1 // is_global, port_num
}
