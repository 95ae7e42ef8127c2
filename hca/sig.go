package hca

import (
	"errors"
	"fmt"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/psv"
	"github.com/hcasim/hcasim/t10dif"
)

// sigAccess is one access through a signature key: the memory-domain
// segments its translation gave, the transform between them and the wire,
// and where a PI error is reported.
type sigAccess struct {
	sig    *psv.Sig
	first  uint64 // the key's block the access starts at
	wlen   uint64 // the access's wire-domain length
	toWire bool   // data leaves memory (a gather) or enters it (a scatter)
	fn     *Func
	key    klm.Key
	expect uint8         // the mkey's expected_sigerr_count bit when resolved
	qp     *QP           // the QP whose send CQ gets the signature error CQE
	own    bool          // the access is one of qp's own WQEs (a local key), not a peer's request
	dix    bool          // the memory segments are the key's data and PI pieces (klm.ResolveEntries)
	stream t10dif.Stream // the transform's state while it runs (reused)
}

// sigState is the device's error state of one signature mkey: the number
// of signature errors it has reported since it was created. An error is
// reported only while the parity that count will have after reporting
// equals the expected_sigerr_count bit the last signature UMR programmed:
// the driver starts its count at 1 and flips the bit in each registration
// after an error CQE, so exactly the first error after each registration
// is reported, and none until the driver has seen the previous one.
type sigState struct {
	count uint32
}

type sigCacheEntry struct {
	m                 *klm.Mkey
	memSeed, wireSeed uint16
	sig               *psv.Sig
	err               error
}

// sigOf decodes (once per published context and PSV seeds) the signature
// configuration of m. A domain with PI whose PSV no longer exists (the
// driver destroyed it under a key still registered) fails the access
// rather than running on a seed nobody set.
func (f *Func) sigOf(idx uint32, m *klm.Mkey) (*psv.Sig, error) {
	b := psv.BSF(m.BSF).Fields()
	memSeed, memOK := f.psvSeed(b.MemPSV)
	wireSeed, wireOK := f.psvSeed(b.WirePSV)
	var s *psv.Sig
	var err error
	if e, ok := f.sigCache.Load(idx); ok {
		if c := e.(*sigCacheEntry); c.m == m && c.memSeed == memSeed && c.wireSeed == wireSeed {
			s, err = c.sig, c.err
		}
	}
	if s == nil && err == nil {
		s, err = psv.Decode(m.BSF, memSeed, wireSeed)
		f.sigCache.Store(idx, &sigCacheEntry{m: m, memSeed: memSeed, wireSeed: wireSeed, sig: s, err: err})
	}
	if err == nil && (s.Mem.HasPI() && !memOK || s.Wire.HasPI() && !wireOK) {
		return nil, errPSVGone
	}
	return s, err
}

// errPSVGone is an access through a signature key whose PSV was destroyed.
var errPSVGone = errors.New("hca: the signature key's PSV no longer exists")

func (f *Func) psvSeed(idx uint32) (uint16, bool) {
	p := f.psv(idx)
	if p == nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bg, true
}

// sigForget drops a destroyed mkey's error count: a later mkey at the
// same index starts from zero.
func (f *Func) sigForget(idx uint32) {
	f.sigMu.Lock()
	delete(f.sigErrs, idx)
	f.sigMu.Unlock()
}

// sigReport reports whether an error on the mkey is to be reported under
// the expected_sigerr_count bit expect, and counts it if so.
func (f *Func) sigReport(idx uint32, expect uint8) bool {
	f.sigMu.Lock()
	defer f.sigMu.Unlock()
	s := f.sigErrs[idx]
	if s == nil {
		s = &sigState{}
		f.sigErrs[idx] = s
	}
	if uint8(s.count+1)&1 != expect&1 {
		return false
	}
	s.count++
	return true
}

// moveData moves a message of request r from src to dst segments, through
// the signature transforms of either side (both: through a bounce buffer
// holding the wire stream), in the responder qp. A PI error or failure of
// the requester's own transform (r.srcSig, r.dstSig: the fabric lets the
// responder run it) goes back in r for the requester to report; one of
// the responder's transform is reported here, and a transform that could
// not run is returned.
func (qp *QP) moveData(r *request, dst [][]byte, dsig *sigAccess, src [][]byte, ssig *sigAccess) error {
	var own error
	run := func(sa *sigAccess, dst, src [][]byte) {
		e, err := sa.run(dst, src)
		if sa == r.srcSig || sa == r.dstSig {
			if e != nil && r.peerSigErr == nil {
				r.peerSigErr = e
			}
			r.peerSigFail = r.peerSigFail || err != nil
			return
		}
		if e != nil {
			sa.report(e)
		}
		if err != nil && own == nil {
			own = err
		}
	}
	if h := qp.dev.fabric.hook.Load(); h != nil && r.from != nil {
		// Through a buffer holding the wire stream, which the hook sees.
		n := uint64(0)
		for _, s := range src {
			n += uint64(len(s))
		}
		if ssig != nil {
			n = ssig.wlen
		}
		wire := make([]byte, n)
		if ssig != nil {
			run(ssig, [][]byte{wire}, src)
		} else {
			copySegs([][]byte{wire}, src)
		}
		(*h)(&WireMsg{ReqLID: r.from.dev.lid, ReqQPN: r.from.qpn, RespLID: qp.dev.lid, RespQPN: qp.qpn, Wire: wire})
		if dsig != nil {
			run(dsig, dst, [][]byte{wire})
		} else {
			copySegs(dst, [][]byte{wire})
		}
		return own
	}
	switch {
	case ssig == nil && dsig == nil:
		copySegs(dst, src)
	case dsig == nil:
		run(ssig, dst, src)
	case ssig == nil:
		run(dsig, dst, src)
	default:
		// Memory to wire into a bounce buffer, then wire to memory.
		wire := make([]byte, ssig.wlen)
		run(ssig, [][]byte{wire}, src)
		run(dsig, dst, [][]byte{wire})
	}
	return own
}

// errSigStream is a signature transform that could not run: its
// configuration does not make a stream.
var errSigStream = errors.New("hca: signature transform failed")

// run streams src into dst through the access's transform. It returns the
// first PI error, and an error if the transform could not run. An access
// that ends inside a block (its data or its PI) is not an error: the
// partial block is moved unchecked, as the hardware does, and Close's
// report of it is not one either.
// sigErr is a PI mismatch with the rest of its block's tuple: the halves
// of the T10-DIF transient signature the SIG_ERR CQE carries in full.
type sigErr struct {
	t10dif.Error
	guard, foundGuard uint64
	app, foundApp     uint16
}

// firstErr returns st's first error with its tuple, or nil.
func firstErr(st *t10dif.Stream) *sigErr {
	e := st.FirstError()
	if e == nil {
		return nil
	}
	r := &sigErr{Error: *e}
	r.guard, r.foundGuard, r.app, r.foundApp = st.FirstErrorTuple()
	return r
}

func (sa *sigAccess) run(dst, src [][]byte) (*sigErr, error) {
	cfg := sa.sig.Config(sa.toWire, sa.first)
	// A strided memory domain whose blocks' data and metadata each lie
	// back to back (the kernel's DIX layout: a data buffer and a
	// metadata buffer) runs as one separate domain over the two runs:
	// whole runs of blocks per kernel call instead of two segments per
	// block.
	var metaIn, metaOut []byte
	if sa.toWire {
		if data, meta, ok := sa.dixRuns(src, &cfg.In); ok {
			cfg.In.Separate, src, metaIn = true, [][]byte{data}, meta
		}
	} else if data, meta, ok := sa.dixRuns(dst, &cfg.Out); ok {
		cfg.Out.Separate, dst, metaOut = true, [][]byte{data}, meta
	}
	st := &sa.stream
	if err := st.Init(&cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", errSigStream, err)
	}
	st.SetMeta(metaIn, metaOut)
	if err := pump(st, dst, src); err != nil {
		return firstErr(st), fmt.Errorf("%w: %w", errSigStream, err)
	}
	err := st.Close()
	e := firstErr(st)
	switch {
	case err == nil, isPIError(err):
	case errors.Is(err, t10dif.ErrPartialBlock), errors.Is(err, t10dif.ErrShortBuffer):
		// The access ended inside a block's data or its PI.
	default:
		return e, fmt.Errorf("%w: %w", errSigStream, err)
	}
	return e, nil
}

// isPIError reports whether err is a PI check's error (a *t10dif.Error);
// apart so that the target errors.As needs escapes only on an error.
func isPIError(err error) bool {
	var pe *t10dif.Error
	return errors.As(err, &pe)
}

// dixRuns reports whether segs, the memory side of an access through an
// interleaved domain d, are whole blocks given as (data, metadata) segment
// pairs whose data segments follow each other in one backing array and
// whose metadata segments do too, and returns the two runs. Adjacency is
// judged within a backing array (a segment's capacity reaching the next
// one), so the runs are ordinary slices of the memory the segments came
// from.
//
// Segments that resolveKey already took as the key's two pieces (sa.dix)
// are those runs as they are.
func (sa *sigAccess) dixRuns(segs [][]byte, d *t10dif.Domain) (data, meta []byte, ok bool) {
	if !d.HasPI() || d.Separate {
		return nil, nil, false
	}
	if sa.dix {
		return segs[0], segs[1], len(segs) == 2
	}
	if len(segs) < 4 || len(segs)%2 != 0 {
		return nil, nil, false
	}
	iv, m := d.Interval, d.Meta()
	data, meta = segs[0], segs[1]
	for i := 0; i < len(segs); i += 2 {
		ds, ms := segs[i], segs[i+1]
		if len(ds) != iv || len(ms) != m {
			return nil, nil, false
		}
		if i > 0 {
			var okD, okM bool
			if data, okD = extend(data, ds); !okD {
				return nil, nil, false
			}
			if meta, okM = extend(meta, ms); !okM {
				return nil, nil, false
			}
		}
	}
	return data, meta, true
}

// extend returns run grown by next when next starts where run ends in
// the same backing array.
func extend(run, next []byte) ([]byte, bool) {
	n := len(run)
	if cap(run)-n < len(next) || len(next) == 0 || &run[:n+1][n] != &next[0] {
		return run, false
	}
	return run[:n+len(next)], true
}

// pump feeds src through st into dst, segment by segment. It returns the
// stream's error; output that does not fit dst is dropped (Close reports
// the block left pending).
func pump(st *t10dif.Stream, dst, src [][]byte) error {
	var d []byte
	for i := 0; i < len(src); i++ {
		s := src[i]
		if i+1 < len(src) {
			// A strided memory domain: a block's data and its metadata
			// in two segments, taken in one step when they are.
			for len(d) == 0 && len(dst) > 0 {
				d, dst = dst[0], dst[1:]
			}
			if nd, ok := st.ProcessBlock(d, s, src[i+1]); ok {
				d = d[nd:]
				i++
				continue
			}
		}
		for len(s) > 0 {
			for len(d) == 0 && len(dst) > 0 {
				d, dst = dst[0], dst[1:]
			}
			nd, ns, err := st.Process(d, s)
			if err != nil {
				return err
			}
			if nd == 0 && ns == 0 {
				return nil
			}
			d, s = d[nd:], s[ns:]
		}
	}
	// The last tuple may still be pending for want of output space.
	for len(dst) > 0 || len(d) > 0 {
		for len(d) == 0 && len(dst) > 0 {
			d, dst = dst[0], dst[1:]
		}
		nd, _, err := st.Process(d, nil)
		if err != nil {
			return err
		}
		if nd == 0 {
			return nil
		}
		d = d[nd:]
	}
	return nil
}

// report writes the signature error CQE of an error, if the mkey's
// expected_sigerr_count admits it (sigState).
func (sa *sigAccess) report(e *sigErr) {
	if sa.own && sa.qp.drainSig {
		sa.qp.sigErr.Store(true) // its next fenced WQE drains the SQ
	}
	if !sa.fn.sigReport(sa.key.Index(), sa.expect) {
		return
	}
	s := cq.SigFields{Mkey: uint32(sa.key), ErrOffset: sa.sig.ErrOffset(sa.toWire, sa.first, e.Block)}
	if sa.toWire {
		s.Domain = 1 // the memory domain was the input
	}
	in := sa.sig.Wire
	if sa.toWire {
		in = sa.sig.Mem
	}
	switch {
	case e.Type == t10dif.ErrorGuard && in.Format == t10dif.FormatCRC32:
		// A 32-bit CRC fills the transient signature (rdma-core reads it
		// as the high word of trans_sig<<32 | ref_tag).
		s.Syndrome = cq.SigErrGuard
		s.ExpectedTransSig, s.ActualTransSig = uint32(e.Actual), uint32(e.Expected)
	case e.Type == t10dif.ErrorGuard && in.Format == t10dif.FormatCRC64:
		s.Syndrome = cq.SigErrGuard
		s.ExpectedTransSig, s.ActualTransSig = uint32(e.Actual>>32), uint32(e.Expected>>32)
		s.ExpectedRefTag, s.ActualRefTag = uint32(e.Actual), uint32(e.Expected)
	default:
		// T10-DIF: the whole transient signature (guard << 16 | app tag)
		// and the ref tags, whichever field failed (a guard error's app
		// half is the block's app tag, not 0). As the mlx5dv_mkey_check
		// man page words them: expected is what appears in the signature
		// field (the tuple's), actual what the device calculated from the
		// data or was configured with (t10dif's Actual and Expected, the
		// other way round; docs/CONFORMANCE.md).
		s.ExpectedTransSig = uint32(uint16(e.foundGuard))<<16 | uint32(e.foundApp)
		s.ActualTransSig = uint32(uint16(e.guard))<<16 | uint32(e.app)
		switch e.Type {
		case t10dif.ErrorGuard:
			s.Syndrome = cq.SigErrGuard
		case t10dif.ErrorAppTag:
			s.Syndrome = cq.SigErrAppTag
		case t10dif.ErrorRefTag:
			s.Syndrome = cq.SigErrRefTag
			s.ExpectedRefTag, s.ActualRefTag = uint32(e.Actual), uint32(e.Expected)
		}
	}
	if !sa.qp.scq.push(&cq.Fields{Opcode: cq.OpSigErr, QPN: sa.qp.qpn, Sig: s}, true) {
		sa.qp.fatal()
	}
}
