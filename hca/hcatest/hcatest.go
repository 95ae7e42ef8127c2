// Package hcatest is a scenario suite for an RDMA device driven through
// the verbs API, in the manner of testing/fstest: [Run] takes a way to open
// verbs contexts on the device under test and runs every scenario as a
// subtest. The same scenarios run against an in-process [hca.Device], a
// device served over a Unix socket (verbs.Dial), and two daemons joined by
// the RoCEv2 wire.
//
// Scenarios use only the public verbs API: memory comes from
// Context.Alloc (so that it can be registered over a socket), is
// registered with RegMR or fast registration, and moves through RC queue
// pairs. Every completion is checked for its work request id, status,
// opcode, byte count and immediate data, and every transfer for its data.
//
// Subtests are named group/scenario (SendRecv/PingPong, Flush/…,
// QPState/SQD, Integrity/…, IntegrityErrors/…); the groups run in
// parallel, the scenarios of a group one after the other. The Integrity
// groups drive the integrity API as NVMe-oF and iSER do (REG_MR_INTEGRITY,
// the old REG_SIG_MR, CheckMRStatus) and check every PI byte against
// package t10dif and the public vectors; the scenarios that corrupt data
// on the wire need Options.WireHook and are skipped without it. Every scenario opens its own contexts, so asynchronous
// events never mix between scenarios.
//
// The scenarios that exercise transport timers (RNR, retry exhaustion)
// choose short timer codes themselves; an in-process device should also
// divide its timers (hca.Options.TimeScale) so that the suite runs fast.
//
// A few behaviours are asserted the way the InfiniBand specification or
// mlx5 hardware has them where the model could plausibly differ: a
// zero-length RDMA READ or WRITE does not validate its R_Key (IBA C9-88);
// an RTS→RTS or SQD→RTS modify that does not name the access rights keeps
// them; SQ_DRAINED follows the completion of the last outstanding WR; a CQ
// overflow raises one CQ error and one QP fatal event. Error completions
// are checked for work request id, status and QP only: their opcode and
// byte count are undefined in verbs.
package hcatest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"github.com/hcasim/hcasim/hca/ifc"
	"slices"
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
)

// Opener returns a fresh verbs context on the device under test, closed
// when t ends (t.Cleanup). Contexts opened by one Opener share a fabric, so
// their QPs can connect to one another.
type Opener func(t testing.TB) *verbs.Context

// Run runs every scenario as a subtest of t, with every context opened by
// open.
func Run(t *testing.T, open Opener) {
	RunPeers(t, open, open)
}

// RunPeers runs every scenario as a subtest of t; in every scenario with
// two sides, the local side's context comes from local and the remote
// side's from remote. Two openers over two devices of one fabric run the
// whole suite across devices. local and remote may be the same Opener.
func RunPeers(t *testing.T, local, remote Opener) {
	RunOptions(t, Options{Local: local, Remote: remote})
}

// Options configure RunOptions.
type Options struct {
	// Local and Remote open the two sides' contexts (Remote nil: Local).
	Local, Remote Opener
	// WireHook, if not nil, installs a function that sees and may change
	// the wire bytes of every message of the device(s) under test (nil
	// removes it): the scenarios that corrupt data on the wire need it and
	// are skipped without it. Scenarios filter on their own QPs.
	WireHook func(hook func(m *hca.WireMsg))
	// Lossy says the wire between the sides loses, duplicates or reorders
	// packets: the scenarios whose outcome rests on one particular packet
	// arriving are skipped (lossSensitive); every other one must pass as
	// on a lossless wire.
	Lossy bool
	// Groups, if not empty, names the groups to run (SendRecv, RDMA, …).
	Groups []string
	// RCSourceHardware says the device serves an RC request from any QP
	// whose PSN fits, as hardware does (hca.Options.RCSourceHardware): the
	// Isolation scenarios then check that it does, instead of that it
	// refuses.
	RCSourceHardware bool
}

// lossSensitive are the groups and scenarios whose outcome a lossy wire
// changes, as it would on hardware: a remote error or RNR NAK that is
// lost ends in RETRY_EXC_ERR instead (the responder went to error and
// answers no retransmission); retry and RNR counts and timings are the
// scenario; a QP without an ACK timeout never recovers a lost packet;
// a retransmission passes a wire hook again.
var lossSensitive = map[string]bool{
	"AccessErrors": true, "RNR": true, "TransportRetry": true,
	"SendRecv/WithInvalidate": true, "SendRecv/WithInvalidateNotAllowed": true,
	"Flush/RemoteErrorMidBatch": true, "Flush/ReceivesOfQPInError": true, "QPState/ResetAndReuse": true, "QPState/SQDWithOutstandingWork": true,
	"IntegrityErrors": true, "FastReg/Lifecycle": true, "CQ/ArmSolicitedOnly": true,
	"UC": true, // a lost UC packet loses its message: that is the transport
	"MW": true, // each window scenario checks remote access errors
	"UD": true, // a lost datagram is lost: that is the transport
	// XRC's error scenarios end the target in ERR with the NAK: a lost
	// NAK is RETRY_EXC_ERR, as for RC's AccessErrors.
	"XRC/SRQOfAnotherPD": true, "XRC/SRQOfAnotherDomain": true,
}

// RunOptions runs every scenario as a subtest of t with the options.
func RunOptions(t *testing.T, o Options) {
	if o.Remote == nil {
		o.Remote = o.Local
	}
	s := &suite{local: o.Local, remote: o.Remote, wireHook: o.WireHook, hardware: o.RCSourceHardware}
	for _, g := range groups {
		if len(o.Groups) > 0 && !slices.Contains(o.Groups, g.name) {
			continue
		}
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, sc := range g.scenarios {
				t.Run(sc.name, func(t *testing.T) {
					if o.Lossy && (lossSensitive[g.name] || lossSensitive[g.name+"/"+sc.name]) {
						t.Skip("needs a lossless wire")
					}
					sc.run(t, s)
				})
			}
		})
	}
}

type scenario struct {
	name string
	run  func(t *testing.T, s *suite)
}

type group struct {
	name      string
	scenarios []scenario
}

// groups are the scenario groups, run in parallel with one another; the
// scenarios of a group run one after the other.
var groups = []group{
	{"SendRecv", sendRecvScenarios},
	{"RDMA", rdmaScenarios},
	{"FastReg", fastRegScenarios},
	{"AccessErrors", accessScenarios},
	{"Flush", flushScenarios},
	{"RNR", rnrScenarios},
	{"TransportRetry", retryScenarios},
	{"CQ", cqScenarios},
	{"Ordering", orderingScenarios},
	{"Unsignaled", unsignaledScenarios},
	{"Fabric", fabricScenarios},
	{"QPState", qpStateScenarios},
	{"Integrity", integrityRecipeScenarios},
	{"IntegrityErrors", integrityErrorScenarios},
	{"Isolation", isolationScenarios},
	{"SRQ", srqScenarios},
	{"UC", ucScenarios},
	{"MW", mwScenarios},
	{"UD", udScenarios},
	{"XRC", xrcScenarios},
	{"Raw", rawScenarios},
}

type suite struct {
	local, remote Opener
	wireHook      func(hook func(m *hca.WireMsg))
	hardware      bool // Options.RCSourceHardware
}

// Timeouts. waitFor bounds how long a completion or event that must come
// may take; quiet is how long the suite watches for something that must
// not happen.
const (
	waitFor = 5 * time.Second
	quiet   = 30 * time.Millisecond
)

// allAccess is every MR access flag.
const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// bufSize is the size of each node's main buffer.
const bufSize = 1 << 16

// node is one side's context, PD and main registered buffer.
type node struct {
	t   testing.TB
	ctx *verbs.Context
	pd  *verbs.PD
	buf []byte
	mr  *verbs.MR
}

// pair opens the two sides of a scenario.
func (s *suite) pair(t testing.TB) (a, b *node) {
	t.Helper()
	return newNode(t, s.local), newNode(t, s.remote)
}

func newNode(t testing.TB, open Opener) *node {
	t.Helper()
	ctx := open(t)
	n := &node{t: t, ctx: ctx}
	var err error
	if n.pd, err = ctx.AllocPD(); err != nil {
		t.Fatalf("alloc pd: %v", err)
	}
	n.buf = n.alloc(bufSize)
	n.mr = n.reg(n.pd, n.buf, allAccess)
	return n
}

// in returns the node with t for failures: subtests use it so that they
// never fail their parent.
func (n *node) in(t testing.TB) *node {
	c := *n
	c.t = t
	return &c
}

// alloc returns DMA memory of the node's context.
func (n *node) alloc(size int) []byte {
	n.t.Helper()
	b, err := n.ctx.Alloc(size)
	if err != nil {
		n.t.Fatalf("alloc %d bytes: %v", size, err)
	}
	if len(b) != size {
		n.t.Fatalf("alloc %d bytes returned %d", size, len(b))
	}
	return b
}

// reg registers buf in pd.
func (n *node) reg(pd *verbs.PD, buf []byte, acc verbs.Access) *verbs.MR {
	n.t.Helper()
	mr, err := pd.RegMR(buf, acc)
	if err != nil {
		n.t.Fatalf("reg mr (access %#x): %v", acc, err)
	}
	return mr
}

// newPD allocates another protection domain.
func (n *node) newPD() *verbs.PD {
	n.t.Helper()
	pd, err := n.ctx.AllocPD()
	if err != nil {
		n.t.Fatalf("alloc pd: %v", err)
	}
	return pd
}

// cq creates a CQ.
func (n *node) cq(depth int, ch *verbs.CompChannel) *verbs.CQ {
	n.t.Helper()
	c, err := n.ctx.CreateCQ(depth, ch)
	if err != nil {
		n.t.Fatalf("create cq of depth %d: %v", depth, err)
	}
	return c
}

// ep is a QP with its own send and receive CQs.
type ep struct {
	n        *node
	qp       *verbs.QP
	scq, rcq *verbs.CQ
}

// in returns the endpoint with t for failures.
func (e *ep) in(t testing.TB) *ep {
	c := *e
	c.n = e.n.in(t)
	return &c
}

// epOpts shape an endpoint; the zero value gives the defaults.
type epOpts struct {
	cap       verbs.QPCap
	cqDepth   int
	pd        *verbs.PD
	scq, rcq  *verbs.CQ
	sigAll    bool
	integrity bool
	srq       *verbs.SRQ
	typ       verbs.QPType
	blockLB   bool // verbs.QPInitAttr.BlockSelfMcastLB
}

var defaultCap = verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 256}

// ep creates a QP (in RESET) and its CQs.
func (n *node) ep(o *epOpts) *ep {
	n.t.Helper()
	var opt epOpts
	if o != nil {
		opt = *o
	}
	if opt.cap == (verbs.QPCap{}) {
		opt.cap = defaultCap
	}
	if opt.cqDepth == 0 {
		opt.cqDepth = 256
	}
	if opt.pd == nil {
		opt.pd = n.pd
	}
	e := &ep{n: n, scq: opt.scq, rcq: opt.rcq}
	if e.scq == nil {
		e.scq = n.cq(opt.cqDepth, nil)
	}
	if e.rcq == nil {
		e.rcq = n.cq(opt.cqDepth, nil)
	}
	qp, err := opt.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, Cap: opt.cap, SigAll: opt.sigAll, Integrity: opt.integrity, SRQ: opt.srq, Type: opt.typ, BlockSelfMcastLB: opt.blockLB})
	if err != nil {
		n.t.Fatalf("create qp %+v: %v", opt.cap, err)
	}
	e.qp = qp
	return e
}

// connect connects a and b to each other with the given options (nil:
// defaults).
func connect(t testing.TB, a, b *ep, ao, bo *verbs.ConnectOptions) {
	t.Helper()
	if err := a.qp.Connect(b.qp.Info(), ao); err != nil {
		t.Fatalf("connect %#x to %#x: %v", a.qp.QPN(), b.qp.QPN(), err)
	}
	if err := b.qp.Connect(a.qp.Info(), bo); err != nil {
		t.Fatalf("connect %#x to %#x: %v", b.qp.QPN(), a.qp.QPN(), err)
	}
}

// link creates a connected endpoint pair between nodes a and b.
func link(t testing.TB, a, b *node) (*ep, *ep) {
	t.Helper()
	ea, eb := a.ep(nil), b.ep(nil)
	connect(t, ea, eb, nil, nil)
	return ea, eb
}

// post posts send WRs and fails the test unless all are posted.
func (e *ep) post(wrs ...verbs.SendWR) {
	e.n.t.Helper()
	if n, err := e.qp.PostSend(wrs); err != nil || n != len(wrs) {
		e.n.t.Fatalf("post send: %d of %d posted: %v", n, len(wrs), err)
	}
}

// recv posts receive WRs and fails the test unless all are posted.
func (e *ep) recv(wrs ...verbs.RecvWR) {
	e.n.t.Helper()
	if n, err := e.qp.PostRecv(wrs); err != nil || n != len(wrs) {
		e.n.t.Fatalf("post recv: %d of %d posted: %v", n, len(wrs), err)
	}
}

// fill writes a recognisable pattern, seeded, into b.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	fill(b, seed)
	return b
}

// sameBytes fails the test if got and want differ.
func sameBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Errorf("%s: data differs at byte %d of %d: got % x…, want % x…", what, i, len(want),
			got[i:min(i+16, len(got))], want[i:min(i+16, len(want))])
	}
}

func be64(b []byte) uint64       { return binary.BigEndian.Uint64(b) }
func putBE64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }

// waitEvent waits for an async event of the given type and object,
// returning the other events seen meanwhile.
func waitEvent(t testing.TB, ctx *verbs.Context, typ ifc.EventType, obj uint32) []ifc.Event {
	t.Helper()
	var other []ifc.Event
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for {
		select {
		case e := <-ctx.AsyncEvents():
			if e.Type == typ && e.Obj == obj {
				return other
			}
			other = append(other, e)
		case <-timer.C:
			t.Fatalf("no %v event for %#x in %v (others: %v)", typ, obj, waitFor, other)
			return nil
		}
	}
}

// quietEvents fails if an event of type typ arrives within d.
func quietEvents(t testing.TB, ctx *verbs.Context, typ ifc.EventType, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case e := <-ctx.AsyncEvents():
			if e.Type == typ {
				t.Errorf("unexpected %v event for %#x", e.Type, e.Obj)
			}
		case <-timer.C:
			return
		}
	}
}

// postErr posts wrs and checks PostSend's count and error.
func postErr(t testing.TB, what string, qp *verbs.QP, wrs []verbs.SendWR, wantN int, wantErr error) {
	t.Helper()
	n, err := qp.PostSend(wrs)
	if n != wantN || !errors.Is(err, wantErr) {
		t.Errorf("%s: PostSend = %d, %v; want %d, %v", what, n, err, wantN, wantErr)
	}
}

// write returns a signaled RDMA WRITE of sge to raddr.
func write(id uint64, sge verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{sge}, RemoteAddr: raddr, RKey: rkey}
}

// read returns a signaled RDMA READ from raddr into sge.
func read(id uint64, sge verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SG: []verbs.SGE{sge}, RemoteAddr: raddr, RKey: rkey}
}

// send returns a signaled SEND of sges.
func send(id uint64, sg ...verbs.SGE) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SG: sg}
}

// rwr returns a receive WR.
func rwr(id uint64, sg ...verbs.SGE) verbs.RecvWR { return verbs.RecvWR{WRID: id, SG: sg} }

// variant returns key with its variant byte changed by d.
func variant(key uint32, d int) uint32 { return key&^0xFF | uint32(uint8(int(key&0xFF)+d)) }

// brokenResponder checks that a responder QP went to the error state after
// a remote error: a receive posted to it is flushed, and it produced no
// other completion.
func brokenResponder(t testing.TB, b *ep, buf verbs.SGE) {
	t.Helper()
	b.recv(rwr(0xF1F1, buf))
	CheckErr(t, "receive posted to the responder after the error", Poll1(t, b.rcq), 0xF1F1, verbs.WCWRFlushErr, b.qp.QPN())
	Quiet(t, b.rcq, quiet, "responder receive CQ")
	Quiet(t, b.scq, 0, "responder send CQ")
}
