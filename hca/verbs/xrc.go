package verbs

import (
	"fmt"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/hca/ifc"
)

// XRCD is an XRC domain (ibv_xrcd): the XRC SRQs made in it
// (SRQInitAttr.XRCD) and its targets (CreateTarget) go together. A
// domain is its context's.
type XRCD struct {
	ctx *Context
	num uint32
}

// AllocXRCD allocates an XRC domain.
func (c *Context) AllocXRCD() (*XRCD, error) {
	out, err := c.cmd(ifc.NewIn(ifc.CmdAllocXRCD, ifc.InHeaderSize))
	if err != nil {
		return nil, fmt.Errorf("alloc xrcd: %w", err)
	}
	return &XRCD{ctx: c, num: out.U32(ifc.XRCDOff) & 0xFFFFFF}, nil
}

// Dealloc releases the domain; it fails while SRQs or targets use it.
func (x *XRCD) Dealloc() error {
	if _, err := x.ctx.cmd(ifc.NewIn(ifc.CmdDeallocXRCD, ifc.XRCDOff+4).Put32(ifc.XRCDOff, x.num)); err != nil {
		return fmt.Errorf("dealloc xrcd %#x: %w", x.num, err)
	}
	return nil
}

// CreateTarget creates an XRC target QP (QPTypeXRCRecv) of the domain in
// the RESET state. It has no queues: it is moved through the states as
// an RC QP is (its RTR and RTS take the responder's attributes, its RTS a
// PSN and timeout), and an initiator connected to it sends into the
// domain's SRQs.
func (x *XRCD) CreateTarget() (*QP, error) {
	c := x.ctx
	in := ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSizeXRC).Put8(ifc.QPInType, ifc.QPTypeXRC).Put32(ifc.QPInXRCD, x.num)
	in.Put8(ifc.QPInLogStride, 4)
	out, err := c.cmd(in)
	if err != nil {
		return nil, fmt.Errorf("create xrc target: %w", err)
	}
	qp := &QP{ctx: c, typ: QPTypeXRCRecv, qpn: out.U32(ifc.QPNOff)}
	qp.psn = qp.qpn * 0x10001 & 0xFFFFFF
	c.mu.Lock()
	c.qps[qp.qpn] = qp
	c.mu.Unlock()
	return qp, nil
}

// xrcDone completes a receive CQE of one of the context's XRC SRQs: the
// SRQ is the one the CQE names, the QP number its target's. It reports
// whether the CQE was one.
func (c *Context) xrcDone(e cq.CQE, op cq.Opcode, wc *WC) bool {
	f := e.Fields()
	c.mu.Lock()
	s := c.xsrqs[f.SRQN&0xFFFFFF]
	c.mu.Unlock()
	if s == nil {
		return false
	}
	*wc = WC{WRID: s.done(e.WQECounter()), QPN: e.QPN(), Opcode: WCRecv}
	recvFields(e, op, wc)
	return true
}
