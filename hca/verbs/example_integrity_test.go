package verbs_test

import (
	"fmt"
	"log"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

// An integrity MR as NVMe-oF uses one (IB_MR_TYPE_INTEGRITY and
// IB_WR_REG_MR_INTEGRITY): the host's memory holds plain data, the wire
// carries it with T10-DIF. A WRITE through the MR's LKey inserts the PI; a
// WRITE into it through its RKey checks and strips it.
//
// A PI error on that incoming WRITE is no error completion: the writer's
// WRITE succeeds, and the host's device writes a SIG_ERR CQE to the CQ of
// the host's QP that served it. CheckMRStatus reports the error only after
// that CQ has been polled (as on mlx5, where poll_cq consumes the CQE):
// check the status without polling first and it says "no error".
func ExampleMR_CheckMRStatus() {
	dev := hca.New(hca.Options{})
	defer dev.Close()

	// Two hosts: the host with the integrity MR (its QP created with
	// Integrity), and the target.
	type node struct {
		ctx *verbs.Context
		pd  *verbs.PD
		cq  *verbs.CQ
		qp  *verbs.QP
		mr  *verbs.MR
	}
	open := func(integrity bool) *node {
		ctx, err := verbs.Open(dev)
		if err != nil {
			log.Fatal(err)
		}
		n := &node{ctx: ctx}
		if n.pd, err = ctx.AllocPD(); err != nil {
			log.Fatal(err)
		}
		if n.cq, err = ctx.CreateCQ(16, nil); err != nil {
			log.Fatal(err)
		}
		if n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq, Integrity: integrity,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			log.Fatal(err)
		}
		buf, err := ctx.Alloc(4096)
		if err != nil {
			log.Fatal(err)
		}
		if n.mr, err = n.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
			log.Fatal(err)
		}
		return n
	}
	host, target := open(true), open(false)
	defer host.ctx.Close()
	defer target.ctx.Close()
	if err := host.qp.Connect(target.qp.Info(), nil); err != nil {
		log.Fatal(err)
	}
	if err := target.qp.Connect(host.qp.Info(), nil); err != nil {
		log.Fatal(err)
	}
	// wait polls n's CQ until it has a work completion and returns it.
	wait := func(n *node) verbs.WC {
		wc := make([]verbs.WC, 1)
		for k := 0; k == 0; {
			var err error
			if k, err = n.cq.Poll(wc); err != nil {
				log.Fatal(err)
			}
		}
		return wc[0]
	}

	// Two 512-byte blocks of data; on the wire each carries an 8-byte
	// tuple: the transfers through the integrity MR give the wire length.
	const interval, blocks = 512, 2
	const wireLen = blocks * (interval + 8)
	data := host.mr.Buf[:blocks*interval]
	for i := range data {
		data[i] = byte(i)
	}

	// Map the data, set the signature attributes (memory: no PI; wire:
	// Type 1 T10-DIF with a CRC guard, ref tag 0x100 incremented per
	// block; guard and ref tag checked) and register.
	imr, err := host.pd.AllocMRIntegrity(1, 1)
	if err != nil {
		log.Fatal(err)
	}
	if err := imr.MapSGPI([]verbs.SGE{host.mr.SGE(0, len(data))}, nil); err != nil {
		log.Fatal(err)
	}
	imr.SetSigAttrs(verbs.SigAttrs{
		CheckMask: 0xCF, // IB_SIG_CHECK_GUARD | IB_SIG_CHECK_REFTAG
		Wire: verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: interval,
			RefTag: 0x100, RefRemap: true},
	})
	if _, err := host.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled,
		MR: imr, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("register:", wait(host).Status)

	// The host WRITEs through the integrity MR (zero based: address 0):
	// the target receives the data with PI inserted.
	if _, err := host.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG:         []verbs.SGE{{Addr: 0, Length: wireLen, LKey: imr.LKey}},
		RemoteAddr: target.mr.Addr, RKey: target.mr.RKey}}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("write with PI insert:", wait(host).Status)
	wire := target.mr.Buf[:wireLen]
	fmt.Printf("block 1's tuple on the target: % x\n", wire[2*interval+8:])
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: interval, RefTag: 0x100}
	fmt.Println("t10dif.Verify:", t10dif.Verify(d, t10dif.CheckAll, t10dif.Buf{Data: wire}))

	// The target corrupts a data byte of block 1 and WRITEs the stream
	// back into the integrity MR: its WRITE succeeds.
	wire[interval+8+100] ^= 0x01
	if _, err := target.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{target.mr.SGE(0, wireLen)}, RemoteAddr: 0, RKey: imr.RKey}}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("target's write:", wait(target).Status)

	// The trap: the SIG_ERR CQE is still in the host's CQ.
	e, err := imr.CheckMRStatus()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status before polling:", e)
	// Polling the host's CQ takes the SIG_ERR CQE: it is no work
	// completion, the driver records it on the MR.
	n, err := host.cq.Poll(make([]verbs.WC, 4))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("work completions polled:", n)
	if e, err = imr.CheckMRStatus(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("status after polling: %v in block %d\n", e.Type, e.Offset/(interval+8))
	// Output:
	// register: IBV_WC_SUCCESS
	// write with PI insert: IBV_WC_SUCCESS
	// block 1's tuple on the target: 4f 10 00 00 00 00 01 01
	// t10dif.Verify: <nil>
	// target's write: IBV_WC_SUCCESS
	// status before polling: <nil>
	// work completions polled: 0
	// status after polling: IB_SIG_BAD_GUARD in block 1
}
