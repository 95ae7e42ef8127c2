package verbs

import (
	"encoding/binary"
	"fmt"

	"github.com/hcasim/hcasim/hca/ifc"
)

// FlowKind is a flow rule's kind (enum ibv_flow_attr_type).
type FlowKind uint8

// Flow rule kinds.
const (
	// FlowNormal matches its specs.
	FlowNormal FlowKind = ifc.FlowNormal
	// FlowAllDefault takes the frames no normal rule took.
	FlowAllDefault FlowKind = ifc.FlowAllDef
	// FlowMCDefault takes the multicast frames no normal rule took.
	FlowMCDefault FlowKind = ifc.FlowMCDefault
	// FlowSniffer gets a copy of every frame.
	FlowSniffer FlowKind = ifc.FlowSniffer
)

// FlowSpecType is a spec's type (enum ibv_flow_spec_type).
type FlowSpecType uint16

// Flow spec types the device matches; Val and Mask of each are the bytes
// of its verbs filter, network order fields: FlowSpecEth 16 (destination
// and source MAC, EtherType, VLAN tag), FlowSpecIPv4 8 (source,
// destination), FlowSpecIPv4Ext 12 (and protocol, TOS, TTL, flags),
// FlowSpecIPv6 40 (source, destination, flow label, next header, traffic
// class, hop limit, one pad byte), FlowSpecTCP and FlowSpecUDP 4
// (destination port, source port).
const (
	FlowSpecEth     FlowSpecType = ifc.FlowSpecEth
	FlowSpecIPv4    FlowSpecType = ifc.FlowSpecIPv4
	FlowSpecIPv6    FlowSpecType = ifc.FlowSpecIPv6
	FlowSpecIPv4Ext FlowSpecType = ifc.FlowSpecIPv4Ext
	FlowSpecTCP     FlowSpecType = ifc.FlowSpecTCP
	FlowSpecUDP     FlowSpecType = ifc.FlowSpecUDP
)

// FlowSpec is one match of a rule: the header fields under Mask must equal
// Val's (Val and Mask of the same length, the filter's).
type FlowSpec struct {
	Type      FlowSpecType
	Val, Mask []byte
}

// EthSpec returns a spec that matches the destination MAC and the
// EtherType exactly.
func EthSpec(dst [6]byte, etherType uint16) FlowSpec {
	v, m := make([]byte, 16), make([]byte, 16)
	copy(v, dst[:])
	binary.BigEndian.PutUint16(v[12:], etherType)
	for i := range 6 {
		m[i] = 0xFF
	}
	m[12], m[13] = 0xFF, 0xFF
	return FlowSpec{Type: FlowSpecEth, Val: v, Mask: m}
}

// FlowAttr is a flow rule (ibv_flow_attr).
type FlowAttr struct {
	Kind FlowKind
	// Priority orders the rules: lower first.
	Priority uint16
	// DontTrap lets a frame the rule takes go on to the rules after it.
	DontTrap bool
	// Drop drops what the rule takes (IBV_FLOW_SPEC_ACTION_DROP).
	Drop  bool
	Specs []FlowSpec
}

// Flow is a steering rule attached to a raw packet QP.
type Flow struct {
	qp *QP
	id uint32
}

// CreateFlow attaches a rule to the raw packet QP: the frames it takes
// are received on the QP. While it has flows the QP cannot be destroyed
// (ErrBusy, as the kernel's EBUSY).
func (qp *QP) CreateFlow(a *FlowAttr) (*Flow, error) {
	size := ifc.FlowInSpecs
	for _, s := range a.Specs {
		if len(s.Val) != len(s.Mask) {
			return nil, fmt.Errorf("create flow: spec %#x: %d value and %d mask bytes: %w", s.Type, len(s.Val), len(s.Mask), ErrInvalid)
		}
		size += ifc.FlowSpecHdr + 2*len(s.Val)
	}
	n := len(a.Specs)
	if a.Drop {
		size += ifc.FlowSpecHdr
		n++
	}
	if qp.typ != QPTypeRaw || n > 255 {
		return nil, fmt.Errorf("create flow on a %v QP with %d specs: %w", qp.typ, n, ErrInvalid)
	}
	in := ifc.NewIn(ifc.CmdCreateFlow, size).Put32(ifc.FlowInQPN, qp.qpn).Put8(ifc.FlowInKind, uint8(a.Kind))
	in.Put8(ifc.FlowInNumSpecs, uint8(n)).Put16(ifc.FlowInPriority, a.Priority)
	if a.DontTrap {
		in.Put32(ifc.FlowInFlags, ifc.FlowDontTrap)
	}
	off := ifc.FlowInSpecs
	for _, s := range a.Specs {
		in.Put16(off, uint16(s.Type)).Put16(off+2, uint16(ifc.FlowSpecHdr+2*len(s.Val)))
		copy(in[off+ifc.FlowSpecHdr:], s.Val)
		copy(in[off+ifc.FlowSpecHdr+len(s.Val):], s.Mask)
		off += ifc.FlowSpecHdr + 2*len(s.Val)
	}
	if a.Drop {
		in.Put16(off, ifc.FlowSpecDrop).Put16(off+2, ifc.FlowSpecHdr)
	}
	out, err := qp.ctx.cmd(in)
	if err != nil {
		return nil, fmt.Errorf("create flow: %w", err)
	}
	return &Flow{qp: qp, id: out.U32(ifc.FlowOff)}, nil
}

// Destroy detaches the rule.
func (f *Flow) Destroy() error {
	if _, err := f.qp.ctx.cmd(ifc.NewIn(ifc.CmdDestroyFlow, ifc.FlowOff+4).Put32(ifc.FlowOff, f.id)); err != nil {
		return fmt.Errorf("destroy flow: %w", err)
	}
	return nil
}
