package hca

import (
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/psv"
)

// resolveKey resolves an access by qp through key. A signature key's
// addresses are in its wire domain: the range is mapped to the
// memory-domain range its translation holds, and the access carries the
// transform. A signature key cannot serve atomics.
//
// c, if not nil, is the calling engine's key cache (plain keys only).
//
// A signature access is written into into when it is not nil (storage
// that lives as long as the access: a request's, the responder's), and
// allocated otherwise.
func (qp *QP) resolveKey(c *klm.Cache, segs [][]byte, key klm.Key, addr, n uint64, need klm.Access, toWire bool, into *sigAccess) ([][]byte, *sigAccess, error) {
	t := qp.fn.mkeys
	m := t.Lookup(key.Index())
	if m == nil || !m.BSFEnabled || m.Free || m.Variant != key.Variant() || len(m.BSF) != psv.BSFSize {
		// Built field by field in place: a literal is built in a temporary
		// and copied, which stalls on the copy's wide loads.
		var r klm.Request
		r.Key, r.PD, r.Addr, r.Len, r.Access, r.QPN = key, qp.accessPD(), addr, n, need, qp.qpn
		var err error
		if c != nil {
			segs, err = t.ResolveCached(c, m, segs, &r)
		} else {
			segs, err = t.Resolve(segs, r)
		}
		return segs, nil, err
	}
	fault := func(kind klm.FaultKind) error {
		return &klm.Fault{Kind: kind, Key: key, Addr: addr, Len: n, Need: need}
	}
	if need&klm.Atomic != 0 || addr < m.StartAddr {
		return segs, nil, fault(klm.FaultAccess)
	}
	sig, err := qp.fn.sigOf(key.Index(), m)
	if err != nil {
		return segs, nil, fault(klm.FaultTranslation)
	}
	woff := addr - m.StartAddr
	moff, mlen, err := sig.MemRange(woff, n)
	if err != nil {
		return segs, nil, fault(klm.FaultRange)
	}
	if segs == nil {
		// A strided memory domain comes back as two segments per block.
		segs = make([][]byte, 0, 2*mlen/sig.MemBlock()+2)
	}
	// A strided memory domain whose data and PI each lie in one piece
	// (the kernel's DIX layout: a data buffer and a metadata buffer) comes
	// back as those two pieces, which the transform takes as a separate
	// domain: no segment per block to cut and join again.
	req := klm.Request{Key: key, PD: qp.accessPD(), Addr: m.StartAddr + moff, Len: mlen, Access: need, QPN: qp.qpn}
	mark := len(segs)
	var ent klm.Entries
	segs, err = t.ResolveEntries(segs, req, &ent)
	if err != nil {
		return segs, nil, err
	}
	dix := ent.N == 2 && sig.Mem.HasPI() && !sig.Mem.Separate &&
		ent.Len[0] == uint64(sig.Mem.Interval) && ent.Len[1] == uint64(sig.Mem.Meta())
	if ent.N != 0 && !dix {
		// Pieces that are not (data, PI) per block: the stream, segment by segment.
		if segs, err = t.Resolve(segs[:mark], req); err != nil {
			return segs, nil, err
		}
	}
	if into == nil {
		into = new(sigAccess)
	}
	// The stream's memory is kept: Init prepares it again.
	into.sig, into.first, into.wlen, into.toWire = sig, woff/sig.WireBlock(), n, toWire
	into.fn, into.key, into.expect, into.qp, into.own = qp.fn, key, m.ExpectedSigErr, qp, false
	into.dix = dix
	return segs, into, nil
}
