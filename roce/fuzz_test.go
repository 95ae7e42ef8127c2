package roce_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/gopacket"

	"github.com/hcasim/hcasim/roce"
	"github.com/stretchr/testify/require"
)

// FuzzDecodePacket: any bytes decode to a packet or to one of the
// package's errors, leaving the packet untouched; a decoded packet encodes
// back to the same bytes (the pad bytes zeroed).
func FuzzDecodePacket(f *testing.F) {
	for _, c := range allOpcodes() {
		c.p.ICRC = 0x12345678
		b, err := c.p.Append(nil, c.payload)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p roce.Packet
		err := p.DecodeFromBytes(data, gopacket.NilDecodeFeedback)
		if err != nil {
			if !errors.Is(err, roce.ErrTruncated) && !errors.Is(err, roce.ErrOpcode) && !errors.Is(err, roce.ErrLength) {
				t.Fatalf("error %v is none of the package's", err)
			}
			var zero roce.Packet
			require.Equal(t, zero.BTH, p.BTH, "an error left %+v", p)
			require.Nil(t, p.Payload, "an error left %+v", p)
			require.Nil(t, p.Contents, "an error left %+v", p)
			return
		}
		require.Len(t, p.Contents, p.Opcode.HeaderLen(), "header bytes")
		require.Equal(t, len(data), len(p.Contents)+len(p.Payload)+int(p.PadCount)+roce.ICRCSize,
			"%d header and %d payload bytes, pad %d", len(p.Contents), len(p.Payload), p.PadCount)
		pad := p.PadCount
		q := p
		out, err := q.Append(nil, p.Payload)
		require.NoError(t, err, "re-encode")
		want := bytes.Clone(data)
		// Append sets the pad from the payload and zeroes it; the input's
		// pad count and bytes are its own.
		want[1] = want[1]&^0x30 | roce.PadFor(len(p.Payload))<<4
		want = append(want[:len(data)-roce.ICRCSize-int(pad)], make([]byte, roce.PadFor(len(p.Payload)))...)
		want = append(want, data[len(data)-roce.ICRCSize:]...)
		require.Equal(t, want, out, "re-encoded")
	})
}

// FuzzParseFrame: any frame is a RoCEv2 packet with a good ICRC, or gets
// an error; one that parses keeps its payload inside the frame, and
// sealing it again changes nothing.
func FuzzParseFrame(f *testing.F) {
	b := roce.NewFrameBuilder()
	src := roce.Endpoint{MAC: macA, IP: netip.MustParseAddr("127.0.0.2"), Port: 0xC001}
	dst := roce.Endpoint{MAC: macB, IP: netip.MustParseAddr("127.0.0.3")}
	for i, c := range allOpcodes() {
		s, d := src, dst
		if i%3 == 0 {
			s.IP, d.IP = netip.MustParseAddr("::1"), netip.MustParseAddr("::1")
		}
		frame, err := b.Build(s, d, roce.FrameOptions{}, &c.p, c.payload)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(frame))
	}
	parser := roce.NewParser()
	f.Fuzz(func(t *testing.T, frame []byte) {
		in := bytes.Clone(frame)
		err := parser.Decode(frame)
		require.True(t, bytes.Equal(in, frame), "Decode changed the frame")
		if err != nil {
			if errors.Is(err, roce.ErrICRC) {
				return
			}
			if !errors.Is(err, roce.ErrNotRoCE) && !errors.Is(err, roce.ErrTruncated) && !errors.Is(err, roce.ErrOpcode) && !errors.Is(err, roce.ErrLength) {
				t.Fatalf("error %v is none of the package's", err)
			}
			return
		}
		pl := parser.Packet.Payload
		if len(pl) > 0 {
			require.True(t, inside(frame, pl), "the payload is not in the frame")
		}
		l3 := bytes.Clone(frame[len(parser.Eth.Contents):])
		require.NoError(t, roce.SealICRC(l3), "sealing a good frame again")
		require.True(t, bytes.Equal(l3, frame[len(parser.Eth.Contents):]), "sealing a good frame again changed it")
	})
}

func inside(outer, inner []byte) bool {
	for i := 0; i+len(inner) <= len(outer); i++ {
		if &outer[i] == &inner[0] {
			return true
		}
	}
	return false
}
