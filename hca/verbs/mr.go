package verbs

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"sync"

	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/umr"
)

// Access are memory-region access flags (IBV_ACCESS_*). Local read is
// always granted.
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

func (a Access) mkey() klm.Access {
	k := klm.LocalRead
	if a&AccessLocalWrite != 0 {
		k |= klm.LocalWrite
	}
	if a&AccessRemoteWrite != 0 {
		k |= klm.RemoteWrite
	}
	if a&AccessRemoteRead != 0 {
		k |= klm.RemoteRead
	}
	if a&AccessRemoteAtomic != 0 {
		k |= klm.Atomic
	}
	return k
}

// MRType is the type of an MR allocated for fast registration.
type MRType uint8

// MR types.
const (
	MRTypeMemReg MRType = iota + 1 // IB_MR_TYPE_MEM_REG: fast registration with REG_MR
)

const pageShift = 12

// MR is a memory region. LKey and RKey are its keys; Addr is the address
// (IOVA) of its first byte.
type MR struct {
	pd   *PD
	LKey uint32
	RKey uint32
	Addr uint64
	Len  uint64
	// Buf is the registered buffer (RegMR only).
	Buf []byte

	mu      sync.Mutex
	typ     MRType
	maxSG   int
	access  Access
	descs   []byte // fast-registration MTT list (DMA)
	descIO  uint64
	ndescs  int
	mapped  bool // this driver mapped Buf (in process) and unmaps it
	mapIOVA uint64
	integ   *integ // integrity and signature MRs
}

// SGE is a scatter/gather entry: Length bytes at Addr through LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SGE returns the entry for n bytes at offset off of the MR.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.Addr + uint64(off), Length: uint32(n), LKey: mr.LKey}
}

// RegMR registers buf with the given access. buf must come from
// Context.Alloc, or, in process, may be any buffer (the driver maps it).
// Remote write or atomic without local write is refused (EINVAL, as
// ibv_reg_mr; the device refuses it too).
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	c := pd.ctx
	if len(buf) == 0 {
		return nil, fmt.Errorf("reg mr: empty buffer: %w", ErrInvalid)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("reg mr: remote write or atomic without local write: %w", ErrInvalid)
	}
	mr := &MR{pd: pd, Buf: buf, Len: uint64(len(buf)), access: access}
	iova, ok := c.iovaOf(buf)
	if !ok {
		bm, can := c.fn.(bufferMapper)
		if !can {
			return nil, fmt.Errorf("reg mr: %w", ErrNotDMA)
		}
		iova = c.mapIOVA(len(buf))
		if err := bm.MapBuffer(iova, buf); err != nil {
			return nil, fmt.Errorf("reg mr: map: %w", err)
		}
		mr.mapped, mr.mapIOVA = true, iova
	}
	mr.Addr = iova
	// An MTT of 4 KiB pages covering [iova, iova+len).
	base := iova &^ (1<<pageShift - 1)
	npages := int((iova + uint64(len(buf)) - base + 1<<pageShift - 1) >> pageShift)
	xlt := make([]byte, (npages+1)/2*klm.OctowordSize)
	for i := range npages {
		klm.MTT(xlt[i*klm.MTTSize:]).Encode(&klm.MTTFields{Addr: base + uint64(i)<<pageShift, Read: true, Write: true})
	}
	variant := c.nextVariant()
	key, err := pd.createMkey(umr.MkeyFields{
		Mode: klm.ModeMTT, Access: access.mkey(), QPN: 0xFFFFFF, Variant: variant, PD: pd.pdn,
		StartAddr: iova, Len: uint64(len(buf)), XLTOctowords: uint32(len(xlt) / klm.OctowordSize), LogPageSize: pageShift,
	}, xlt)
	if err != nil {
		mr.unmap()
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	mr.LKey, mr.RKey = uint32(key), uint32(key)
	c.mu.Lock()
	if mr.mapped {
		c.regs = append(c.regs, mr)
	}
	c.mrs[key.Index()] = mr
	c.mu.Unlock()
	return mr, nil
}

// mapIOVA reserves an IOVA range for a buffer the driver maps itself.
func (c *Context) mapIOVA(n int) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nextMap == 0 {
		c.nextMap = 0x7F00_0000_0000
	}
	iova := c.nextMap
	c.nextMap += (uint64(n) + 2<<pageShift - 1) &^ (1<<pageShift - 1)
	return iova
}

func (mr *MR) unmap() {
	if mr.mapped {
		c := mr.pd.ctx
		c.mu.Lock()
		for i, r := range c.regs {
			if r == mr {
				c.regs = append(c.regs[:i], c.regs[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		if bm, ok := mr.pd.ctx.fn.(bufferMapper); ok {
			bm.UnmapBuffer(mr.mapIOVA)
		}
		mr.mapped = false
	}
}

func (pd *PD) createMkey(f umr.MkeyFields, xlt []byte) (klm.Key, error) {
	in := ifc.NewIn(ifc.CmdCreateMkey, ifc.MkeyInXLT+len(xlt))
	umr.MkeySeg(in[ifc.MkeyInCtx:ifc.MkeyInXLT]).Encode(&f)
	copy(in[ifc.MkeyInXLT:], xlt)
	out, err := pd.ctx.cmd(in)
	if err != nil {
		return 0, err
	}
	return klm.MakeKey(out.U32(ifc.MkeyOutIdx), f.Variant), nil
}

// AllocMR allocates an MR for fast registration of up to maxSG pages: its
// key is free until a REG_MR work request registers it.
func (pd *PD) AllocMR(typ MRType, maxSG int) (*MR, error) {
	if typ == MRTypeSignature {
		if !pd.ctx.caps.SignatureHandover {
			return nil, fmt.Errorf("alloc signature mr: %w", ErrInvalid)
		}
		return pd.allocSig(MRTypeSignature)
	}
	if typ != MRTypeMemReg || maxSG <= 0 || uint32(maxSG) > pd.ctx.caps.Mkey.MaxFastRegPageListLen() {
		return nil, fmt.Errorf("alloc mr type %d with %d entries: %w", typ, maxSG, ErrInvalid)
	}
	c := pd.ctx
	ndescs := (maxSG + 7) &^ 7 // mlx5 aligns the descriptor count to 8
	descs, descIO, err := c.dma(ndescs*klm.MTTSize, 64)
	if err != nil {
		return nil, fmt.Errorf("alloc mr: %w", err)
	}
	variant := c.nextVariant()
	key, err := pd.createMkey(umr.MkeyFields{
		Free: true, UMREnabled: true, Mode: klm.ModeMTT, QPN: 0xFFFFFF, Variant: variant, PD: pd.pdn,
		XLTOctowords: uint32(ndescs / 2), LogPageSize: pageShift,
	}, nil)
	if err != nil {
		c.fn.FreeDMA(descIO)
		return nil, fmt.Errorf("alloc mr: %w", err)
	}
	mr := &MR{pd: pd, LKey: uint32(key), RKey: uint32(key), typ: typ, maxSG: maxSG, descs: descs, descIO: descIO}
	c.mu.Lock()
	c.mrs[key.Index()] = mr
	c.mu.Unlock()
	return mr, nil
}

// MapSG sets the MR's page list from a scatter list of IOVA ranges (as
// ib_map_mr_sg): the first entry may start and the last end inside a page,
// every other boundary must be page aligned. It returns the entries
// mapped. The MR's Addr and Len describe the mapped region.
func (mr *MR) MapSG(sg []SGE) (int, error) {
	if mr.typ != MRTypeMemReg {
		return 0, fmt.Errorf("map sg on an MR not for fast registration: %w", ErrInvalid)
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	const ps = 1 << pageShift
	n := 0
	var total uint64
	for i, e := range sg {
		if e.Length == 0 || (i > 0 && e.Addr%ps != 0) || (i < len(sg)-1 && (e.Addr+uint64(e.Length))%ps != 0) {
			break
		}
		start := e.Addr &^ (ps - 1)
		for a := start; a < e.Addr+uint64(e.Length); a += ps {
			if n == mr.maxSG {
				return i, fmt.Errorf("map sg: more than %d pages: %w", mr.maxSG, ErrInvalid)
			}
			klm.MTT(mr.descs[n*klm.MTTSize:]).Encode(&klm.MTTFields{Addr: a, Read: true, Write: true})
			n++
		}
		if i == 0 {
			mr.Addr = e.Addr
		}
		total += uint64(e.Length)
		mr.ndescs = n
		mr.Len = total
		if i == len(sg)-1 {
			return len(sg), nil
		}
	}
	return 0, fmt.Errorf("map sg: entries not page aligned: %w", ErrInvalid)
}

// checkSGE checks that an entry MapSGPI maps lies in a registration of pd
// its LKey names; field names the entry in errors.
func (c *Context) checkSGE(pd *PD, field string, s SGE) error {
	if s.Length == 0 {
		return fieldErr(field+".Length", "0")
	}
	c.mu.Lock()
	r := c.mrs[klm.Key(s.LKey).Index()]
	c.mu.Unlock()
	if r == nil {
		return fieldErr(field+".LKey", "%#x: no MR of this context (RegMR or AllocMR) has it", s.LKey)
	}
	r.mu.Lock()
	lkey, addr, n := r.LKey, r.Addr, r.Len
	r.mu.Unlock()
	switch {
	case lkey != s.LKey:
		return fieldErr(field+".LKey", "%#x: the MR's key is now %#x", s.LKey, lkey)
	case r.pd != pd:
		return fieldErr(field+".LKey", "%#x: an MR of PD %d, not the integrity MR's PD %d", s.LKey, r.pd.pdn, pd.pdn)
	case s.Addr < addr || s.Addr+uint64(s.Length) > addr+n || s.Addr+uint64(s.Length) < s.Addr:
		return fieldErr(field+".Addr", "%#x+%d: outside the MR of LKey %#x (%#x+%d)", s.Addr, s.Length, s.LKey, addr, n)
	}
	return nil
}

// IncKey bumps the key variant (ib_inc_rkey + ib_update_fast_reg_key): the
// next REG_MR registers under the new key.
func (mr *MR) IncKey() {
	k := klm.Key(mr.RKey)
	nk := klm.MakeKey(k.Index(), k.Variant()+1)
	mr.LKey, mr.RKey = uint32(nk), uint32(nk)
}

// Dereg destroys the MR's key (and an integrity MR's PSVs and internal MRs).
func (mr *MR) Dereg() error {
	c := mr.pd.ctx
	if g := mr.integ; g != nil {
		for _, in := range []*MR{g.klmMR, g.mttMR} {
			if in != nil {
				in.Dereg()
			}
		}
		mr.destroyPSVs()
		c.mu.Lock()
		delete(c.sigMRs, klm.Key(mr.LKey).Index())
		c.mu.Unlock()
	}
	idx := klm.Key(mr.LKey).Index()
	c.mu.Lock()
	if c.mrs[idx] == mr {
		delete(c.mrs, idx)
	}
	c.mu.Unlock()
	_, err := c.cmd(ifc.NewIn(ifc.CmdDestroyMkey, ifc.MkeyIdxOff+4).Put32(ifc.MkeyIdxOff, idx))
	mr.unmap()
	if mr.descs != nil {
		c.fn.FreeDMA(mr.descIO)
	}
	if err != nil {
		return fmt.Errorf("dereg mr: %w", err)
	}
	return nil
}
