package remote_test

import (
	"encoding/binary"
	"errors"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/hca/remote/daemon"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/remote"
	"github.com/hcasim/hcasim/hca/verbs"
)

// FuzzDecode: Decode never panics; a message it accepts re-encodes to the
// same bytes, and its header describes it.
func FuzzDecode(f *testing.F) {
	f.Add(remote.Encode(nil, remote.TypeHello, 1, helloPayload(remote.Magic, remote.Version)))
	f.Add(remote.Encode(nil, remote.TypeCommand, 2, ifc.NewIn(ifc.CmdQueryHCACap, 8)))
	f.Add(remote.Encode(nil, remote.TypeError, 0, []byte{0, 0, 0, 1, 'x'}))
	f.Add(header(1, 1, 1, 8, make([]byte, 8)))
	f.Add(header(2, 0, 1, 9, make([]byte, 8)))
	f.Add([]byte{})
	f.Add(make([]byte, 11))
	f.Fuzz(func(t *testing.T, p []byte) {
		h, pl, err := remote.Decode(p)
		if err != nil {
			require.ErrorIs(t, err, remote.ErrMessage)
			return
		}
		require.LessOrEqual(t, len(p), remote.MaxMessage, "accepted an oversized message")
		require.GreaterOrEqual(t, len(p), remote.HeaderSize, "accepted a message shorter than a header")
		require.Equal(t, int(h.Len), len(pl), "header length and payload (message of %d bytes)", len(p))
		require.Equal(t, len(p)-remote.HeaderSize, len(pl), "payload and message lengths")
		require.Equal(t, p, remote.Encode(nil, h.Type, h.ID, pl), "re-encoded")
		_ = h.Type.String()
	})
}

// The daemon FuzzMessages drives: one for all execs (an exec must stay
// well under a millisecond), with a well-behaved client that must keep
// working. Connections are socket pairs served with ServeConn: no socket
// file to clean up.
var fuzzd struct {
	once sync.Once
	err  error
	srv  *daemon.Server
	good *verbs.Context
	cl   *remote.Client
}

// seqpacketPair returns two connected SOCK_SEQPACKET connections.
func seqpacketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "seqpacket")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
		cs[i] = c.(*net.UnixConn)
	}
	return cs[0], cs[1], nil
}

func fuzzDaemon(t testing.TB) {
	fuzzd.once.Do(func() {
		caps := hca.ConnectX5Caps
		caps.MaxMappedBytes = 16 << 20
		caps.MaxQP, caps.MaxCQ = 64, 64
		dev := hca.New(hca.Options{Caps: &caps, TimeScale: 1000})
		fuzzd.srv = &daemon.Server{Dev: dev, MaxMaps: 64}
		a, b, err := seqpacketPair()
		if err != nil {
			fuzzd.err = err
			return
		}
		fuzzd.srv.ServeConn(a)
		if fuzzd.cl, err = remote.NewClient(b); err != nil {
			fuzzd.err = err
			return
		}
		fuzzd.good, fuzzd.err = verbs.New(fuzzd.cl)
	})
	require.NoError(t, fuzzd.err, "fuzz daemon")
}

// Fuzz input: a mode byte (bit 0: send a valid HELLO first), then
// packets, each a control byte, a BE16 length and that many bytes (cut
// at the end of the input). Control bits: 0 attach a sealed 64 KiB memfd;
// 1 attach two; 2 the bytes are a BE16 type and a payload, sent with a
// well-formed header (id: the packet's index + 1).
const (
	fzHello   = 1 << 0
	fzFD      = 1 << 0
	fzTwoFDs  = 1 << 1
	fzEncode  = 1 << 2
	fzMaxPkts = 64
	fzProbeID = 0xFFFFFFFF
)

type fzPacket struct {
	ctl  byte
	data []byte
}

func fzParse(in []byte) (mode byte, pkts []fzPacket) {
	if len(in) == 0 {
		return 0, nil
	}
	mode, in = in[0], in[1:]
	for len(in) > 0 && len(pkts) < fzMaxPkts {
		ctl := in[0]
		in = in[1:]
		n := 0
		if len(in) >= 2 {
			n = int(binary.BigEndian.Uint16(in))
			in = in[2:]
		} else {
			in = nil
		}
		n = min(n, len(in))
		pkts = append(pkts, fzPacket{ctl, in[:n]})
		in = in[n:]
	}
	return mode, pkts
}

// fzInput builds a fuzz input (for seeds).
func fzInput(mode byte, pkts ...fzPacket) []byte {
	b := []byte{mode}
	for _, p := range pkts {
		b = append(b, p.ctl)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.data)))
		b = append(b, p.data...)
	}
	return b
}

func typed(t remote.Type, payload []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(t)), payload...)
}

// FuzzMessages: random messages, and sequences of them, over a raw
// connection to a live daemon, with and without HELLO first. The daemon
// never crashes or hangs (every connection ends with the answer to a
// probe, or closed), what it sends is well-formed, every reply answers a
// request sent, and a well-behaved client keeps working.
func FuzzMessages(f *testing.F) {
	hello := remote.Encode(nil, remote.TypeHello, 1, helloPayload(remote.Magic, remote.Version))
	cq := ifc.NewIn(ifc.CmdCreateCQ, ifc.CQInSize).Put8(ifc.CQInLogSize, 4).Put64(ifc.CQInRing, 1<<32).Put64(ifc.CQInDBRec, 1<<32+4096)
	f.Add(fzInput(0, fzPacket{0, hello}, fzPacket{fzEncode, typed(remote.TypeCommand, ifc.NewIn(ifc.CmdQueryHCACap, 8))}))
	f.Add(fzInput(fzHello, fzPacket{fzEncode, typed(remote.TypeCommand, ifc.NewIn(ifc.CmdAllocPD, 8))}))
	f.Add(fzInput(fzHello, fzPacket{fzEncode | fzFD, typed(remote.TypeMapMem, mapPayload(65536, 4096))},
		fzPacket{fzEncode, typed(remote.TypeCommand, cq)},
		fzPacket{fzEncode, typed(remote.TypeArmCQ, []byte{0, 0, 0, 1, 0, 0, 0, 0})},
		fzPacket{fzEncode, typed(remote.TypeUnmap, binary.BigEndian.AppendUint64(nil, 1<<32))}))
	f.Add(fzInput(fzHello, fzPacket{fzEncode | fzTwoFDs, typed(remote.TypeMapMem, mapPayload(4096, 4096))}))
	f.Add(fzInput(fzHello, fzPacket{fzEncode | fzFD, typed(remote.TypeRingSQ, []byte{0, 0, 1, 0})}))
	f.Add(fzInput(fzHello, fzPacket{0, header(uint16(remote.TypeUnmap), 1, 3, 8, make([]byte, 8))}, fzPacket{0, []byte{1, 2}}))
	f.Add(fzInput(fzHello, fzPacket{0, hello}))
	f.Add(fzInput(0, fzPacket{fzEncode, typed(remote.TypeHello, helloPayload(remote.Magic, 9))}))
	f.Add(fzInput(0, fzPacket{fzEncode, typed(remote.TypeRingRQ, []byte{0, 0, 1, 0})}))
	f.Add(fzInput(fzHello, fzPacket{fzEncode, typed(0x55, nil)}, fzPacket{fzEncode, typed(remote.TypeEvents, make([]byte, 8))}))
	// A connection-manager connection: UCMA_OPEN with its eventfd (here a
	// memfd), then CREATE_ID and GET_EVENT; and UCMA before UCMA_OPEN.
	createID := append([]byte{0, 0, 0, 0, 24, 0, 4, 0}, make([]byte, 24)...)
	createID[8+16], createID[8+17] = 0x06, 0x01
	f.Add(fzInput(0, fzPacket{fzEncode | fzFD, typed(remote.TypeUcmaOpen, nil)},
		fzPacket{fzEncode, typed(remote.TypeUcma, createID)},
		fzPacket{fzEncode, typed(remote.TypeUcma, append([]byte{12, 0, 0, 0, 8, 0, 0x50, 1}, make([]byte, 8)...))}))
	f.Add(fzInput(0, fzPacket{fzEncode, typed(remote.TypeUcma, createID)}))
	f.Add(fzInput(fzHello, fzPacket{fzEncode | fzFD, typed(remote.TypeUcmaOpen, nil)}))
	f.Add([]byte{fzHello})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzDaemon(t)
		mode, pkts := fzParse(in)
		cc, sc, err := seqpacketPair()
		require.NoError(t, err)
		defer cc.Close()
		fuzzd.srv.ServeConn(sc)
		deadline := time.Now().Add(10 * time.Second)
		cc.SetDeadline(deadline)

		// The ids sent, as the daemon reads them.
		ids := map[uint32]bool{0: true, fzProbeID: true}
		var out [][]byte
		if mode&fzHello != 0 {
			out = append(out, remote.Encode(nil, remote.TypeHello, 1, helloPayload(remote.Magic, remote.Version)))
		}
		var fdsFor [][]int
		for _, p := range pkts {
			b := p.data
			if p.ctl&fzEncode != 0 {
				var typ uint16
				if len(b) >= 2 {
					typ, b = binary.BigEndian.Uint16(b), b[2:]
				}
				b = remote.Encode(nil, remote.Type(typ), uint32(len(out)+1), b)
			}
			out = append(out, b)
		}
		for i, b := range out {
			if len(b) >= 8 {
				ids[binary.BigEndian.Uint32(b[4:8])] = true
			}
			var fds []int
			if i > 0 || mode&fzHello == 0 {
				ctl := pkts[i-int(mode&fzHello)].ctl
				if ctl&(fzFD|fzTwoFDs) != 0 {
					fds = append(fds, fuzzMemfd(t))
				}
				if ctl&fzTwoFDs != 0 {
					fds = append(fds, fuzzMemfd(t))
				}
			}
			fdsFor = append(fdsFor, fds)
		}

		// Read concurrently: the daemon answers as it reads, and a daemon
		// blocked on its replies would stop reading.
		result := make(chan error, 1)
		go func() { result <- fuzzRead(cc, ids) }()
		closed := false
		for i, b := range out {
			var oob []byte
			if len(fdsFor[i]) > 0 {
				oob = unix.UnixRights(fdsFor[i]...)
			}
			_, _, err := cc.WriteMsgUnix(b, oob, nil)
			for _, fd := range fdsFor[i] {
				unix.Close(fd)
			}
			if err != nil {
				for _, fds := range fdsFor[i+1:] {
					for _, fd := range fds {
						unix.Close(fd)
					}
				}
				closed = true
				break // the daemon closed the connection
			}
		}
		if !closed {
			// A probe: UNMAP of an IOVA never mapped (NOT_MAPPED, or
			// NOT_READY without HELLO). The daemon answers in order, so
			// its answer comes after all the others.
			cc.WriteMsgUnix(remote.Encode(nil, remote.TypeUnmap, fzProbeID, make([]byte, 8)), nil, nil)
		}
		require.NoError(t, <-result)
		// The well-behaved client is still served.
		pd, err := fuzzd.good.AllocPD()
		require.NoError(t, err, "the well-behaved client")
		require.NoError(t, pd.Dealloc(), "the well-behaved client")
	})
}

func fuzzMemfd(t *testing.T) int {
	fd, err := unix.MemfdCreate("fuzz", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	require.NoError(t, err)
	unix.Ftruncate(fd, 1<<16)
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, sealed)
	return fd
}

// fuzzRead reads the daemon's messages until the probe's answer or the
// end of the connection, and checks each.
func fuzzRead(c *net.UnixConn, ids map[uint32]bool) error {
	buf := make([]byte, remote.MaxMessage+1)
	for {
		n, _, flags, _, err := c.ReadMsgUnix(buf, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return errors.New("the daemon neither answered the probe nor closed the connection")
			}
			return nil // reset: closed
		}
		if n == 0 {
			return nil
		}
		if flags&unix.MSG_TRUNC != 0 {
			return errors.New("an oversized message from the daemon")
		}
		h, p, err := remote.Decode(buf[:n])
		if err != nil {
			return err
		}
		sizes := map[remote.Type]int{
			remote.TypeHello | remote.ReplyBit: 12, remote.TypeMapMem | remote.ReplyBit: 16,
			remote.TypeUnmap | remote.ReplyBit: 4, remote.TypeArmCQ | remote.ReplyBit: 4,
		}
		switch {
		case h.Type == remote.TypeEvents:
			if len(p)%8 != 0 || h.ID != 0 {
				return errors.New("a malformed EVENTS")
			}
			continue
		case h.Type == remote.TypeError:
			if len(p) < 4 {
				return errors.New("an ERROR without a status")
			}
			if st := remote.Status(binary.BigEndian.Uint32(p)); st == remote.StatusOK || st > remote.StatusShutdown {
				return errors.New("an ERROR with status " + st.String())
			}
		case h.Type == remote.TypeCommand|remote.ReplyBit:
			if len(p) < ifc.OutHeaderSize {
				return errors.New("a COMMAND reply shorter than a mailbox header")
			}
		case h.Type == remote.TypeUcmaOpen|remote.ReplyBit:
			if len(p) != 8 {
				return errors.New("a UCMA_OPEN reply without its token")
			}
		case h.Type == remote.TypeUcma|remote.ReplyBit:
			if len(p) < 4 {
				return errors.New("a UCMA reply without its errno")
			}
		case sizes[h.Type] != 0:
			if len(p) != sizes[h.Type] {
				return errors.New(h.Type.String() + " of a wrong size")
			}
			if binary.BigEndian.Uint32(p) != 0 {
				return errors.New(h.Type.String() + " with a status (refusals are ERRORs)")
			}
		default:
			return errors.New("unexpected message " + h.Type.String())
		}
		if !ids[h.ID] {
			return errors.New(h.Type.String() + " for an id never sent")
		}
		if h.ID == fzProbeID && h.Type == remote.TypeError {
			return nil
		}
	}
}
