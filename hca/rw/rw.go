// Package rw builds a protected RDMA transfer's work requests the way the
// Linux kernel's rdma_rw_ctx_signature_init and rdma_rw_ctx_post do for
// NVMe-oF and iSER targets: an integrity MR maps the local data (and
// metadata), REG_MR_INTEGRITY registers it with the signature attributes,
// one RDMA WRITE or READ through its key moves the wire stream, and the
// MR is invalidated with LOCAL_INV before its next registration. After the
// RDMA's completion has been polled, Status reports a PI error the device
// found (ib_check_mr_status).
//
// It is a thin layer over hca/verbs: everything it does, a caller can do
// with verbs directly; the chain it posts is what the kernel posts.
package rw

import (
	"errors"
	"fmt"

	"github.com/hcasim/hcasim/hca/verbs"
)

// Dir is a transfer's direction.
type Dir uint8

// Directions.
const (
	// Write moves local memory to the peer with an RDMA WRITE: the wire
	// stream is built from memory per the signature attributes (PI
	// inserted, passed or translated).
	Write Dir = iota
	// Read moves the peer's memory here with an RDMA READ: the wire
	// stream is checked and laid out in memory per the attributes (PI
	// checked, stripped or kept).
	Read
)

func (d Dir) String() string {
	switch d {
	case Write:
		return "write"
	case Read:
		return "read"
	}
	return fmt.Sprintf("Dir(%d)", uint8(d))
}

// ErrNotInitialized is returned by Post before Init succeeded.
var ErrNotInitialized = errors.New("rw: context not initialized")

// SigCtx is one protected transfer at a time on a QP created with
// QPInitAttr.Integrity: its integrity MR is reused for every transfer,
// as a target keeps one per command slot.
type SigCtx struct {
	qp *verbs.QP
	mr *verbs.MR
	// registered: the MR was registered by an earlier Init's chain, so
	// the next chain invalidates it first.
	registered bool
	ready      bool
	wrs        [3]verbs.SendWR
	n          int
	sge        [1]verbs.SGE
}

// NewSigCtx allocates a context for transfers on qp (created with
// QPInitAttr.Integrity in pd) of up to maxSGE data and maxSGE metadata
// entries.
func NewSigCtx(pd *verbs.PD, qp *verbs.QP, maxSGE int) (*SigCtx, error) {
	if qp == nil {
		return nil, fmt.Errorf("rw: new sig ctx: qp is nil: %w", verbs.ErrInvalid)
	}
	mr, err := pd.AllocMRIntegrity(maxSGE, maxSGE)
	if err != nil {
		return nil, fmt.Errorf("rw: new sig ctx: %w", err)
	}
	return &SigCtx{qp: qp, mr: mr}, nil
}

// MR returns the context's integrity MR.
func (c *SigCtx) MR() *verbs.MR { return c.mr }

// Init prepares one transfer of data (and meta, nil when the memory
// domain has no separate metadata) to or from the peer's remoteAddr
// under rkey with the signature attributes attrs: it maps and sets the
// MR and builds the chain Post posts. The remote side's length is the
// wire length, MR.WireLen of the memory mapped.
func (c *SigCtx) Init(dir Dir, data, meta []verbs.SGE, attrs verbs.SigAttrs, remoteAddr uint64, rkey uint32) error {
	c.ready = false
	if dir != Write && dir != Read {
		return fmt.Errorf("rw: init: direction %v: %w", dir, verbs.ErrInvalid)
	}
	if err := c.mr.MapSGPI(data, meta); err != nil {
		return fmt.Errorf("rw: init %v: %w", dir, err)
	}
	if err := c.mr.SetSigAttrs(attrs); err != nil {
		return fmt.Errorf("rw: init %v: %w", dir, err)
	}
	c.n = 0
	if c.registered {
		// rdma_rw_inv_key: a registered key is invalidated before the MR
		// is registered again.
		c.wrs[c.n] = verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: c.mr.RKey}
		c.n++
	}
	c.wrs[c.n] = verbs.SendWR{Opcode: verbs.WRRegMRIntegrity, MR: c.mr, Access: verbs.AccessLocalWrite}
	c.n++
	c.sge[0] = verbs.SGE{Addr: c.mr.Addr, Length: uint32(c.mr.WireLen(c.mr.Len)), LKey: c.mr.LKey}
	op := verbs.WRRDMAWrite
	if dir == Read {
		op = verbs.WRRDMARead
	}
	c.wrs[c.n] = verbs.SendWR{Opcode: op, SG: c.sge[:], RemoteAddr: remoteAddr, RKey: rkey}
	c.n++
	c.ready = true
	return nil
}

// WRs returns the chain Init built, for a caller that posts it itself
// (behind other WRs, say): [LOCAL_INV,] REG_MR_INTEGRITY, the RDMA WR.
// Only the RDMA WR is signaled when Post posts it; the others complete
// with it, as the kernel's are unsignaled.
func (c *SigCtx) WRs() []verbs.SendWR { return c.wrs[:c.n] }

// Post posts the chain with the RDMA WR signaled under wrid. Once the
// completion is polled, Status reports the device's PI check.
func (c *SigCtx) Post(wrid uint64) error {
	if !c.ready {
		return ErrNotInitialized
	}
	last := &c.wrs[c.n-1]
	last.WRID, last.Flags = wrid, last.Flags|verbs.SendSignaled
	n, err := c.qp.PostSend(c.wrs[:c.n])
	if n > c.n-2 {
		c.registered = true // the registration went out
	}
	if err != nil {
		return fmt.Errorf("rw: post: %d of %d posted: %w", n, c.n, err)
	}
	c.ready = false
	return nil
}

// Status reports the PI error of the last transfer, nil for none
// (ib_check_mr_status with IB_MR_CHECK_SIG_STATUS). Poll the CQ that
// carried the transfer's completion first: on a Read the check runs on
// this side and its SIG_ERR CQE is taken by the poll; on a Write the
// device checks what it reads from memory.
func (c *SigCtx) Status() (*verbs.SigErr, error) {
	e, err := c.mr.CheckMRStatus()
	if err != nil {
		return nil, fmt.Errorf("rw: status: %w", err)
	}
	return e, nil
}

// Close deregisters the context's MR. Transfers must have completed.
func (c *SigCtx) Close() error {
	if err := c.mr.Dereg(); err != nil {
		return fmt.Errorf("rw: close: %w", err)
	}
	return nil
}
