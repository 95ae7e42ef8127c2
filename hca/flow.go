package hca

// Flow steering for raw packet QPs: CREATE_FLOW attaches a rule (verbs'
// ibv_flow_attr and its specs, in the layout ifc.FlowIn* gives) to a raw
// QP, and every frame a raw QP of the device's fabric sends is matched
// against the device's rules. Rules are tried by priority (lower first,
// then in creation order); the normal rules of the first priority that
// matches all get a copy, and unless each of them is DONT_TRAP the frame
// stops there. A frame no normal rule took goes to the multicast-default
// rules (a multicast destination) or the all-default rules (any other),
// and sniffers get every frame. A QP gets at most one copy of a frame.

import (
	"encoding/binary"
	"slices"
	"sync"

	"github.com/hcasim/hcasim/hca/ifc"
)

// maxFlowSpecs bounds a rule's specs (verbs' num_of_specs is a byte).
const maxFlowSpecs = 16

// flowSpec is one spec of a rule: the filter image of its type (frameView)
// and the value and mask it is compared with.
type flowSpec struct {
	kind      uint16
	val, mask []byte
}

// flowRule is a rule attached to a raw QP.
type flowRule struct {
	id       uint32
	fn       *Func
	qp       *QP
	kind     uint8
	prio     uint16
	dontTrap bool
	drop     bool
	specs    []flowSpec
}

// flowTable is a device's rules, sorted by priority and id.
type flowTable struct {
	mu    sync.RWMutex
	rules []*flowRule
	next  uint32
}

// filterLen is the size of the filter image of each spec type the device
// matches; a spec of another type is refused.
var filterLen = map[uint16]int{
	ifc.FlowSpecEth: 16, ifc.FlowSpecIPv4: 8, ifc.FlowSpecIPv4Ext: 12, ifc.FlowSpecIPv6: 40,
	ifc.FlowSpecTCP: 4, ifc.FlowSpecUDP: 4, ifc.FlowSpecDrop: 0,
}

// parseFlowSpecs decodes n specs from b (each an ifc.FlowSpecHdr header and
// the value and mask halves), which must hold exactly them. It reports
// whether the rule drops what it takes.
func parseFlowSpecs(b []byte, n int) (specs []flowSpec, drop bool, ok bool) {
	for range n {
		if len(b) < ifc.FlowSpecHdr {
			return nil, false, false
		}
		kind, size := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		fl, known := filterLen[kind]
		if !known || size != ifc.FlowSpecHdr+2*fl || size > len(b) {
			return nil, false, false
		}
		if kind == ifc.FlowSpecDrop {
			if drop {
				return nil, false, false // one drop action
			}
			drop = true
		} else {
			v := b[ifc.FlowSpecHdr : ifc.FlowSpecHdr+fl]
			specs = append(specs, flowSpec{kind: kind, val: v, mask: b[ifc.FlowSpecHdr+fl : size]})
		}
		b = b[size:]
	}
	return specs, drop, len(b) == 0
}

// frameView is a frame's headers as the filter images of verbs' specs:
// each in the layout of its ibv_flow_*_filter, network order fields.
type frameView struct {
	eth   [16]byte // destination MAC, source MAC, EtherType, VLAN tag
	l3    uint8    // 4, 6, or 0: neither
	ip4   [12]byte // source, destination, protocol, TOS, TTL, flags
	ip6   [40]byte // source, destination, flow label (BE32), next header, traffic class, hop limit
	proto uint8    // the L4 protocol, with l4 set
	l4    [4]byte  // destination port, source port
	hasL4 bool
}

// multicast reports whether the frame's destination is a group address.
func (v *frameView) multicast() bool { return v.eth[0]&1 != 0 }

// parseFrame reads the headers of frame f (at least ethHeaderSize bytes).
func parseFrame(f []byte) frameView {
	var v frameView
	copy(v.eth[:12], f)
	et, off := binary.BigEndian.Uint16(f[12:]), ethHeaderSize
	if et == 0x8100 && len(f) >= off+4 {
		copy(v.eth[14:16], f[14:16])
		et, off = binary.BigEndian.Uint16(f[16:]), off+4
	}
	binary.BigEndian.PutUint16(v.eth[12:], et)
	l4 := 0
	switch {
	case et == 0x0800 && len(f) >= off+20 && f[off]>>4 == 4 && f[off]&15 >= 5:
		h := f[off:]
		v.l3, v.proto = 4, h[9]
		copy(v.ip4[:8], h[12:20])
		v.ip4[8], v.ip4[9], v.ip4[10] = h[9], h[1], h[8]
		if h[6]&0x40 != 0 {
			v.ip4[11] |= 2 // don't fragment (IB_IPV4_DONT_FRAG)
		}
		if h[6]&0x20 != 0 {
			v.ip4[11] |= 4 // more fragments (IB_IPV4_MORE_FRAG)
		}
		l4 = off + int(h[0]&15)*4
	case et == 0x86DD && len(f) >= off+40:
		h := f[off:]
		v.l3, v.proto = 6, h[6]
		copy(v.ip6[:32], h[8:40])
		w := binary.BigEndian.Uint32(h)
		binary.BigEndian.PutUint32(v.ip6[32:], w&0xFFFFF)
		v.ip6[36], v.ip6[37], v.ip6[38] = h[6], byte(w>>20), h[7]
		l4 = off + 40
	}
	if l4 != 0 && (v.proto == 6 || v.proto == 17) && len(f) >= l4+4 {
		v.hasL4 = true
		copy(v.l4[0:2], f[l4+2:l4+4])
		copy(v.l4[2:4], f[l4:l4+2])
	}
	return v
}

// image returns the frame's filter image for a spec of kind k, or false
// when the frame has no such header.
func (v *frameView) image(k uint16) ([]byte, bool) {
	switch k {
	case ifc.FlowSpecEth:
		return v.eth[:], true
	case ifc.FlowSpecIPv4:
		return v.ip4[:8], v.l3 == 4
	case ifc.FlowSpecIPv4Ext:
		return v.ip4[:], v.l3 == 4
	case ifc.FlowSpecIPv6:
		return v.ip6[:], v.l3 == 6
	case ifc.FlowSpecTCP:
		return v.l4[:], v.hasL4 && v.proto == 6
	case ifc.FlowSpecUDP:
		return v.l4[:], v.hasL4 && v.proto == 17
	}
	return nil, false
}

// matches reports whether every spec of the rule matches the frame.
func (r *flowRule) matches(v *frameView) bool {
	for _, s := range r.specs {
		img, ok := v.image(s.kind)
		if !ok {
			return false
		}
		for i, m := range s.mask {
			if img[i]&m != s.val[i]&m {
				return false
			}
		}
	}
	return true
}

// deliver puts frame r, sent by from, into the inbox of every raw QP of d
// whose rule takes it; it reports whether a rule took the frame.
func (t *flowTable) deliver(from *QP, d *Device, v *frameView, r *request) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var sent []*QP
	put := func(fr *flowRule) {
		to := fr.qp
		if to.rss != nil {
			to = to.rss.pick(v)
		}
		if fr.drop || slices.Contains(sent, to) || fr.qp.blockLB && fr.qp.fn == from.fn && v.multicast() {
			return
		}
		sent = append(sent, to)
		r.hold()
		if to.inbox.put(r) == 0 {
			r.release()
			d.count(&d.ctr.msgDropped)
		}
	}
	taken, took := false, false
	for i := 0; i < len(t.rules) && !taken; {
		prio := t.rules[i].prio
		for ; i < len(t.rules) && t.rules[i].prio == prio; i++ {
			fr := t.rules[i]
			if fr.kind != ifc.FlowNormal || !fr.matches(v) {
				continue
			}
			put(fr)
			took = true
			taken = taken || !fr.dontTrap
		}
	}
	for _, fr := range t.rules {
		def := fr.kind == ifc.FlowMCDefault && v.multicast() || fr.kind == ifc.FlowAllDef && !v.multicast()
		if def && !taken || fr.kind == ifc.FlowSniffer {
			put(fr)
			took = true
		}
	}
	return took
}

// createFlow attaches a rule to a raw packet QP of the function.
func (f *Func) createFlow(in ifc.In) ifc.Out {
	qpn := in.U32(ifc.FlowInQPN) & 0xFFFFFF
	kind, n := in.U8(ifc.FlowInKind), int(in.U8(ifc.FlowInNumSpecs))
	flags := in.U32(ifc.FlowInFlags)
	qp := f.lookupQP(qpn)
	if qp == nil || !qp.raw {
		return failOut(ifc.StatusBadResource, qpn, "no raw packet QP %#x", qpn)
	}
	if kind > ifc.FlowSniffer || flags&^ifc.FlowDontTrap != 0 || n > maxFlowSpecs {
		return failOut(ifc.StatusBadParam, uint32(kind), "flow kind %d flags %#x with %d specs", kind, flags, n)
	}
	specs, drop, ok := parseFlowSpecs(in[ifc.FlowInSpecs:], n)
	if !ok || kind != ifc.FlowNormal && (len(specs) != 0 || drop) {
		return failOut(ifc.StatusBadParam, uint32(n), "flow specs")
	}
	// The rule keeps its own copy of the specs (in is the caller's).
	for i := range specs {
		specs[i].val, specs[i].mask = slices.Clone(specs[i].val), slices.Clone(specs[i].mask)
	}
	fr := &flowRule{fn: f, qp: qp, kind: kind, prio: in.U16(ifc.FlowInPriority), dontTrap: flags&ifc.FlowDontTrap != 0,
		drop: drop, specs: specs}
	t := &f.dev.flows
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.closed {
		return failOut(ifc.StatusBadResource, qpn, "no raw packet QP %#x", qpn)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.rules) >= int(f.dev.caps.MaxQP) {
		return failOut(ifc.StatusExceedLim, uint32(len(t.rules)), "%d flows", len(t.rules))
	}
	t.next++
	fr.id = t.next
	i, _ := slices.BinarySearchFunc(t.rules, fr, func(a, b *flowRule) int {
		if a.prio != b.prio {
			return int(a.prio) - int(b.prio)
		}
		return int(a.id) - int(b.id)
	})
	t.rules = slices.Insert(t.rules, i, fr)
	qp.flows.Add(1)
	o := ifc.In(okOut(ifc.FlowOff + 4))
	o.Put32(ifc.FlowOff, fr.id)
	return ifc.Out(o)
}

// destroyFlow detaches one of the function's rules.
func (f *Func) destroyFlow(id uint32) ifc.Out {
	t := &f.dev.flows
	t.mu.Lock()
	defer t.mu.Unlock()
	i := slices.IndexFunc(t.rules, func(r *flowRule) bool { return r.id == id && r.fn == f })
	if i < 0 {
		return failOut(ifc.StatusBadResource, id, "no flow %#x", id)
	}
	t.rules[i].qp.flows.Add(-1)
	t.rules = slices.Delete(t.rules, i, i+1)
	return okOut(0)
}

// dropFlows detaches every rule of qp (the QP is being destroyed).
func (t *flowTable) dropFlows(qp *QP) {
	t.mu.Lock()
	t.rules = slices.DeleteFunc(t.rules, func(r *flowRule) bool { return r.qp == qp })
	t.mu.Unlock()
}
