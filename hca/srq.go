package hca

import (
	"encoding/binary"
	"sync"

	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/internal/dma"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/sq"
)

// SRQ is a shared receive queue: a ring of receive WQEs that any number of
// the function's QPs take their receives from, in the order the driver
// linked them. Each WQE starts with mlx5's 16-byte next segment
// (next_wqe_index at bytes 2–3), then its data segments; the doorbell
// record's word is the count of WQEs the driver has posted. The device
// keeps the index of the next WQE to take and the count it has taken: a
// WQE is taken whole, by one QP, and the next is the one its next segment
// names (the driver links a freed WQE behind the last, so the list runs
// through the posted WQEs in post order).
type SRQ struct {
	srqn   uint32
	pd     uint32
	fn     *Func
	buf    []byte
	db     []byte // the posted counter
	log    uint8
	stride uint8 // log WQE stride
	// An XRC SRQ: its domain, and the CQ its completions go to (a basic
	// SRQ's go to the CQ of the QP that took the WQE).
	xrcd uint32
	cq   *CQ

	mu    sync.Mutex
	head  uint16 // the next WQE to take
	taken uint16 // WQEs taken
	limit uint16 // the armed limit (0: not armed)
	qps   int    // QPs attached, under fn.mu
}

// srqCost is what an SRQ charges the function's device memory budget.
const srqCost = 1 << 10

// srqNextSeg is the size of the next segment that starts an SRQ WQE.
const srqNextSeg = 16

// posted returns the driver's posted counter.
func (s *SRQ) posted() uint16 { return uint16(dma.LoadBE32(s.db)) }

// take takes the next WQE, if one is posted, and returns its scatter list
// and index. It raises the limit event once, when the WQEs left fall
// below the armed limit.
func (s *SRQ) take(list []sq.DataFields) ([]sq.DataFields, uint16, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.posted() == s.taken {
		return list, 0, false
	}
	stride := 1 << s.stride
	idx := s.head & (1<<s.log - 1)
	w := s.buf[int(idx)*stride : (int(idx)+1)*stride]
	s.head = binary.BigEndian.Uint16(w[2:4]) & (1<<s.log - 1)
	s.taken++
	for w = w[srqNextSeg:]; len(w) >= sq.DataSegSize; w = w[sq.DataSegSize:] {
		d := sq.DataSeg(w).Fields()
		if klm.Key(d.LKey) == klm.TerminatorLKey {
			break
		}
		list = append(list, d)
	}
	if s.limit != 0 && s.posted()-s.taken < s.limit {
		s.limit = 0
		s.fn.event(ifc.EventSRQLimit, s.srqn)
	}
	return list, idx, true
}

// arm sets the limit (0 disarms it).
func (s *SRQ) arm(limit uint16) {
	s.mu.Lock()
	s.limit = limit
	s.mu.Unlock()
}

func (f *Func) createSRQ(in ifc.In) ifc.Out {
	c := &f.dev.caps
	logSize, logStride := in.U8(ifc.SRQInLogSize), in.U8(ifc.SRQInLogStride)
	if logSize > c.LogMaxRQSize || logStride < 5 || logStride > 10 {
		return failOut(ifc.StatusBadParam, 0, "SRQ log size %d stride %d", logSize, logStride)
	}
	limit := in.U16(ifc.SRQInLimit + 2)
	if uint32(limit) > 1<<logSize {
		return failOut(ifc.StatusBadParam, uint32(limit), "SRQ limit %d above its %d WQEs", limit, 1<<logSize)
	}
	buf, err := f.contiguous(in.U64(ifc.SRQInRing), 1<<(logSize+logStride))
	if err != nil {
		return failOut(ifc.StatusBadParam, 0, "SRQ ring: %v", err)
	}
	db, err := f.contiguous(in.U64(ifc.SRQInDBRec), 4)
	if err != nil || !dma.Aligned(db) {
		return failOut(ifc.StatusBadParam, 0, "SRQ doorbell record: %v", err)
	}
	pd := in.U32(ifc.SRQInPD) & 0xFFFFFF
	xrcd, cqn := in.U32(ifc.SRQInXRCD)&0xFFFFFF, in.U32(ifc.SRQInCQN)&0xFFFFFF
	f.mu.Lock()
	defer f.mu.Unlock()
	xcq := f.cqs[cqn]
	switch {
	case uint32(len(f.srqs)) >= c.MaxQP:
		return failOut(ifc.StatusExceedLim, 0, "%d SRQs", len(f.srqs))
	case xrcd != 0 && !f.xrcds.has(xrcd):
		return failOut(ifc.StatusBadResource, xrcd, "no XRC domain %#x", xrcd)
	case xrcd != 0 && xcq == nil:
		return failOut(ifc.StatusBadResource, cqn, "no CQ %#x", cqn)
	case !f.charge(srqCost):
		return failOut(ifc.StatusExceedLim, 0, "device memory budget: no room for an SRQ")
	case !f.pdRef(pd, 1):
		f.uncharge(srqCost)
		return failOut(ifc.StatusBadResource, pd, "no PD %#x", pd)
	}
	if xrcd == 0 {
		xcq = nil
	} else {
		f.xrcdRef(xrcd, 1)
		xcq.qps++ // the CQ stays while the SRQ completes into it
	}
	for f.srqs[f.nextSRQN] != nil || f.nextSRQN == 0 {
		f.nextSRQN = (f.nextSRQN + 1) & 0xFFFFFF
	}
	s := &SRQ{srqn: f.nextSRQN, pd: pd, fn: f, buf: buf, db: db, log: logSize, stride: logStride, limit: limit, xrcd: xrcd, cq: xcq}
	s.taken = s.posted() // what the driver posted before creating it is not the device's
	f.srqs[s.srqn] = s
	f.nextSRQN = (f.nextSRQN + 1) & 0xFFFFFF
	o := ifc.In(okOut(ifc.SRQNOff + 4))
	o.Put32(ifc.SRQNOff, s.srqn)
	return ifc.Out(o)
}

func (f *Func) destroySRQ(srqn uint32) ifc.Out {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.srqs[srqn]
	if s == nil {
		return failOut(ifc.StatusBadResource, srqn, "no SRQ %#x", srqn)
	}
	if s.qps > 0 {
		return failOut(ifc.StatusResBusy, srqn, "SRQ %#x has %d QPs", srqn, s.qps)
	}
	delete(f.srqs, srqn)
	f.pdRef(s.pd, -1)
	if s.cq != nil {
		// A target QP in the middle of a message into this SRQ may still
		// complete that one message on the CQ (as a NIC may, racing the
		// destroy); a function's memory stays mapped while it lives.
		s.cq.qps--
		f.xrcdRef(s.xrcd, -1)
	}
	f.uncharge(srqCost)
	return okOut(0)
}

func (f *Func) lookupSRQ(srqn uint32) *SRQ {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.srqs[srqn]
}

func (f *Func) armSRQ(in ifc.In) ifc.Out {
	srqn := in.U32(ifc.SRQNOff) & 0xFFFFFF
	s := f.lookupSRQ(srqn)
	if s == nil {
		return failOut(ifc.StatusBadResource, srqn, "no SRQ %#x", srqn)
	}
	limit := in.U16(ifc.SRQArmLimit + 2)
	if uint32(limit) > 1<<s.log {
		return failOut(ifc.StatusBadParam, uint32(limit), "SRQ limit %d above its %d WQEs", limit, 1<<s.log)
	}
	s.arm(limit)
	return okOut(0)
}

func (f *Func) querySRQ(srqn uint32) ifc.Out {
	s := f.lookupSRQ(srqn)
	if s == nil {
		return failOut(ifc.StatusBadResource, srqn, "no SRQ %#x", srqn)
	}
	s.mu.Lock()
	limit, taken := s.limit, s.taken
	s.mu.Unlock()
	o := ifc.In(okOut(ifc.SRQOutSize))
	o.Put32(ifc.SRQOutLimit, uint32(limit)).Put32(ifc.SRQOutTaken, uint32(taken)).Put32(ifc.SRQOutPD, s.pd)
	o.Put8(ifc.SRQOutLogSize, s.log).Put8(ifc.SRQOutLogStride, s.stride)
	return ifc.Out(o)
}

// An XRC domain groups XRC SRQs and the XRC target QPs that serve into
// them: a target QP takes a message into the SRQ its XRCETH names only if
// that SRQ is of the target's domain. The function's table counts, per
// domain, the objects using it (the domain itself counts 1), as for PDs.
func (f *Func) allocXRCD() ifc.Out {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.xrcds.alloc(f.dev.caps.MaxPD, ifc.XRCDOff)
}

func (f *Func) deallocXRCD(x uint32) ifc.Out {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.xrcds.free(x)
}

// xrcdRef adds d to domain x's count, if x exists (under mu).
func (f *Func) xrcdRef(x uint32, d int) bool { return f.xrcds.ref(x, d) }

// xrcSRQ returns the XRC SRQ srqn if it is of XRC domain x.
func (f *Func) xrcSRQ(srqn, x uint32) *SRQ {
	s := f.lookupSRQ(srqn)
	if s == nil || s.xrcd != x {
		return nil
	}
	return s
}
