package verbs

import (
	"encoding/binary"
	"fmt"

	"github.com/hcasim/hcasim/sq"
)

// SEND, RDMA WRITE / READ and atomics: the WQE is the control segment, a
// remote-address segment for RDMA and atomics, an atomic segment for
// atomics, then the data segments or the data inline
// (mlx5-integrity.md §2.1).

// wqeOpcodes maps the WRs of this file to their WQE opcodes.
var wqeOpcodes = [numWROpcodes]sq.Opcode{
	WRSend: sq.OpSend, WRSendWithImm: sq.OpSendImm, WRSendWithInv: sq.OpSendInval,
	WRRDMAWrite: sq.OpRDMAWrite, WRRDMAWriteWithImm: sq.OpRDMAWriteImm, WRRDMARead: sq.OpRDMARead,
	WRAtomicCmpSwp: sq.OpAtomicCS, WRAtomicFetchAdd: sq.OpAtomicFA,
}

// postRDMA builds a SEND, RDMA or atomic WR's WQE in scratch and posts
// it. Called with smu held.
func (qp *QP) postRDMA(wr *SendWR) error {
	// Every segment is written whole; postWQE zeroes the rest of the last
	// WQEBB (and dataSegs an inline segment's padding).
	w := qp.scratch[:]
	seg := w[sq.CtrlSegSize:]
	x := 0 // bytes of the XRC segment
	if qp.typ == QPTypeXRCSend {
		// mlx5's XRC WQE: the remote SRQ after the control segment.
		sq.XRCSeg(seg).Encode(wr.XRCSRQN)
		seg, x = seg[sq.XRCSegSize:], sq.XRCSegSize
	}
	n := 0 // bytes of segments after the control (and XRC) segment
	imm := uint32(0)
	switch wr.Opcode {
	case WRSendWithImm, WRRDMAWriteWithImm:
		imm = wr.Imm
	case WRSendWithInv:
		imm = wr.InvalidateRKey
	}
	if qp.typ == QPTypeUD {
		// mlx5's UD WQE: the datagram segment after the control segment.
		if (wr.Opcode != WRSend && wr.Opcode != WRSendWithImm) || wr.UD == nil {
			return fmt.Errorf("ud post of opcode %d: %w", wr.Opcode, ErrBadOpcode)
		}
		d := wr.UD
		hop := d.HopLimit
		if hop == 0 {
			hop = 64
		}
		sq.DatagramSeg(seg).Encode(&sq.DatagramFields{QKey: d.QKey, DestQPN: d.QPN, RLID: d.LID, HopLimit: hop, GRH: true,
			SGIDIndex: d.SGIDIndex, RGID: d.GID})
		n += sq.DatagramSegSize
	}
	if qp.typ == QPTypeRaw {
		// mlx5's raw packet WQE: the Ethernet segment, here with no
		// inline header (the device asks for none), then the frame.
		if wr.Opcode != WRSend {
			return fmt.Errorf("raw packet post of opcode %d: %w", wr.Opcode, ErrBadOpcode)
		}
		n += sq.EthSeg(seg).Encode(nil, 0)
	}
	switch wr.Opcode {
	case WRRDMAWrite, WRRDMAWriteWithImm, WRRDMARead, WRAtomicCmpSwp, WRAtomicFetchAdd:
		sq.RaddrSeg(seg).Encode(&sq.RaddrFields{Addr: wr.RemoteAddr, RKey: wr.RKey})
		n += sq.RaddrSegSize
	}
	switch wr.Opcode {
	case WRAtomicCmpSwp:
		sq.AtomicSeg(seg[n:]).Encode(&sq.AtomicFields{SwapAdd: wr.Swap, Compare: wr.CompareAdd})
		n += sq.AtomicSize
	case WRAtomicFetchAdd:
		sq.AtomicSeg(seg[n:]).Encode(&sq.AtomicFields{SwapAdd: wr.CompareAdd})
		n += sq.AtomicSize
	}
	k, err := qp.dataSegs(seg[n:], wr)
	if err != nil {
		return err
	}
	n += k
	if err := qp.postWQE(wr, w, wqeOpcodes[wr.Opcode], uint8((sq.CtrlSegSize+x+n)/sq.SegSize), qp.fence(wr), imm, false); err != nil {
		return err
	}
	qp.fmCache = qp.postNext
	return nil
}

// dataSegs writes a WR's SGEs, or its data inline, and returns the bytes.
// As mlx5 (and rdma-core) do, an SGE of length 0 gets no data segment,
// and SendInline with no SGEs writes no inline segment (one with SGEs of
// length 0 writes an empty one).
func (qp *QP) dataSegs(seg []byte, wr *SendWR) (int, error) {
	if wr.Flags&SendInline != 0 && len(wr.SG) > 0 {
		if wr.Opcode == WRRDMARead || wr.Opcode == WRAtomicCmpSwp || wr.Opcode == WRAtomicFetchAdd {
			return 0, fmt.Errorf("inline %d: %w", wr.Opcode, ErrInvalid)
		}
		total := 0
		for _, s := range wr.SG {
			total += int(s.Length)
		}
		if total > qp.cap.MaxInline {
			return 0, fmt.Errorf("%d inline bytes, at most %d: %w", total, qp.cap.MaxInline, ErrInlineTooBig)
		}
		binary.BigEndian.PutUint32(seg, uint32(total)|sq.InlineFlag)
		off := 4
		for _, s := range wr.SG {
			b, err := qp.ctx.readLocal(qp.pd, s)
			if err != nil {
				return 0, err
			}
			off += copy(seg[off:], b)
		}
		end := (off + 15) &^ 15
		clear(seg[off:end])
		return end, nil
	}
	if len(wr.SG) > qp.cap.MaxSendSGE {
		return 0, fmt.Errorf("%d SGEs, at most %d: %w", len(wr.SG), qp.cap.MaxSendSGE, ErrTooManySGE)
	}
	n := 0
	for _, s := range wr.SG {
		if s.Length == 0 {
			continue
		}
		sq.DataSeg(seg[n:]).Encode(&sq.DataFields{ByteCount: s.Length, LKey: s.LKey, Addr: s.Addr})
		n += sq.DataSegSize
	}
	return n, nil
}

// readLocal returns the bytes an inline SGE names: the driver copies
// inline data from the buffer itself, as a CPU does.
func (c *Context) readLocal(pd *PD, s SGE) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, al := range c.allocs {
		if s.Addr >= al.iova && s.Addr+uint64(s.Length) <= al.iova+uint64(len(al.buf)) {
			o := s.Addr - al.iova
			return al.buf[o : o+uint64(s.Length)], nil
		}
	}
	for _, mr := range c.regs {
		if s.Addr >= mr.Addr && s.Addr+uint64(s.Length) <= mr.Addr+uint64(len(mr.Buf)) {
			o := s.Addr - mr.Addr
			return mr.Buf[o : o+uint64(s.Length)], nil
		}
	}
	return nil, fmt.Errorf("inline data at %#x: %w", s.Addr, ErrNotDMA)
}
