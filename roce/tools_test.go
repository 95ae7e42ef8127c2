package roce_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/internal/tooltest"
	"github.com/hcasim/hcasim/roce"
)

// needTool is tooltest.Need.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	return tooltest.Need(t, name, pkg)
}

// frameWant is what an independent decoder should read from a frame.
type frameWant struct {
	op     roce.Opcode
	destQP uint32
	psn    uint32
	pad    uint8
	ack    bool
	v6     bool
}

// capture writes a pcap of a mixed run: every RC opcode over IPv4, the
// segments of a multi-packet WRITE, SEND with immediate and READ response
// at a 256-byte path MTU, an integrity WRITE's wire bytes (512-byte blocks
// each followed by 8 PI bytes), NAKs, and IPv6 frames. It returns the file
// and what each frame holds.
func capture(t *testing.T, corrupt int) (string, []frameWant) {
	t.Helper()
	var buf bytes.Buffer
	w, err := roce.NewPcapWriter(&buf, time.Unix(1700000000, 0))
	require.NoError(t, err)
	b := roce.NewFrameBuilder()
	var wants []frameWant
	add := func(v6 bool, p roce.Packet, payload []byte) {
		src := roce.Endpoint{MAC: macA, IP: netip.MustParseAddr("127.0.0.2"), Port: 0xC000 | uint16(p.DestQP&0x3FFF)}
		dst := roce.Endpoint{MAC: macB, IP: netip.MustParseAddr("127.0.0.3")}
		if v6 {
			src.IP, dst.IP = netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::3")
		}
		frame, err := b.Build(src, dst, roce.FrameOptions{TrafficClass: 0x02, FlowLabel: 0x12345}, &p, payload)
		require.NoError(t, err)
		if len(wants)+1 == corrupt {
			frame[len(frame)-1] ^= 0x01
		}
		require.NoError(t, w.WriteFrame(frame))
		wants = append(wants, frameWant{p.Opcode, p.DestQP, p.PSN, p.PadCount, p.AckReq, v6})
	}
	for _, c := range allOpcodes() {
		add(false, c.p, c.payload)
	}
	psn := uint32(0xFFFFFD) // wraps within the message
	for _, m := range []struct {
		kind roce.Message
		len  int
	}{{roce.MsgWrite, 1000}, {roce.MsgSendImm, 600}, {roce.MsgReadResponse, 700}} {
		for i := 0; ; i++ {
			op, n, ok := roce.Segment(m.kind, m.len, 256, i)
			if !ok {
				break
			}
			p := roce.Packet{BTH: roce.BTH{Opcode: op, PKey: 0xFFFF, DestQP: 0x11, PSN: psn, AckReq: op.Position() >= roce.PosLast && op.IsRequest()},
				RETH: roce.RETH{VA: 0x10000, RKey: 0x1234, DMALen: uint32(m.len)}, AETH: roce.AETH{Syndrome: roce.SyndromeACK, MSN: 7}, Imm: 0x01020304}
			add(false, p, bytes.Repeat([]byte{byte(i + 1)}, n))
			psn = roce.PSNAdd(psn, 1)
		}
	}
	// An integrity WRITE: two 512-byte blocks with their PI on the wire.
	wire := make([]byte, 0, 2*520)
	for blk := 0; blk < 2; blk++ {
		wire = append(wire, bytes.Repeat([]byte{0xA5}, 512)...)
		wire = append(wire, 0x12, 0x34, 0x00, 0x00, 0x00, 0x00, 0x00, byte(blk))
	}
	add(false, roce.Packet{BTH: roce.BTH{Opcode: roce.OpWriteOnly, PKey: 0xFFFF, DestQP: 0x22, PSN: 5, AckReq: true},
		RETH: roce.RETH{VA: 0x2000, RKey: 0x99, DMALen: uint32(len(wire))}}, wire)
	for _, s := range []roce.Syndrome{roce.SyndromeNAKPSNSequence, roce.SyndromeNAKRemoteAccess, roce.SyndromeRNR(12)} {
		add(false, roce.Packet{BTH: roce.BTH{Opcode: roce.OpAcknowledge, PKey: 0xFFFF, DestQP: 0x33, PSN: 40}, AETH: roce.AETH{Syndrome: s, MSN: 3}}, nil)
	}
	add(true, roce.Packet{BTH: roce.BTH{Opcode: roce.OpSendOnlyImm, SE: true, PKey: 0xFFFF, DestQP: 0x44, PSN: 1, AckReq: true}, Imm: 0xdeadbeef}, []byte("hello world"))
	add(true, roce.Packet{BTH: roce.BTH{Opcode: roce.OpAtomicAcknowledge, PKey: 0xFFFF, DestQP: 0x45, PSN: 2}, AETH: roce.AETH{Syndrome: roce.SyndromeACK}, AtomicAck: 0x4444}, nil)
	add(true, roce.Packet{BTH: roce.BTH{Opcode: roce.OpReadRequest, PKey: 0xFFFF, DestQP: 0x46, PSN: 3, AckReq: true}, RETH: roce.RETH{VA: 1, RKey: 2, DMALen: 3}}, nil)
	path := filepath.Join(t.TempDir(), "mixed.pcap")
	if d := os.Getenv("HCASIM_KEEP_PCAP"); d != "" { // to look at it in Wireshark
		path = filepath.Join(d, "mixed.pcap")
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	return path, wants
}

// TestTshark: Wireshark's dissector reads every frame of a capture as
// InfiniBand over UDP 4791 with the opcode, QP, PSN, pad and AckReq
// written, and finds nothing malformed.
func TestTshark(t *testing.T) {
	tshark := needTool(t, "tshark", "tshark")
	path, wants := capture(t, 0)
	run := func(args ...string) string {
		var stderr bytes.Buffer
		cmd := exec.Command(tshark, append([]string{"-r", path, "--disable-protocol", "rpcordma"}, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s", stderr.String())
		return string(out)
	}
	fields := run("-T", "fields", "-E", "separator=;", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
		"-e", "infiniband.bth.psn", "-e", "infiniband.bth.padcnt", "-e", "infiniband.bth.a", "-e", "ipv6.version")
	lines := strings.Split(strings.TrimSpace(fields), "\n")
	require.Len(t, lines, len(wants))
	for i, l := range lines {
		f := strings.Split(l, ";")
		require.Len(t, f, 6, "frame %d: %q", i+1, l)
		w := wants[i]
		op, err1 := strconv.ParseUint(f[0], 0, 8)
		qp, err2 := strconv.ParseUint(f[1], 0, 32)
		psn, err3 := strconv.ParseUint(f[2], 0, 32)
		pad, err4 := strconv.ParseUint(f[3], 0, 8)
		require.NoError(t, err1, "frame %d: %q", i+1, l)
		require.NoError(t, err2, "frame %d: %q", i+1, l)
		require.NoError(t, err3, "frame %d: %q", i+1, l)
		require.NoError(t, err4, "frame %d: %q", i+1, l)
		assert.Equal(t, uint64(w.op), op, "frame %d opcode (%v)", i+1, w.op)
		assert.Equal(t, uint64(w.destQP), qp, "frame %d QP", i+1)
		assert.Equal(t, uint64(w.psn), psn, "frame %d PSN", i+1)
		assert.Equal(t, uint64(w.pad), pad, "frame %d pad", i+1)
		assert.Equal(t, w.ack, f[4] == "1" || f[4] == "True", "frame %d AckReq %q", i+1, f[4])
		assert.Equal(t, w.v6, f[5] == "6", "frame %d IP version", i+1)
	}
	// UD: the DETH as Wireshark reads it (its dissector knows no XRCETH:
	// XRC requests show their extension headers as vendor data, so the
	// XRCETH is checked by the round trip tests only).
	deth := strings.Fields(run("-Y", "infiniband.bth.opcode == 0x64 || infiniband.bth.opcode == 0x65", "-T", "fields",
		"-E", "separator=;", "-e", "infiniband.bth.opcode", "-e", "infiniband.deth.q_key", "-e", "infiniband.deth.srcqp"))
	require.Len(t, deth, 2, "the UD frames")
	for _, l := range deth {
		f := strings.Split(l, ";")
		require.Len(t, f, 3, "%q", l)
		qkey, err1 := strconv.ParseUint(f[1], 0, 64)
		src, err2 := strconv.ParseUint(f[2], 0, 32)
		require.NoError(t, err1, "%q", l)
		require.NoError(t, err2, "%q", l)
		assert.Equal(t, uint64(0x11111111), qkey, "UD %s Q_Key", f[0])
		assert.Equal(t, uint64(0xabc), src, "UD %s source QP", f[0])
	}
	bad := run("-Y", "_ws.malformed || (udp.dstport == 4791 && !infiniband)")
	assert.Empty(t, strings.TrimSpace(bad), "malformed or undecoded frames")
	// No expert notes at all, but the one RoCEv2 asks for: a zero UDP
	// checksum, which Wireshark calls illegal over IPv6.
	experts := run("-T", "fields", "-E", "separator=;", "-E", "aggregator=|", "-e", "_ws.expert.message", "-e", "ipv6.version")
	for i, l := range strings.Split(strings.TrimSpace(experts), "\n") {
		f := strings.Split(l, ";")
		for _, m := range strings.Split(f[0], "|") {
			if m != "" && !(m == "Illegal checksum value (0)" && len(f) > 1 && f[1] == "6") {
				t.Errorf("frame %d: tshark: %s", i+1, m)
			}
		}
	}
}

// TestScapyICRC: an independent ICRC check (scapy's BTH layer for IPv4, the
// annex A17 mask with zlib for IPv6, testdata/icrc_check.py) agrees on every
// frame of the capture, and catches a corrupted one.
func TestScapyICRC(t *testing.T) {
	py := needTool(t, "/usr/bin/python3", "python3-scapy")
	check := func(path string) []string {
		out, err := exec.Command(py, filepath.Join("testdata", "icrc_check.py"), path).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	path, wants := capture(t, 0)
	lines := check(path)
	require.Len(t, lines, len(wants)+1)
	for i, l := range lines[:len(wants)] {
		assert.Equal(t, fmt.Sprintf("ok %d", i+1), l)
	}
	assert.Equal(t, fmt.Sprintf("frames %d", len(wants)), lines[len(wants)])

	for _, corrupt := range []int{3, len(wants)} { // an IPv4 frame, an IPv6 one
		path, _ := capture(t, corrupt)
		lines := check(path)
		for i, l := range lines[:len(wants)] {
			want := "ok"
			if i+1 == corrupt {
				want = "bad"
			}
			assert.Equal(t, fmt.Sprintf("%s %d", want, i+1), l)
		}
	}
}
