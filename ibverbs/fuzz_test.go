package ibverbs_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hcasim/hcasim/internal/frontendtest"
)

// The daemon's socket is input to the front end too. FuzzDaemonReplies
// runs c/test/replies.c (a small program: open, query, PD, MR, CQ, two RC
// QPs, SEND and WRITE, events, teardown) against a real daemon through a
// proxy that corrupts what the daemon sends as the fuzz input says: bytes
// flipped, messages cut short, words set to all ones, ids changed,
// messages sent twice, and EVENTS messages of any type for any object put
// in between. Whatever arrives, the program must end by itself within
// its time and not die of a signal (under HCASIM_SANITIZE, not with a
// sanitizer report either). The seeds run in make test; go test -fuzz
// explores further.
func FuzzDaemonReplies(f *testing.F) {
	lib := frontendtest.Lib(f)
	bin := buildCOnce(f, filepath.Join("c", "test", "replies.c"))
	for _, seed := range [][]byte{
		{},                        // unchanged: the program runs through
		{0, 0, 0, 12},             // HELLO's reply: a flipped byte
		{1, 1, 0, 20},             // QUERY_HCA_CAP's reply cut short
		{1, 2, 0, 16},             // a capability word all ones
		{3, 4, 0, 0},              // a reply with another id
		{4, 5, 0, 0},              // a reply sent twice
		{6, 3, 0x10, 0x05},        // an EVENTS message for an object that is not there
		{9, 3, 0x02, 0x00},        // a completion event for CQ 0
		{2, 2, 0, 8, 5, 0, 0, 30}, // two changes
		{12, 1, 0, 0},             // a reply cut to nothing: end-of-file
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, plan []byte) {
		if len(plan) > 64 {
			plan = plan[:64]
		}
		sock := frontendtest.Daemon(t)
		proxy := filepath.Join(t.TempDir(), "proxy.sock")
		stop := corruptingProxy(t, proxy, sock, plan)
		defer stop()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := frontendtest.Start(ctx, t, lib, proxy, bin)
		err := p.Wait()
		if ctx.Err() != nil {
			t.Fatalf("plan %x: the program did not end within 30 s:\n%s", plan, p.Output())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("plan %x: the program was killed by %v:\n%s", plan, ws.Signal(), p.Output())
			}
		}
		if len(plan) == 0 && (err != nil || !strings.Contains(p.Output(), "ran to the end")) {
			t.Fatalf("unchanged, the program did not run through (%v):\n%s", err, p.Output())
		}
	})
}

var (
	buildOnce sync.Map // source → path
)

// buildCOnce builds a C program once per test binary (fuzz iterations
// share it).
func buildCOnce(f *testing.F, src string) string {
	if p, ok := buildOnce.Load(src); ok {
		return p.(string)
	}
	dir := f.TempDir()
	bin := filepath.Join(dir, filepath.Base(src)+".bin")
	args := []string{"-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-o", bin, src, "-libverbs"}
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		f.Fatalf("build %s: %v\n%s", src, err, out)
	}
	buildOnce.Store(src, bin)
	return bin
}

// corruptingProxy listens on path and joins each connection to the daemon
// at sock: the client's messages (and their descriptors) pass unchanged,
// the daemon's are changed as plan says. plan is a list of 4-byte steps
// (message index, kind, BE16 argument) over the daemon's messages of all
// connections, counted from 0. The returned function stops the proxy.
func corruptingProxy(t *testing.T, path, sock string, plan []byte) func() {
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		index int
		wg    sync.WaitGroup
		conns []*net.UnixConn
	)
	steps := func() [][]byte { // the steps for the next message
		mu.Lock()
		defer mu.Unlock()
		var s [][]byte
		for i := 0; i+4 <= len(plan); i += 4 {
			if int(plan[i]) == index {
				s = append(s, plan[i:i+4])
			}
		}
		index++
		return s
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			d, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, d)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); defer d.CloseWrite(); pass(c, d, nil) }()
			go func() { defer wg.Done(); defer c.Close(); pass(d, c, steps) }()
		}
	}()
	return func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// pass copies messages from src to dst until src ends, forwarding
// descriptors; with steps, it changes each message as its steps say.
func pass(src, dst *net.UnixConn, steps func() [][]byte) {
	buf := make([]byte, 1<<16+1)
	oob := make([]byte, syscall.CmsgSpace(8*4))
	for {
		n, oobn, _, _, err := src.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		msg := append([]byte(nil), buf[:n]...)
		var fds []int
		if oobn > 0 {
			if cms, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, cm := range cms {
					if r, err := syscall.ParseUnixRights(&cm); err == nil {
						fds = append(fds, r...)
					}
				}
			}
		}
		out := [][]byte{msg}
		if steps != nil {
			out = nil
			for _, s := range steps() {
				arg := int(binary.BigEndian.Uint16(s[2:]))
				switch s[1] % 6 {
				case 0: // a flipped byte
					if len(msg) > 0 {
						msg[arg%len(msg)] ^= 0xFF
					}
				case 1: // cut short (to nothing: end-of-file)
					msg = msg[:arg%(len(msg)+1)]
				case 2: // a word all ones
					if len(msg) >= 4 {
						o := (arg % len(msg)) &^ 3
						if o+4 > len(msg) {
							o = len(msg) - 4
						}
						binary.BigEndian.PutUint32(msg[o:], 0xFFFFFFFF)
					}
				case 3: // an EVENTS message first: type, object
					ev := make([]byte, 12+8)
					binary.BigEndian.PutUint16(ev, 0x40)
					binary.BigEndian.PutUint32(ev[8:], 8)
					ev[12] = byte(arg >> 8)
					binary.BigEndian.PutUint32(ev[16:], uint32(arg&0xFF))
					out = append(out, ev)
				case 4: // another id
					if len(msg) >= 8 {
						msg[7] ^= 1
					}
				case 5: // sent twice
					out = append(out, msg)
				}
			}
			out = append(out, msg)
		}
		for i, m := range out {
			var rights []byte
			if i == len(out)-1 && len(fds) > 0 {
				rights = syscall.UnixRights(fds...)
			}
			if len(m) == 0 {
				dst.CloseWrite() // an empty packet reads as end-of-file
				continue
			}
			if _, _, err := dst.WriteMsgUnix(m, rights, nil); err != nil {
				break
			}
		}
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
}
