package hca

import "github.com/hcasim/hcasim/roce"

// XRC (IBA 14.2 and 9.8): an initiator QP sends, a target QP receives, and
// each message names, in its XRCETH (the initiator's WQE: its XRC
// segment), the XRC SRQ it is for. The target takes the message's receive
// WQE from that SRQ, checks every access against the SRQ's PD and
// completes on the SRQ's CQ, so one target serves many SRQs and one SRQ
// many targets; an SRQ of another XRC domain than the target's, or none,
// is an invalid request (NAK, the target to ERR). The domain and the SRQs
// are the function's: a target serves only its own function's SRQs.

// selectXRC makes srqn the SRQ an XRC target serves the message from and
// reports whether it is one of the target's domain. A WQE taken and held
// for the message keeps its SRQ.
func (qp *QP) selectXRC(s *respState, srqn uint32) bool {
	if s.srqHeld {
		return s.xsrq != nil && s.xsrq.srqn == srqn
	}
	s.xsrq = qp.fn.xrcSRQ(srqn, qp.xrcd)
	return s.xsrq != nil
}

// rsrq is the SRQ the responder takes receives from: the QP's, or an XRC
// target's for the message being served (under respMu).
func (qp *QP) rsrq(s *respState) *SRQ {
	if qp.tgt {
		return s.xsrq
	}
	return qp.srq
}

// accessPD is the PD the QP's accesses are checked against: its own, or
// for an XRC target the PD of the SRQ it serves the message from (PD 0,
// which no PD is, before it has one). Only the responder accesses memory
// for a target.
func (qp *QP) accessPD() uint32 {
	if qp.tgt {
		if s := qp.resp.xsrq; s != nil {
			return s.pd
		}
		return 0
	}
	return qp.pd
}

// sameService reports whether requester req may send to responder resp:
// both RC, both UC, or an XRC initiator to an XRC target.
func sameService(req, resp *QP) bool {
	return req.uc == resp.uc && req.xrc == resp.xrc && !req.tgt && (resp.tgt || !resp.xrc)
}

// wireBase is what the QP's packets OR into the RC opcode they mirror:
// UC's or XRC's transport bits.
func (qp *QP) wireBase() roce.Opcode {
	switch {
	case qp.uc:
		return roce.UCBase
	case qp.xrc:
		return roce.XRCBase
	}
	return 0
}
