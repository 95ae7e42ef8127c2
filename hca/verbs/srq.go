package verbs

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/internal/dma"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/sq"
)

// SRQInitAttr configures a shared receive queue.
type SRQInitAttr struct {
	// MaxWR and MaxSGE are the receive WRs it holds and the entries each
	// may have; the SRQ may hold more.
	MaxWR, MaxSGE int
	// Limit arms the limit event at once (0: not armed); see Modify.
	Limit int
	// XRCD makes an XRC SRQ of that domain: XRC targets of the domain
	// serve the messages that name it into it, and its completions go to
	// CQ (which it then needs).
	XRCD *XRCD
	CQ   *CQ
}

// SRQ is a shared receive queue: QPs created with it (QPInitAttr.SRQ) take
// their receives from it, each WR by one QP, in post order. Its ring is
// mlx5's: every WQE starts with a next segment that links the free WQEs
// into a list, the driver posts at the list's head and links a completed
// WQE behind its tail. PostRecv is safe for concurrent use.
type SRQ struct {
	ctx    *Context
	pd     *PD
	srqn   uint32
	buf    []byte
	io     uint64
	db     []byte
	dbIO   uint64
	log    uint8
	shift  uint8
	maxSGE int
	xrc    bool // an XRC SRQ (Context.xsrqs)

	mu      sync.Mutex
	head    uint16 // the next WQE to post
	tail    uint16 // the last free WQE
	counter uint16 // WQEs posted (the doorbell record)
	wrid    []uint64
}

// CreateSRQ creates a shared receive queue in the PD.
func (pd *PD) CreateSRQ(a *SRQInitAttr) (*SRQ, error) {
	c := pd.ctx
	if a.MaxWR <= 0 || a.MaxSGE <= 0 || a.MaxSGE > int(c.caps.MaxSGE) || a.Limit < 0 || a.Limit > a.MaxWR ||
		a.XRCD != nil && a.CQ == nil {
		return nil, fmt.Errorf("create srq %+v: %w", *a, ErrInvalid)
	}
	// One WQE more than asked: the list keeps its tail free (mlx5).
	s := &SRQ{ctx: c, pd: pd, log: pow2(a.MaxWR + 1), shift: max(pow2(16+a.MaxSGE*sq.DataSegSize), 5)}
	if s.log > c.caps.LogMaxRQSize {
		return nil, fmt.Errorf("create srq: 2^%d WQEs: %w", s.log, ErrInvalid)
	}
	s.maxSGE = (1<<s.shift - 16) / sq.DataSegSize
	var err error
	if s.buf, s.io, err = c.dma(1<<(s.log+s.shift), 4096); err != nil {
		return nil, fmt.Errorf("create srq: %w", err)
	}
	if s.db, s.dbIO, err = c.dma(64, 64); err != nil {
		c.fn.FreeDMA(s.io)
		return nil, fmt.Errorf("create srq: %w", err)
	}
	n := 1 << s.log
	for i := range n {
		binary.BigEndian.PutUint16(s.buf[i<<s.shift+2:], uint16((i+1)&(n-1)))
	}
	s.tail = uint16(n - 1)
	s.wrid = make([]uint64, n)
	in := ifc.NewIn(ifc.CmdCreateSRQ, ifc.SRQInSize).Put32(ifc.SRQInPD, pd.pdn)
	in.Put8(ifc.SRQInLogSize, s.log).Put8(ifc.SRQInLogStride, s.shift).Put32(ifc.SRQInLimit, uint32(a.Limit))
	in.Put64(ifc.SRQInRing, s.io).Put64(ifc.SRQInDBRec, s.dbIO)
	if a.XRCD != nil {
		in = append(in, make(ifc.In, ifc.SRQInSizeXRC-len(in))...)
		in.Put32(ifc.SRQInXRCD, a.XRCD.num).Put32(ifc.SRQInCQN, a.CQ.cqn)
	}
	out, err := c.cmd(in)
	if err != nil {
		s.free()
		return nil, fmt.Errorf("create srq: %w", err)
	}
	s.srqn = out.U32(ifc.SRQNOff)
	if a.XRCD != nil {
		s.xrc = true
		c.mu.Lock()
		c.xsrqs[s.srqn] = s
		c.mu.Unlock()
	}
	return s, nil
}

func (s *SRQ) free() {
	s.ctx.fn.FreeDMA(s.io)
	s.ctx.fn.FreeDMA(s.dbIO)
}

// SRQN returns the SRQ's number.
func (s *SRQ) SRQN() uint32 { return s.srqn }

// MaxWR returns the receive WRs the SRQ holds.
func (s *SRQ) MaxWR() int { return 1<<s.log - 1 }

// Destroy destroys the SRQ; it fails while QPs use it.
func (s *SRQ) Destroy() error {
	if _, err := s.ctx.cmd(ifc.NewIn(ifc.CmdDestroySRQ, ifc.SRQNOff+4).Put32(ifc.SRQNOff, s.srqn)); err != nil {
		return fmt.Errorf("destroy srq %#x: %w", s.srqn, err)
	}
	if s.xrc {
		s.ctx.mu.Lock()
		delete(s.ctx.xsrqs, s.srqn)
		s.ctx.mu.Unlock()
	}
	s.free()
	return nil
}

// Modify arms the limit event: once fewer than limit WRs are left in the
// SRQ, the context's async events get one ifc.EventSRQLimit naming it, and
// the limit is disarmed (0 disarms it now). The SRQ cannot be resized.
func (s *SRQ) Modify(limit int) error {
	if limit < 0 || limit > s.MaxWR() {
		return fmt.Errorf("modify srq %#x: limit %d: %w", s.srqn, limit, ErrInvalid)
	}
	in := ifc.NewIn(ifc.CmdArmRQ, ifc.SRQArmSize).Put32(ifc.SRQNOff, s.srqn).Put32(ifc.SRQArmLimit, uint32(limit))
	if _, err := s.ctx.cmd(in); err != nil {
		return fmt.Errorf("modify srq %#x: %w", s.srqn, err)
	}
	return nil
}

// Limit returns the armed limit (0: none), as the device reports it.
func (s *SRQ) Limit() (int, error) {
	out, err := s.ctx.cmd(ifc.NewIn(ifc.CmdQuerySRQ, ifc.SRQNOff+4).Put32(ifc.SRQNOff, s.srqn))
	if err != nil {
		return 0, fmt.Errorf("query srq %#x: %w", s.srqn, err)
	}
	return int(out.U32(ifc.SRQOutLimit)), nil
}

// PostRecv posts receive work requests to the SRQ. On error it returns the
// index of the first WR not posted (ErrRingFull: no free WQE).
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	posted := 0
	var err error
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SG) > s.maxSGE {
			err = fmt.Errorf("srq recv WR %d: %d SGEs, at most %d: %w", i, len(wr.SG), s.maxSGE, ErrTooManySGE)
			break
		}
		if s.head == s.tail {
			err = fmt.Errorf("srq recv WR %d: %w", i, ErrRingFull)
			break
		}
		w := s.buf[int(s.head)<<s.shift : int(s.head+1)<<s.shift]
		next := binary.BigEndian.Uint16(w[2:])
		d := w[16:]
		for j, g := range wr.SG {
			sq.DataSeg(d[j*sq.DataSegSize:]).Encode(&sq.DataFields{ByteCount: g.Length, LKey: g.LKey, Addr: g.Addr})
		}
		if len(wr.SG)*sq.DataSegSize < len(d) {
			sq.DataSeg(d[len(wr.SG)*sq.DataSegSize:]).Encode(&sq.DataFields{LKey: uint32(klm.TerminatorLKey)})
		}
		s.wrid[s.head] = wr.WRID
		s.head = next
		s.counter++
		posted++
	}
	if posted > 0 {
		dma.StoreBE32(s.db, uint32(s.counter))
	}
	return posted, err
}

// done returns the WR ID of the completed WQE idx and links the WQE
// behind the free list's tail.
func (s *SRQ) done(idx uint16) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx &= 1<<s.log - 1
	binary.BigEndian.PutUint16(s.buf[int(s.tail)<<s.shift+2:], idx)
	s.tail = idx
	return s.wrid[idx]
}
