package hca

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/psv"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// Mailbox layouts (byte offsets; every field big-endian). docs/DEVICE.md
// has the same tables.
const (
	// QUERY_HCA_CAP output.
	CapOutMaxPD        = 8
	CapOutMaxCQ        = 12
	CapOutMaxQP        = 16
	CapOutMaxPSV       = 20
	CapOutMaxMkeys     = 24
	CapOutLogSizes     = 28 // log_max_cq_sz, log_max_sq_sz, log_max_rq_sz, log_max_klm_list_size (one byte each)
	CapOutMaxSGE       = 32 // BE16, then max_indirection, max_rd_atomic
	CapOutMaxIndir     = 34
	CapOutMaxRDAtomic  = 35
	CapOutMaxInline    = 36
	CapOutFlags        = 40 // bit 0 sho (signature handover)
	CapOutUMRFence     = 43
	CapOutLID          = 44 // BE16
	CapOutRepeatEnts   = 48 // BE16, then min and max log page size
	CapOutMinLogPage   = 50
	CapOutMaxLogPage   = 51
	CapOutMaxMapped    = 56 // BE64
	CapOutGID          = 64 // 16 bytes: the port's GID on the wire (zero: no wire)
	CapOutFuncMem      = 80 // BE64: the device memory one function's objects may hold (0: no bound)
	CapOutDevMem       = 88 // BE64: the device memory all functions' objects may hold
	CapOutSize         = 96
	CapFlagSigHandover = 1

	// QUERY_PORT_COUNTERS output: the counters from 8.
	CountersOut = 8

	// ALLOC_PD output, DEALLOC_PD input: the PD.
	PDOff = 8

	// CREATE_MKEY input: mkey context at 16 (umr.MkeySeg layout), then
	// the initial translation; output: the mkey index at 8.
	MkeyInCtx   = 16
	MkeyInXLT   = MkeyInCtx + umr.MkeySegSize
	MkeyOutIdx  = 8
	MkeyIdxOff  = 8 // DESTROY_MKEY and QUERY_MKEY input
	MkeyOutCtx  = 16
	MkeyOutSize = MkeyOutCtx + umr.MkeySegSize

	// CREATE_CQ input; output: the CQN at 8.
	CQInLogSize = 8 // one byte
	CQInRing    = 16
	CQInDBRec   = 24
	CQInSize    = 32
	CQNOff      = 8 // CREATE_CQ output, DESTROY_CQ input

	// CREATE_QP input; output: the QPN at 8.
	QPInPD        = 8
	QPInSendCQ    = 12
	QPInRecvCQ    = 16
	QPInFlags     = 20 // bit 0: integrity (signature) enabled
	QPInLogSQ     = 24 // one byte each: log WQEBBs, log RQ WQEs, log RQ stride
	QPInLogRQ     = 25
	QPInLogStride = 26
	QPInSQ        = 32
	QPInRQ        = 40
	QPInDBRec     = 48
	QPInSize      = 56
	QPFlagIntegr  = 1
	QPFlagDBHint  = 2 // model extension: the send activity hint (sq.DBRecHintSize)
	// QPFlagDrainSigErr is signature pipelining (mlx5's drain_sigerr QP
	// context bit, which rdma-core's provider sets with an INIT2INIT for
	// MLX5DV_QP_CREATE_SIG_PIPELINING): a fenced WQE waits for the WQEs
	// before it and, if one of them met a signature error, the QP goes to
	// SQD instead of running it.
	QPFlagDrainSigErr = 4
	QPNOff            = 8 // CREATE_QP output; DESTROY_QP, modify and QUERY_QP input

	// Modify QP input (RST2INIT … RTS2SQD): qpn at 8, opt_param_mask at
	// 12, the QP context from 16. RST2INIT always takes the access flags;
	// INIT2INIT, RTS2RTS and SQD_RTS only with QPOptAccess in the mask
	// (mlx5's RRE|RAE|RWE optional-parameter bits).
	QPOptMask       = 12
	QPOptAccess     = 1<<1 | 1<<2 | 1<<3
	QPCAccess       = 16 // bit 0 remote read, bit 1 remote write, bit 2 remote atomic
	QPCRemoteLID    = 20 // BE16
	QPCRemoteQPN    = 24
	QPCRQPSN        = 28
	QPCSQPSN        = 32
	QPCMinRNR       = 36 // one byte each: min_rnr_timer, timeout, retry_cnt, rnr_retry
	QPCTimeout      = 37
	QPCRetry        = 38
	QPCRNRRetry     = 39
	QPCMaxRD        = 40 // one byte each: max_rd_atomic, max_dest_rd_atomic
	QPCMaxDestRD    = 41
	QPCMTU          = 42 // INIT2RTR: path MTU, 1 (256) … 5 (4096); 0 means 4096
	QPModifySize    = 48 // the shortest modify input; the remote GID follows in a longer one
	QPCRemoteGID    = 48 // INIT2RTR: 16 bytes, the peer's GID (zero: a LID on the fabric)
	QPModifyGIDSize = 64
	QPOutState      = 8  // QUERY_QP output: the state byte, then the context from 16
	QPOutSQCounter  = 44 // QUERY_QP output: BE16 hw_sq_wqebb_counter, the index of the next send WQE the device fetches
	QPOutSize       = QPModifyGIDSize
	QPAccessRead    = 1
	QPAccessWrite   = 2
	QPAccessAtomic  = 4

	// CREATE_PSV input: num_psv[31:28] | pd[23:0] at 8; output: the PSV
	// indices at 8, 12, 16, 20. DESTROY_PSV input: the index at 8.
	PSVInPDNum = 8
	PSVOutIdx  = 8
	PSVOutSize = 24
	PSVIdxOff  = 8
)

// Command implements Function.Command. Bad input of any kind gets a status,
// never a panic.
func (f *Func) Command(inb []byte) (out []byte) {
	in := In(inb)
	defer func() {
		if r := recover(); r != nil {
			f.dev.log.Error("command panicked", "opcode", in.Opcode(), "panic", r)
			out = failOut(StatusIntErr, 0xDEAD, "internal error: %v", r)
		}
	}()
	if len(in) < InHeaderSize {
		return failOut(StatusBadInputLen, 0, "mailbox of %d bytes", len(in))
	}
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return failOut(StatusBadSysState, 0, "function closed")
	}
	need := map[uint16]int{
		CmdDeallocPD: PDOff + 4, CmdCreateMkey: MkeyInXLT, CmdDestroyMkey: MkeyIdxOff + 4, CmdQueryMkey: MkeyIdxOff + 4,
		CmdCreateCQ: CQInSize, CmdDestroyCQ: CQNOff + 4, CmdCreateQP: QPInSize, CmdDestroyQP: QPNOff + 4,
		CmdQueryQP: QPNOff + 4, CmdCreatePSV: PSVInPDNum + 4, CmdDestroyPSV: PSVIdxOff + 4,
	}
	op := in.Opcode()
	if isModify(op) {
		need[op] = QPModifySize
	}
	if n, ok := need[op]; ok && len(in) < n {
		return failOut(StatusBadInputLen, uint32(op), "command %#x needs %d bytes, got %d", op, n, len(in))
	}
	switch op {
	case CmdQueryHCACap:
		return f.queryCap()
	case CmdQueryPortCounters:
		v := f.dev.Counters().Values()
		o := In(okOut(CountersOut + 8*len(v)))
		for i, x := range v {
			o.Put64(CountersOut+8*i, x)
		}
		return Out(o)
	case CmdAllocPD:
		return f.allocPD()
	case CmdDeallocPD:
		return f.deallocPD(in.U32(PDOff) & 0xFFFFFF)
	case CmdCreateMkey:
		return f.createMkey(in)
	case CmdDestroyMkey:
		return f.destroyMkey(in.U32(MkeyIdxOff) & 0xFFFFFF)
	case CmdQueryMkey:
		return f.queryMkey(in.U32(MkeyIdxOff) & 0xFFFFFF)
	case CmdCreateCQ:
		return f.createCQ(in)
	case CmdDestroyCQ:
		return f.destroyCQ(in.U32(CQNOff) & 0xFFFFFF)
	case CmdCreateQP:
		return f.createQP(in)
	case CmdDestroyQP:
		return f.destroyQP(in.U32(QPNOff) & 0xFFFFFF)
	case CmdQueryQP:
		return f.queryQP(in.U32(QPNOff) & 0xFFFFFF)
	case CmdCreatePSV:
		return f.createPSV(in)
	case CmdDestroyPSV:
		return f.destroyPSV(in.U32(PSVIdxOff) & 0xFFFFFF)
	}
	if isModify(op) {
		return f.modifyQP(op, in)
	}
	return failOut(StatusBadOp, uint32(op), "unknown opcode %#x", op)
}

func isModify(op uint16) bool {
	switch op {
	case CmdRST2INIT, CmdINIT2RTR, CmdRTR2RTS, CmdRTS2RTS, CmdSQERR2RTS, Cmd2ERR, Cmd2RST, CmdSQD2RTS, CmdRTS2SQD, CmdINIT2INIT:
		return true
	}
	return false
}

func (f *Func) queryCap() Out {
	c := &f.dev.caps
	o := In(okOut(CapOutSize))
	o.Put32(CapOutMaxPD, c.MaxPD).Put32(CapOutMaxCQ, c.MaxCQ).Put32(CapOutMaxQP, c.MaxQP).Put32(CapOutMaxPSV, c.MaxPSV)
	o.Put32(CapOutMaxMkeys, c.Mkey.MaxMkeys)
	o.Put8(CapOutLogSizes, c.LogMaxCQSize).Put8(CapOutLogSizes+1, c.LogMaxSQSize).Put8(CapOutLogSizes+2, c.LogMaxRQSize)
	o.Put8(CapOutLogSizes+3, c.Mkey.LogMaxKLMListSize)
	o.Put16(CapOutMaxSGE, c.MaxSGE).Put8(CapOutMaxIndir, c.Mkey.MaxIndirection).Put8(CapOutMaxRDAtomic, c.MaxRDAtomic)
	o.Put32(CapOutMaxInline, c.MaxInline)
	if c.SignatureHandover {
		o.Put8(CapOutFlags+3, CapFlagSigHandover)
	}
	o.Put8(CapOutUMRFence, c.UMRFence<<4|o[CapOutUMRFence])
	o.Put16(CapOutLID, f.dev.lid)
	o.Put16(CapOutRepeatEnts, c.Mkey.MaxRepeatEntries).Put8(CapOutMinLogPage, c.Mkey.MinLogPageSize).Put8(CapOutMaxLogPage, c.Mkey.MaxLogPageSize)
	o.Put64(CapOutMaxMapped, c.MaxMappedBytes)
	if w := f.dev.wire.Load(); w != nil {
		copy(o[CapOutGID:], w.gid[:])
	}
	o.Put64(CapOutFuncMem, c.FuncMemBytes).Put64(CapOutDevMem, c.DevMemBytes)
	return Out(o)
}

func (f *Func) allocPD() Out {
	f.mu.Lock()
	defer f.mu.Unlock()
	if uint32(len(f.pds)) >= f.dev.caps.MaxPD {
		return failOut(StatusExceedLim, 0, "%d PDs", len(f.pds))
	}
	for f.pds[f.nextPD] != 0 || f.nextPD == 0 {
		f.nextPD = (f.nextPD + 1) & 0xFFFFFF
	}
	pd := f.nextPD
	f.pds[pd] = 1 // the count starts at 1: the PD itself
	f.nextPD = (f.nextPD + 1) & 0xFFFFFF
	o := In(okOut(PDOff + 4))
	o.Put32(PDOff, pd)
	return Out(o)
}

func (f *Func) deallocPD(pd uint32) Out {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch n := f.pds[pd]; {
	case n == 0:
		return failOut(StatusBadResource, pd, "no PD %#x", pd)
	case n > 1:
		return failOut(StatusResBusy, pd, "PD %#x has %d objects", pd, n-1)
	}
	delete(f.pds, pd)
	return okOut(0)
}

// pdRef takes (+1) or drops (-1) a reference on pd; it fails if pd does
// not exist. Called with f.mu held.
func (f *Func) pdRef(pd uint32, d int) bool {
	if f.pds[pd] == 0 {
		return false
	}
	f.pds[pd] += d
	return true
}

// An mkey holds a reference on its PD: CREATE_MKEY takes it, DESTROY_MKEY
// drops the one of the PD the key is in then (a UMR that moves the key to
// another PD moves the reference, QP.doUMR).
func (f *Func) createMkey(in In) Out {
	mk := umr.MkeySeg(in[MkeyInCtx:MkeyInXLT]).Fields()
	m := mk.Mkey()
	xlt := in[MkeyInXLT:]
	if len(xlt)%klm.OctowordSize != 0 || uint32(len(xlt)/klm.OctowordSize) > m.XLTOctowords {
		return failOut(StatusBadParam, 0, "%d translation bytes for a capacity of %d octowords", len(xlt), m.XLTOctowords)
	}
	m.XLT = []byte(xlt)
	// A signature key is created with bsf_en set; its BSF comes with the
	// signature UMR.
	m.BSF = nil
	f.mu.Lock()
	defer f.mu.Unlock()
	cost := mkeyCost(m.XLTOctowords)
	if !f.charge(cost) {
		return failOut(StatusExceedLim, 0, "device memory budget: an mkey of %d translation octowords does not fit", m.XLTOctowords)
	}
	if !f.pdRef(m.PD, 1) {
		f.uncharge(cost)
		return failOut(StatusBadResource, m.PD, "no PD %#x", m.PD)
	}
	key, err := f.mkeys.Create(m)
	if err != nil {
		f.uncharge(cost)
		f.pdRef(m.PD, -1)
		if errors.Is(err, klm.ErrTableFull) {
			return failOut(StatusExceedLim, 0, "%v", err) // like the other object limits
		}
		return failOut(StatusBadParam, 0, "%v", err)
	}
	f.mkeyCost[key.Index()] = cost
	o := In(okOut(MkeyOutIdx + 4))
	o.Put32(MkeyOutIdx, key.Index())
	return Out(o)
}

func (f *Func) destroyMkey(idx uint32) Out {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.mkeys.Lookup(idx)
	if m == nil || idx < klm.FirstIndex {
		return failOut(StatusBadResource, idx, "no mkey %#x", idx)
	}
	if err := f.mkeys.Destroy(idx); err != nil {
		return failOut(StatusBadResource, idx, "%v", err)
	}
	f.pdRef(m.PD, -1)
	f.uncharge(f.mkeyCost[idx])
	delete(f.mkeyCost, idx)
	f.sigForget(idx)
	return okOut(0)
}

func (f *Func) queryMkey(idx uint32) Out {
	m := f.mkeys.Lookup(idx)
	if m == nil {
		return failOut(StatusBadResource, idx, "no mkey %#x", idx)
	}
	o := okOut(MkeyOutSize)
	umr.MkeySeg(o[MkeyOutCtx:]).Encode(&umr.MkeyFields{
		Free: m.Free, Mode: m.Mode, SmallFence: m.SmallFence, UMREnabled: m.UMREnabled, Access: m.Access,
		QPN: m.QPN, Variant: m.Variant, Length64: m.Length64, BSFEnabled: m.BSFEnabled, ExpectedSigErr: m.ExpectedSigErr,
		RemoteInvalidate: m.RemoteInvalidate, PD: m.PD, StartAddr: m.StartAddr, Len: m.Len,
		BSFOctowords: uint32(len(m.BSF) / klm.OctowordSize), XLTOctowords: m.XLTOctowords, LogPageSize: m.LogPageSize,
	})
	return o
}

// contiguous returns the host memory at [iova, iova+n) if one mapped buffer
// holds all of it (rings and doorbell records must be contiguous).
func (f *Func) contiguous(iova uint64, n int) ([]byte, error) {
	segs, err := f.mem.Segments(nil, iova, uint64(n))
	if err != nil {
		return nil, err
	}
	if len(segs) != 1 {
		return nil, fmt.Errorf("%d bytes at %#x span %d mapped buffers", n, iova, len(segs))
	}
	return segs[0], nil
}

func (f *Func) createCQ(in In) Out {
	logSize := in.U8(CQInLogSize)
	if logSize > f.dev.caps.LogMaxCQSize {
		return failOut(StatusBadParam, uint32(logSize), "log CQ size %d above %d", logSize, f.dev.caps.LogMaxCQSize)
	}
	buf, err := f.contiguous(in.U64(CQInRing), cq.CQESize<<logSize)
	if err != nil {
		return failOut(StatusBadParam, 0, "CQ ring: %v", err)
	}
	db, err := f.contiguous(in.U64(CQInDBRec), cq.DBRecSize)
	if err != nil {
		return failOut(StatusBadParam, 0, "CQ doorbell record: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if uint32(len(f.cqs)) >= f.dev.caps.MaxCQ {
		return failOut(StatusExceedLim, 0, "%d CQs", len(f.cqs))
	}
	if !f.charge(cqCost) {
		return failOut(StatusExceedLim, 0, "device memory budget: no room for a CQ")
	}
	for f.cqs[f.nextCQN] != nil || f.nextCQN == 0 {
		f.nextCQN = (f.nextCQN + 1) & 0xFFFFFF
	}
	c := &CQ{cqn: f.nextCQN, fn: f}
	c.ring, err = cq.NewRing(buf, db, logSize, func() { f.event(EventCompletion, c.cqn) })
	if err != nil {
		f.uncharge(cqCost)
		return failOut(StatusBadParam, 0, "%v", err)
	}
	f.cqs[c.cqn] = c
	f.nextCQN = (f.nextCQN + 1) & 0xFFFFFF
	o := In(okOut(CQNOff + 4))
	o.Put32(CQNOff, c.cqn)
	return Out(o)
}

func (f *Func) destroyCQ(cqn uint32) Out {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cqs[cqn]
	if c == nil {
		return failOut(StatusBadResource, cqn, "no CQ %#x", cqn)
	}
	if c.qps > 0 {
		return failOut(StatusResBusy, cqn, "CQ %#x has %d QPs", cqn, c.qps)
	}
	delete(f.cqs, cqn)
	f.uncharge(cqCost)
	return okOut(0)
}

func (f *Func) createPSV(in In) Out {
	w := in.U32(PSVInPDNum)
	n, pd := int(w>>28), w&0xFFFFFF
	if n < 1 || n > 4 {
		return failOut(StatusBadParam, uint32(n), "num_psv %d", n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if uint32(len(f.psvs)+n) > f.dev.caps.MaxPSV {
		return failOut(StatusExceedLim, 0, "%d PSVs", len(f.psvs))
	}
	if !f.charge(uint64(n) * psvCost) {
		return failOut(StatusExceedLim, 0, "device memory budget: no room for %d PSVs", n)
	}
	if !f.pdRef(pd, n) {
		f.uncharge(uint64(n) * psvCost)
		return failOut(StatusBadResource, pd, "no PD %#x", pd)
	}
	o := In(okOut(PSVOutSize))
	for i := range n {
		for f.psvs[f.nextPSV] != nil || f.nextPSV == 0 {
			f.nextPSV = (f.nextPSV + 1) & 0xFFFFFF
		}
		p := &PSV{index: f.nextPSV, pd: pd}
		f.psvMu.Lock()
		f.psvs[p.index] = p
		f.psvMu.Unlock()
		o.Put32(PSVOutIdx+4*i, p.index)
	}
	return Out(o)
}

func (f *Func) destroyPSV(idx uint32) Out {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.psvs[idx]
	if p == nil {
		return failOut(StatusBadResource, idx, "no PSV %#x", idx)
	}
	f.psvMu.Lock()
	delete(f.psvs, idx)
	f.psvMu.Unlock()
	f.pdRef(p.pd, -1)
	f.uncharge(psvCost)
	return okOut(0)
}

// psv returns the PSV at idx of this function, or nil. It takes only
// psvMu: the mkey table's check calls it with the table locked.
func (f *Func) psv(idx uint32) *PSV {
	f.psvMu.RLock()
	defer f.psvMu.RUnlock()
	return f.psvs[idx]
}

// checkMkey is the mkey table's check (klm.Table.SetCheck) of a context a
// UMR is about to publish: a signature key's BSF must name, for each
// domain with PI, a PSV of this function in the key's PD. Another
// function's PSV index is, here, an index this function does not have;
// a UMR naming one fails with a local protection error (as SET_PSV on it
// does) rather than running the key's accesses on a seed nobody set. A
// BSF the model cannot decode is left to fail at use (CONFORMANCE.md).
// It runs when the BSF, the PD or the free state changes, not on an
// invalidation.
func (f *Func) checkMkey(_ uint32, cur, next *klm.Mkey) error {
	if next.Free || !next.BSFEnabled || len(next.BSF) != psv.BSFSize {
		return nil
	}
	if !cur.Free && cur.PD == next.PD && bytes.Equal(cur.BSF, next.BSF) {
		return nil
	}
	s, err := psv.Decode(next.BSF, 0, 0)
	if err != nil {
		return nil
	}
	b := psv.BSF(next.BSF).Fields()
	for _, d := range []struct {
		pi   bool
		idx  uint32
		name string
	}{{s.Mem.HasPI(), b.MemPSV, "memory"}, {s.Wire.HasPI(), b.WirePSV, "wire"}} {
		if !d.pi {
			continue
		}
		if p := f.psv(d.idx); p == nil || p.pd != next.PD {
			return fmt.Errorf("the BSF's %s domain names PSV %#x, which is not the function's in PD %#x: %w", d.name, d.idx, next.PD, klm.ErrBadAccess)
		}
	}
	return nil
}

var _ = sq.WQEBBSize
