package verbs_test

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/remote/daemon"
	"log"
	"os"
	"path/filepath"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
)

// A fake device in a test: two contexts (two hosts, as far as the verbs
// API can tell) on one in-process device, an RC QP on each, connected to
// each other, and an RDMA WRITE from one host's memory into the other's.
func ExampleOpen() {
	dev := hca.New(hca.Options{})
	defer dev.Close()

	// node is one host: a context, a protection domain, a CQ, an RC QP and
	// a registered buffer.
	type node struct {
		ctx *verbs.Context
		pd  *verbs.PD
		cq  *verbs.CQ
		qp  *verbs.QP
		mr  *verbs.MR
	}
	open := func() *node {
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
		if n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq,
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
	a, b := open(), open()
	defer a.ctx.Close()
	defer b.ctx.Close()
	// Each side connects to what the other's Info says (as an
	// out-of-band exchange would carry it).
	if err := a.qp.Connect(b.qp.Info(), nil); err != nil {
		log.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), nil); err != nil {
		log.Fatal(err)
	}

	msg := "hello, hcasim"
	copy(a.mr.Buf, msg)
	if _, err := a.qp.PostSend([]verbs.SendWR{{
		WRID:       1,
		Opcode:     verbs.WRRDMAWrite,
		Flags:      verbs.SendSignaled,
		SG:         []verbs.SGE{a.mr.SGE(0, len(msg))},
		RemoteAddr: b.mr.Addr + 100,
		RKey:       b.mr.RKey,
	}}); err != nil {
		log.Fatal(err)
	}

	// Poll does not block: poll until the completion is there.
	wc := make([]verbs.WC, 1)
	for n := 0; n == 0; {
		var err error
		if n, err = a.cq.Poll(wc); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(wc[0].WRID, wc[0].Status, wc[0].Opcode == verbs.WCRDMAWrite)
	fmt.Printf("%q\n", b.mr.Buf[100:100+len(msg)])
	// Output:
	// 1 IBV_WC_SUCCESS true
	// "hello, hcasim"
}

// A daemon (what hcasim serve runs, here in process on a socket in a
// temporary directory) and a client of it: Dial gives the same API as
// Open, with memory shared with the daemon, so only Alloc'd memory can be
// registered. The two QPs are on one context, connected to each other.
func ExampleDial() {
	dir, err := os.MkdirTemp("", "hcasim")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The daemon's side: a device, a listener and a server.
	dev := hca.New(hca.Options{})
	defer dev.Close()
	path := filepath.Join(dir, "hcasim.sock")
	l, err := daemon.Listen(path)
	if err != nil {
		log.Fatal(err)
	}
	srv := &daemon.Server{Dev: dev}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Shutdown(0) // closes the listener, waits for the connections
		if err := <-served; err != nil {
			log.Fatal(err)
		}
	}()

	// The client's side.
	ctx, err := verbs.Dial(path)
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	cq, err := ctx.CreateCQ(16, nil)
	if err != nil {
		log.Fatal(err)
	}
	attr := &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qa, err := pd.CreateQP(attr)
	if err != nil {
		log.Fatal(err)
	}
	qb, err := pd.CreateQP(attr)
	if err != nil {
		log.Fatal(err)
	}
	if err := qa.Connect(qb.Info(), nil); err != nil {
		log.Fatal(err)
	}
	if err := qb.Connect(qa.Info(), nil); err != nil {
		log.Fatal(err)
	}
	buf, err := ctx.Alloc(4096) // shared memory: the daemon's device moves it
	if err != nil {
		log.Fatal(err)
	}
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		log.Fatal(err)
	}

	// An RDMA WRITE from qa's side of the buffer (its first half) to qb's.
	copy(buf, "over the socket")
	if _, err := qa.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{mr.SGE(0, 15)}, RemoteAddr: mr.Addr + 2048, RKey: mr.RKey}}); err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	for n := 0; n == 0; {
		if n, err = cq.Poll(wc); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(wc[0].WRID, wc[0].Status)
	fmt.Printf("%q\n", buf[2048:2048+15])
	// Output:
	// 7 IBV_WC_SUCCESS
	// "over the socket"
}
