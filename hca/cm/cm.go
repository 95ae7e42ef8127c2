// Package cm connects RC QPs the way rdma_cm's connect / accept does for
// a ULP, as a thin layer over hca/verbs: the two sides exchange their QP
// information (LID, GID, QPN, initial PSN) over any byte stream — a TCP
// or Unix connection between processes, a net.Pipe in one — move their
// QPs to RTS with it, and tell each other they are ready (rdma_cm's RTU)
// before either returns, so that neither sends before the other
// receives.
//
// It is the byte-stream variant: it speaks no CM MADs. The InfiniBand
// CM's exchange (REQ, REP, RTU, … on QP1, as rdma_cm programs see it) is
// the daemon's connection manager, package hca/ucma.
//
// The exchange is Info's 30 bytes each way, then one byte each way:
//
//	"HCM1" LID(2) GID(16) QPN(4) PSN(4), all big-endian; then 'R'
package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/hcasim/hcasim/hca/verbs"
)

// ErrProtocol is returned when the peer's bytes are not an exchange.
var ErrProtocol = errors.New("cm: not a connection exchange")

const (
	magic    = "HCM1"
	infoSize = len(magic) + 2 + 16 + 4 + 4
	ready    = 'R'
)

// AppendInfo appends the exchange's encoding of info to b.
func AppendInfo(b []byte, info verbs.QPInfo) []byte {
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint16(b, info.LID)
	b = append(b, info.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, info.QPN)
	return binary.BigEndian.AppendUint32(b, info.PSN)
}

// ParseInfo decodes an exchange's QP information.
func ParseInfo(b []byte) (verbs.QPInfo, error) {
	var info verbs.QPInfo
	if len(b) != infoSize || string(b[:len(magic)]) != magic {
		return info, fmt.Errorf("cm: %d bytes: %w", len(b), ErrProtocol)
	}
	b = b[len(magic):]
	info.LID = binary.BigEndian.Uint16(b)
	copy(info.GID[:], b[2:18])
	info.QPN = binary.BigEndian.Uint32(b[18:]) & 0xFFFFFF
	info.PSN = binary.BigEndian.Uint32(b[22:]) & 0xFFFFFF
	return info, nil
}

// Connect runs the exchange over conn for qp: it sends qp's information,
// reads the peer's, connects qp to it with o (nil: verbs' defaults), and
// returns once both sides are connected, with the peer's information.
// The peer runs Connect too (the exchange is symmetric). conn is not
// closed.
func Connect(conn io.ReadWriter, qp *verbs.QP, o *verbs.ConnectOptions) (verbs.QPInfo, error) {
	var peer verbs.QPInfo
	if _, err := conn.Write(AppendInfo(make([]byte, 0, infoSize), qp.Info())); err != nil {
		return peer, fmt.Errorf("cm: send qp info: %w", err)
	}
	buf := make([]byte, infoSize)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return peer, fmt.Errorf("cm: read peer's qp info: %w", err)
	}
	peer, err := ParseInfo(buf)
	if err != nil {
		return peer, err
	}
	if err := qp.Connect(peer, o); err != nil {
		return peer, fmt.Errorf("cm: connect qp %#x to %#x: %w", qp.QPN(), peer.QPN, err)
	}
	if _, err := conn.Write([]byte{ready}); err != nil {
		return peer, fmt.Errorf("cm: send ready: %w", err)
	}
	if _, err := io.ReadFull(conn, buf[:1]); err != nil {
		return peer, fmt.Errorf("cm: read peer's ready: %w", err)
	}
	if buf[0] != ready {
		return peer, fmt.Errorf("cm: ready byte %#x: %w", buf[0], ErrProtocol)
	}
	return peer, nil
}

// Dial connects qp to the QP behind the listener at address on network
// (Accept's side), as rdma_connect does.
func Dial(ctx context.Context, network, address string, qp *verbs.QP, o *verbs.ConnectOptions) (verbs.QPInfo, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, address)
	if err != nil {
		return verbs.QPInfo{}, fmt.Errorf("cm: %w", err)
	}
	defer conn.Close()
	return exchange(ctx, conn, qp, o)
}

// Accept takes the next connection on l and connects qp to the dialer's
// QP, as rdma_accept does.
func Accept(ctx context.Context, l net.Listener, qp *verbs.QP, o *verbs.ConnectOptions) (verbs.QPInfo, error) {
	conn, err := l.Accept()
	if err != nil {
		return verbs.QPInfo{}, fmt.Errorf("cm: accept: %w", err)
	}
	defer conn.Close()
	return exchange(ctx, conn, qp, o)
}

// exchange runs Connect over conn, giving up when ctx is done.
func exchange(ctx context.Context, conn net.Conn, qp *verbs.QP, o *verbs.ConnectOptions) (verbs.QPInfo, error) {
	if d, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(d); err != nil {
			return verbs.QPInfo{}, fmt.Errorf("cm: %w", err)
		}
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	info, err := Connect(conn, qp, o)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		// ctx's deadline, set on conn, may pass a moment before ctx is done.
		err = fmt.Errorf("%w (%w)", err, context.DeadlineExceeded)
	case ctx.Err() != nil:
		err = fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return info, err
}

// Pair connects two QPs of this process to each other, as a loopback
// rdma_cm connection does.
func Pair(a, b *verbs.QP, o *verbs.ConnectOptions) error {
	if err := a.Connect(b.Info(), o); err != nil {
		return fmt.Errorf("cm: connect qp %#x to %#x: %w", a.QPN(), b.QPN(), err)
	}
	if err := b.Connect(a.Info(), o); err != nil {
		return fmt.Errorf("cm: connect qp %#x to %#x: %w", b.QPN(), a.QPN(), err)
	}
	return nil
}
