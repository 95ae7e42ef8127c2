package ucma

import (
	"encoding/binary"
	"syscall"
)

// The path every local connection takes (RoCE on one port): MTU 4096
// (IB_MTU_4096, loopback's iboe MTU), 40 Gb/s, the kernel's default
// packet lifetime, selectors "exactly".
const (
	pathMTU      = 5
	pathRate     = 7
	pathLifetime = 18
	hopLimit     = 64
)

// connected reports whether id knows its peer's QP (REQ or REP seen).
func (id *cmID) connected() bool {
	switch id.st {
	case stReqRcvd, stRepSent, stRepRcvd, stEstablished, stDreqSent, stDreqRcvd, stDisconnected:
		return true
	}
	return false
}

// routed reports whether id has a path (resolved, or from the REQ).
func (id *cmID) routed() bool { return id.st >= stRouteResolved && id.st != stListen }

// remoteGID is the GID of id's path's far end.
func (id *cmID) remoteGID(s *Service) [16]byte {
	if id.peerGID != ([16]byte{}) {
		return id.peerGID
	}
	return s.gid()
}

// route answers QUERY_ROUTE (rdma_ucm_query_route_resp).
func (s *Service) route(id *cmID) []byte {
	r := make([]byte, queryRouteOut)
	if id.hasDev {
		binary.BigEndian.PutUint64(r[0:], s.dev.GUID)
		r[196] = 1 // port
	}
	le.PutUint32(r[200:], s.dev.Index)
	p := r[8:72]
	if id.src.IsValid() && !id.src.Addr().IsUnspecified() {
		g := s.gid()
		copy(p[16:32], g[:])
	}
	if id.dst.IsValid() {
		g := id.remoteGID(s)
		copy(p[0:16], g[:])
	}
	binary.BigEndian.PutUint16(p[52:], 0xFFFF)
	if id.routed() || id.connected() {
		le.PutUint32(p[44:], 1) // reversible
		le.PutUint32(p[48:], pathMTU)
		p[54], p[58], p[59], p[60], p[61], p[62] = hopLimit, 2, 2, pathRate, 2, pathLifetime
		le.PutUint32(r[192:], 1)
	}
	putSockaddr(r[136:], id.src)
	putSockaddr(r[164:], id.dst)
	return r
}

// initQPAttr answers INIT_QP_ATTR with the attributes the CM negotiated
// (struct ib_uverbs_qp_attr).
func (c *call) initQPAttr(id *cmID) syscall.Errno {
	qs := le.Uint32(c.p[12:])
	switch {
	case c.out < qpAttrOut:
		return syscall.ENOSPC
	case qs > 6:
		return syscall.EINVAL
	case !id.hasDev:
		return syscall.EINVAL
	}
	r := make([]byte, qpAttrOut)
	le.PutUint32(r[4:], qs)
	r[133] = 1 // port
	if id.ud {
		le.PutUint32(r[0:], maskInitUD)
		le.PutUint32(r[20:], udpQKey)
		c.resp = r
		return 0
	}
	switch qs {
	case 1: // INIT
		le.PutUint32(r[0:], maskInitRC)
		if id.connected() {
			acc := uint32(2) // remote write
			if id.respRes > 0 {
				acc |= 4 | 8 // remote read and atomics
			}
			le.PutUint32(r[36:], acc)
		}
	case 2: // RTR
		if !id.connected() {
			return syscall.EINVAL
		}
		le.PutUint32(r[0:], maskRTR)
		le.PutUint32(r[12:], pathMTU)
		le.PutUint32(r[24:], id.seq)
		le.PutUint32(r[32:], id.peerQPN)
		putAH(r[40:], &ahAttr{dgid: id.remoteGID(c.s), sgidIndex: c.s.dev.SGIDIndex, hopLimit: hopLimit})
		r[131] = id.respRes
	case 3: // RTS
		if !id.connected() {
			return syscall.EINVAL
		}
		le.PutUint32(r[0:], maskRTS)
		le.PutUint32(r[28:], id.peerPSN)
		r[130] = id.initDepth
		r[134] = pathLifetime + 1
		if id.ackTO != 0 {
			r[134] = id.ackTO
		}
		r[135], r[136] = id.retry, id.rnrRetry
	default:
		return syscall.EINVAL
	}
	c.resp = r
	return 0
}
