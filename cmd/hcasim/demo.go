package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/psv"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/t10dif"
	"github.com/hcasim/hcasim/umr"
)

var demoCmd = &command{
	name:    "demo",
	summary: "walk through an NVMe-oF-style write and read with PI on an in-process hcasim device",
	usage:   "",
	example: "hcasim demo",
	run:     runDemo,
}

// demo is the state of one walk-through.
type demo struct {
	w            io.Writer
	host, target *demoSide
	mr           *verbs.MR
	step         int
}

type demoSide struct {
	name string
	ctx  *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	buf  []byte
	mr   *verbs.MR
}

const (
	demoIV     = 512
	demoBlocks = 8
	demoRef    = 0x2000
)

func runDemo(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		fmt.Fprintf(stderr, "hcasim demo: unexpected arguments %q\n", args)
		fs.Usage()
		return errUsage
	}
	dev := hca.New(hca.Options{})
	defer dev.Close()
	d := &demo{w: stdout}
	var err error
	if d.host, err = demoNewSide(dev, "host"); err != nil {
		return err
	}
	if d.target, err = demoNewSide(dev, "target"); err != nil {
		return err
	}
	if err := d.host.qp.Connect(d.target.qp.Info(), nil); err != nil {
		return err
	}
	if err := d.target.qp.Connect(d.host.qp.Info(), nil); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "hcasim demo: an NVMe-oF-style write and read of %d blocks of %d bytes with T10-DIF\n", demoBlocks, demoIV)
	fmt.Fprintf(stdout, "host QP %#x and target QP %#x on one in-process device (LID %d)\n", d.host.qp.QPN(), d.target.qp.QPN(), dev.LID())
	if err := d.write(); err != nil {
		return err
	}
	if err := d.read(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nall steps behaved as a ConnectX HCA would: exit 0")
	return nil
}

func demoNewSide(dev *hca.Device, name string) (*demoSide, error) {
	ctx, err := verbs.Open(dev)
	if err != nil {
		return nil, err
	}
	s := &demoSide{name: name, ctx: ctx}
	if s.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if s.cq, err = ctx.CreateCQ(64, nil); err != nil {
		return nil, err
	}
	if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Integrity: true,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if s.buf, err = ctx.Alloc(1 << 16); err != nil {
		return nil, err
	}
	s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	return s, err
}

func (d *demo) say(format string, args ...any) {
	d.step++
	fmt.Fprintf(d.w, "\n%d. "+format+"\n", append([]any{d.step}, args...)...)
}

// wireDomain is the host's recipe: no PI in memory, T10-DIF on the wire
// (the HCA inserts on the way out, checks and strips on the way in).
func wireDomain() verbs.SigDomain {
	return verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: demoIV, RefTag: demoRef,
		RefRemap: true, AppEscape: true, ApptagCheckMask: 0xFFFF}
}

// register maps the host's data buffer into the integrity MR and posts
// REG_MR_INTEGRITY, printing the WQEs the driver wrote.
func (d *demo) register() error {
	h := d.host
	if err := d.mr.MapSGPI([]verbs.SGE{h.mr.SGE(0, demoIV*demoBlocks)}, nil); err != nil {
		return err
	}
	d.mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xCF, Wire: wireDomain()})
	d.mr.IncKey()
	from := h.qp.CurPost()
	if _, err := h.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, MR: d.mr, Flags: verbs.SendSignaled,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite}}); err != nil {
		return err
	}
	for _, w := range h.qp.PostedWQEs(from) {
		fmt.Fprintf(d.w, "   WQE %3d: %-8v DS %2d  fence %#02x  imm %#08x", w.Index, w.Ctrl.Opcode, w.Ctrl.DS, uint8(w.Ctrl.Fence), w.Ctrl.Imm)
		switch w.Ctrl.Opcode {
		case sq.OpUMR:
			c := umr.CtrlSeg(w.Bytes[sq.CtrlSegSize:]).Fields()
			m := umr.MkeySeg(w.Bytes[sq.CtrlSegSize+umr.CtrlSegSize:]).Fields()
			fmt.Fprintf(d.w, "  UMR flags %#02x mask %#010x  mkey len %d variant %#02x", c.Flags, uint64(c.Mask), m.Len, m.Variant)
			if c.Mask&umr.MaskBSFEnable != 0 {
				bsf := psv.BSF(w.Bytes[sq.CtrlSegSize+umr.CtrlSegSize+umr.MkeySegSize+64:][:psv.BSFSize]).Fields()
				fmt.Fprintf(d.w, "\n            BSF: check %#02x, wire block %d bytes, CRC guard, ref %#x incrementing, app escape",
					bsf.CheckMask, demoIV, bsf.Wire.RefTag)
			}
		case sq.OpSetPSV:
			p := psv.SetPSVSeg(w.Bytes[sq.CtrlSegSize:]).Fields()
			fmt.Fprintf(d.w, "  PSV %#x: seed %#04x app %#04x ref %#x", p.Index, p.Guard, p.AppTag, p.RefTag)
		}
		fmt.Fprintln(d.w)
	}
	if err := d.expectOK(h, 1); err != nil {
		return fmt.Errorf("registration: %w", err)
	}
	return nil
}

func (d *demo) expectOK(s *demoSide, n int) error {
	wcs := make([]verbs.WC, 8)
	deadline := time.Now().Add(5 * time.Second)
	for got := 0; got < n; {
		k, _ := s.cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("%s completion %v", s.name, wc.Status)
			}
		}
		got += k
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no completion", s.name)
		}
	}
	return nil
}

func (d *demo) write() error {
	h, t := d.host, d.target
	data := h.buf[:demoIV*demoBlocks]
	for i := range data {
		data[i] = byte(i*13 + i/demoIV)
	}
	var err error
	if d.mr, err = h.pd.AllocMRIntegrity(4, 4); err != nil {
		return err
	}
	d.say("host: an integrity MR (two PSVs, internal KLM and MTT PI MRs, signature key %v) over its %d data bytes;\n   memory carries no PI, the wire carries T10-DIF. REG_MR_INTEGRITY posts:", klm.Key(d.mr.RKey), len(data))
	if err := d.register(); err != nil {
		return err
	}
	wlen := demoBlocks * (demoIV + 8)
	d.say("target: RDMA READ of %d wire bytes at address 0 through the host's rkey %v (the host's write command)", wlen, klm.Key(d.mr.RKey))
	if _, err := t.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{t.mr.SGE(0, wlen)}, RKey: d.mr.RKey}}); err != nil {
		return err
	}
	if err := d.expectOK(t, 1); err != nil {
		return err
	}
	fmt.Fprintf(d.w, "   PI the HCA inserted on the wire (guard, app tag, ref tag of the first blocks):\n")
	for i := range 3 {
		off := i*(demoIV+8) + demoIV
		fmt.Fprintf(d.w, "     block %d: % x\n", i, t.buf[off:off+8])
	}
	want := make([]byte, wlen)
	dom := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: demoIV, RefTag: demoRef, Escape: t10dif.EscapeApp}
	if _, err := t10dif.Generate(dom, t10dif.Buf{Data: want}, data); err != nil {
		return err
	}
	if !bytes.Equal(t.buf[:wlen], want) {
		return errors.New("the wire stream differs from t10dif's insert")
	}
	fmt.Fprintf(d.w, "   the stream equals t10dif's INSERT of the host data, byte for byte\n")
	if e, err := d.mr.CheckMRStatus(); err != nil || e != nil {
		return fmt.Errorf("status after the write: %v %v", e, err)
	}
	fmt.Fprintf(d.w, "   host: CheckMRStatus -> no error\n")
	return nil
}

func (d *demo) read() error {
	h, t := d.host, d.target
	wlen := demoBlocks * (demoIV + 8)
	d.say("host: LOCAL_INV of %v, then a new registration for the read command", klm.Key(d.mr.RKey))
	if _, err := h.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRLocalInv, InvalidateRKey: d.mr.RKey, Flags: verbs.SendSignaled}}); err != nil {
		return err
	}
	if err := d.expectOK(h, 1); err != nil {
		return err
	}
	clear(h.buf[:demoIV*demoBlocks])
	if err := d.register(); err != nil {
		return err
	}
	const bad = 5
	t.buf[bad*(demoIV+8)+17] ^= 0x01
	d.say("target: RDMA WRITE of the protected stream into the host's rkey %v, with one bit of block %d flipped", klm.Key(d.mr.RKey), bad)
	if _, err := t.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{t.mr.SGE(0, wlen)}, RKey: d.mr.RKey}}); err != nil {
		return err
	}
	if err := d.expectOK(t, 1); err != nil {
		return err
	}
	fmt.Fprintf(d.w, "   the WRITE completed successfully, as on hardware: a PI error does not fail the transfer\n")
	wcs := make([]verbs.WC, 4)
	h.cq.Poll(wcs) // the host's CQ carries the signature error CQE
	e, err := d.mr.CheckMRStatus()
	if err != nil || e == nil {
		return fmt.Errorf("no signature error reported: %v", err)
	}
	fmt.Fprintf(d.w, "   host: CheckMRStatus -> %v at offset %d (block %d = offset / %d), expected %#04x (in the PI field), actual %#04x (calculated from the data), key %v\n",
		e.Type, e.Offset, e.Offset/(demoIV+8), demoIV+8, e.Expected, e.Actual, klm.Key(e.Key))
	if e.Type != verbs.SigBadGuard || e.Offset != bad*(demoIV+8) {
		return fmt.Errorf("wrong error %+v", e)
	}
	if e, _ := d.mr.CheckMRStatus(); e != nil {
		return errors.New("the error was reported twice")
	}
	fmt.Fprintf(d.w, "   a second CheckMRStatus -> no error: the status is reported once, then cleared\n")
	for i := range demoBlocks {
		got, exp := h.buf[i*demoIV:(i+1)*demoIV], t.buf[i*(demoIV+8):i*(demoIV+8)+demoIV]
		if !bytes.Equal(got, exp) {
			return fmt.Errorf("block %d was not stripped into host memory", i)
		}
	}
	fmt.Fprintf(d.w, "   host memory holds the %d data blocks with the PI stripped\n", demoBlocks)
	return nil
}
