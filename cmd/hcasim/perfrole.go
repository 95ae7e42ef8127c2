package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hcasim/hcasim/hca/verbs"
)

// perf --role server|client: the two sides of a run in two processes, both
// clients of one daemon, as perftest's server and client are on two hosts.
// They meet on a Unix stream socket (--peer) and exchange one JSON line
// each way, then one more from the client when it is done:
//
//	client → server  perfHello  (the run's parameters and the client's QP)
//	server → client  perfAccept (the server's QP and the key and address to target)
//	client → server  perfDone   (when its loop has ended)
//
// The server connects its QP to the client's before it answers, so the
// client may post as soon as its own QP is connected.

// perfHello is the client's first line.
type perfHello struct {
	Op       string       `json:"op"`
	Size     int          `json:"size"`
	QD       int          `json:"qd"`
	PI       string       `json:"pi"`
	Interval int          `json:"interval"`
	QP       verbs.QPInfo `json:"qp"`
}

// perfAccept is the server's answer.
type perfAccept struct {
	Err  string       `json:"error,omitempty"`
	QP   verbs.QPInfo `json:"qp"`
	Addr uint64       `json:"addr"` // the remote address to target (0 through a signature key)
	RKey uint32       `json:"rkey"`
	Wire int          `json:"wire"` // bytes per operation on the wire (READ with PI: the client's SGE length)
}

// perfDone is the client's last line.
type perfDone struct {
	Ops int `json:"ops"`
}

// perfServerResult is the server's --json object.
type perfServerResult struct {
	Role     string `json:"role"`
	Op       string `json:"op"`
	Size     int    `json:"size"`
	QD       int    `json:"qd"`
	PI       string `json:"pi"`
	Ops      int    `json:"ops"`      // operations the client completed
	Received int    `json:"received"` // SENDs the server's receive queue took
}

// perfServe waits at peer for one client, serves its run and returns when
// the client is done. It stops with an error, removing its socket, when
// the daemon goes away or on SIGINT, SIGTERM or SIGHUP.
func perfServe(open func() (*verbs.Context, error), peer string, asJSON bool, stdout, progress io.Writer) (err error) {
	// The daemon first: a server without one has nothing to offer, and the
	// context held while waiting tells when the daemon goes away.
	vctx, err := open()
	if err != nil {
		return fmt.Errorf("perf server: %w", err)
	}
	defer vctx.Close()
	l, err := perfListen(peer)
	if err != nil {
		return fmt.Errorf("perf server: %w", err)
	}
	w := newPerfWatch(vctx, l, peer)
	defer func() {
		w.finish() // closes the listener (removing the socket) and the connection
		werr := w.reason()
		if werr == nil && err != nil && vctx.Err() != nil {
			// The client's end came first, but the daemon is why.
			werr = fmt.Errorf("the daemon went away: %w", vctx.Err())
		}
		if werr != nil {
			err = fmt.Errorf("perf server: %w", werr)
		}
	}()
	fmt.Fprintf(progress, "perf server: waiting for a client at %s\n", peer)
	var c *net.UnixConn
	var dec *json.Decoder
	var h perfHello
	for {
		if c, err = l.AcceptUnix(); err != nil {
			return fmt.Errorf("perf server: %w", err)
		}
		w.setConn(c)
		dec = json.NewDecoder(c)
		err = dec.Decode(&h)
		if err == nil {
			break
		}
		c.Close()
		if !errors.Is(err, io.EOF) {
			return fmt.Errorf("perf server: the client's hello: %w", err)
		}
		// Closed without a word: another server that looked whether
		// this one is alive, not a client.
	}
	enc := json.NewEncoder(c)
	pi := perfPI{mode: h.PI, interval: h.Interval}
	op, ok := perfOps[h.Op]
	if !ok {
		err = fmt.Errorf("unknown operation %q", h.Op)
	} else {
		err = perfCheck(h.Op, h.Size, h.QD, time.Second, pi)
	}
	if err != nil {
		enc.Encode(perfAccept{Err: err.Error()})
		return fmt.Errorf("perf server: the client asked: %v", err) // the client's usage, not this one's
	}
	// Receives for several rounds of the client's queue: the client may
	// post a SEND as soon as an earlier one completed, before this side
	// has taken and replaced its receive, and this side sleeps between
	// looks rather than take a core from the daemon and the client.
	rq := 1
	if op == verbs.WRSend {
		rq = min(8*h.QD, 4096)
	}
	b, err := perfSide(func() (*verbs.Context, error) { return vctx, nil }, 1, rq, perfBufSize(h.Size))
	if err == nil {
		err = b.qp.Connect(h.QP, nil)
	}
	acc := perfAccept{Wire: h.Size}
	if err == nil {
		acc.QP, acc.Addr, acc.RKey = b.qp.Info(), b.mr.Addr, b.mr.RKey
		if op == verbs.WRRDMARead && pi.mode != "none" {
			// A READ's data side is the responder: the signature key is
			// this side's.
			var key uint32
			if key, acc.Wire, err = pi.sigKey(b, h.Size); err == nil {
				acc.Addr, acc.RKey = 0, key
			}
		}
	}
	var recv *perfRecv
	if err == nil && op == verbs.WRSend {
		recv = &perfRecv{e: b, size: h.Size, wcs: make([]verbs.WC, h.QD)}
		err = recv.post(rq)
	}
	if err != nil {
		enc.Encode(perfAccept{Err: err.Error()})
		return fmt.Errorf("perf server: %w", err)
	}
	if err := enc.Encode(acc); err != nil {
		return fmt.Errorf("perf server: %w", err)
	}
	fmt.Fprintf(progress, "perf server: serving %s of %d bytes at QD %d (PI %s)\n", h.Op, h.Size, h.QD, h.PI)

	var d perfDone
	var loopErr error
	if recv == nil {
		loopErr = dec.Decode(&d)
	} else {
		// The client's last line arrives while this side keeps its
		// receive queue stocked. The decoder ends with the connection,
		// which the deferred finish closes at the latest.
		done := make(chan error, 1)
		var g errgroup.Group
		g.Go(func() error { done <- dec.Decode(&d); return nil })
		defer g.Wait()
		defer c.Close()
		for waiting := true; waiting; {
			select {
			case loopErr = <-done:
				waiting = false
			default:
				before := recv.got
				if err := recv.repost(); err != nil {
					return fmt.Errorf("perf server: %w", err)
				}
				if recv.got == before {
					time.Sleep(20 * time.Microsecond)
				}
			}
		}
	}
	if loopErr != nil {
		return fmt.Errorf("perf server: the client ended without saying it was done: %w", loopErr)
	}
	r := perfServerResult{Role: "server", Op: h.Op, Size: h.Size, QD: h.QD, PI: h.PI, Ops: d.Ops}
	if recv != nil {
		// Every SEND the client completed has its receive completion on
		// this CQ already: take them all (a poll takes at most QD).
		for {
			before := recv.got
			if err := recv.repost(); err != nil {
				return fmt.Errorf("perf server: %w", err)
			}
			if recv.got == before {
				break
			}
		}
		r.Received = recv.got
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	fmt.Fprintf(stdout, "perf server: the client completed %d %s operations; %d SENDs received\n", r.Ops, r.Op, r.Received)
	return nil
}

// perfListen listens at the rendezvous socket peer. A socket already there
// that answers is another server's (an error); one that does not is stale
// and goes.
func perfListen(peer string) (*net.UnixListener, error) {
	if fi, err := os.Lstat(peer); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", peer)
		}
		if c, err := net.Dial("unix", peer); err == nil {
			c.Close()
			return nil, fmt.Errorf("another perf server is waiting at %s (give this one its own --peer)", peer)
		}
		os.Remove(peer) // a stale rendezvous socket
	}
	// Listen at a private name and rename it into place: the rendezvous
	// name then appears only once it accepts, so another server that
	// looks in between (bind comes before listen) never takes a live
	// socket for a stale one.
	tmp := fmt.Sprintf("%s.%d.tmp", peer, os.Getpid())
	os.Remove(tmp)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	if _, err := os.Lstat(peer); err == nil {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("another perf server is waiting at %s (give this one its own --peer)", peer)
	}
	if err := os.Rename(tmp, peer); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, err
	}
	return l, nil
}

// perfWatch ends a perf server's wait when the daemon goes away or a
// signal comes: it records why and closes the listener (which removes
// the socket) and the client's connection, so that what blocks on them
// returns.
type perfWatch struct {
	l        *net.UnixListener
	peer     string // the rendezvous socket's name
	finished chan struct{}
	g        errgroup.Group

	mu      sync.Mutex
	why     error
	stopped bool
	conn    net.Conn
}

func newPerfWatch(vctx *verbs.Context, l *net.UnixListener, peer string) *perfWatch {
	w := &perfWatch{l: l, peer: peer, finished: make(chan struct{})}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	w.g.Go(func() error {
		defer signal.Stop(sig)
		var why error
		select {
		case <-w.finished:
			return nil
		case s := <-sig:
			why = fmt.Errorf("stopped by %v", s)
		case <-vctx.Lost():
			why = fmt.Errorf("the daemon went away: %w", vctx.Err())
		}
		w.stop(why)
		return nil
	})
	return w
}

// stop records why (the first reason) and closes what the server waits on.
func (w *perfWatch) stop(why error) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped, w.why = true, why
	c := w.conn
	w.mu.Unlock()
	w.l.Close()
	os.Remove(w.peer) // the listener was renamed into place: Close does not unlink it
	if c != nil {
		c.Close()
	}
}

// setConn tells the watch the connection to close (at once if it stopped).
func (w *perfWatch) setConn(c net.Conn) {
	w.mu.Lock()
	stopped := w.stopped
	w.conn = c
	w.mu.Unlock()
	if stopped {
		c.Close()
	}
}

// reason returns why the watch stopped the server, or nil.
func (w *perfWatch) reason() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.why
}

// finish ends the watch and closes the listener and the connection.
func (w *perfWatch) finish() {
	close(w.finished)
	w.g.Wait()
	w.stop(nil)
}

// perfClient finds the server at peer (waiting up to 10 s for it to
// appear), connects to its QP and runs the loop against it.
func perfClient(open func() (*verbs.Context, error), peer, opName string, size, qd int, dur time.Duration, pi *perfPI, progress io.Writer) (*perfResult, error) {
	a, err := perfSide(open, qd, 1, perfBufSize(size))
	if err != nil {
		return nil, err
	}
	defer a.ctx.Close()
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err = net.Dial("unix", peer); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("perf client: no server at %s (start hcasim perf --role server first): %w", peer, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer c.Close()
	dec, enc := json.NewDecoder(c), json.NewEncoder(c)
	if err := enc.Encode(perfHello{Op: opName, Size: size, QD: qd, PI: pi.mode, Interval: pi.interval, QP: a.qp.Info()}); err != nil {
		return nil, fmt.Errorf("perf client: %w", err)
	}
	var acc perfAccept
	if err := dec.Decode(&acc); err != nil {
		return nil, fmt.Errorf("perf client: the server's answer: %w", err)
	}
	if acc.Err != "" {
		return nil, fmt.Errorf("perf client: the server refused: %s", acc.Err)
	}
	if err := a.qp.Connect(acc.QP, nil); err != nil {
		return nil, err
	}
	op := perfOps[opName]
	wr := verbs.SendWR{Opcode: op, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, size)},
		RemoteAddr: acc.Addr, RKey: acc.RKey}
	if pi.mode != "none" {
		if op == verbs.WRRDMAWrite {
			if wr.SG, err = pi.writeSG(a, size); err != nil {
				return nil, err
			}
		} else {
			if acc.Wire <= 0 || acc.Wire > len(a.mr.Buf) {
				return nil, fmt.Errorf("perf client: the server's wire length %d", acc.Wire)
			}
			wr.SG = []verbs.SGE{a.mr.SGE(0, acc.Wire)}
		}
	}
	res, err := perfLoop(a, wr, size, qd, dur, pi.mode, nil, progress)
	if err != nil {
		return nil, err
	}
	if err := enc.Encode(perfDone{Ops: res.ops}); err != nil {
		return nil, fmt.Errorf("perf client: %w", err)
	}
	return res, nil
}
