// Package remote carries the device's function interface ([ifc.Function])
// over a Unix socket, so that the device can run as a daemon (hcasim
// serve) shared by many client processes, each a function of its own.
//
// The transport is a SOCK_SEQPACKET Unix socket: every message is one
// packet, so message boundaries and the file descriptors passed with
// SCM_RIGHTS never mix. Memory the device reaches (rings, doorbell records,
// translation lists, data) is a memfd the client creates, seals against
// shrinking and passes to the daemon, which maps it too: the data path is
// zero-copy. Commands travel as the device's own mailboxes. The wire
// format is specified in docs/PROTOCOL.md.
package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the protocol version this package speaks.
const Version = 1

// Magic opens a HELLO ("HCAS").
const Magic = 0x48434153

// HeaderSize is the size of every message's header.
const HeaderSize = 12

// MaxMessage is the largest message (header included) either side sends
// or accepts.
const MaxMessage = 64 << 10

// MaxFDs is the most file descriptors a message may carry (MAP_MEM: one).
const MaxFDs = 1

// Type is a message type. A reply's type is its request's with ReplyBit.
type Type uint16

// Message types.
const (
	// Client to daemon.
	TypeHello   Type = 0x01 // magic, version; reply: status, version, LID, max message
	TypeCommand Type = 0x02 // an input mailbox; reply: the output mailbox
	TypeMapMem  Type = 0x03 // size, align + one memfd; reply: status, IOVA
	TypeUnmap   Type = 0x04 // IOVA; reply: status
	TypeRingSQ  Type = 0x05 // qpn; no reply
	TypeRingRQ  Type = 0x06 // qpn; no reply
	TypeArmCQ   Type = 0x07 // cqn, arm word; a reply when the id is not 0
	// TypeUcmaOpen opens a connection-manager channel on a connection
	// without HELLO: no payload, one eventfd the daemon keeps readable
	// while the channel's events wait; reply: the channel's token (BE64).
	TypeUcmaOpen Type = 0x08
	// TypeUcma is one rdma_ucm command (its header and payload as
	// librdmacm writes them, then the extra bytes of hca/ucma's Command);
	// reply: the errno (BE32, 0: done) and the response bytes.
	TypeUcma Type = 0x09

	// Daemon to client.
	TypeEvents Type = 0x40 // events (type, object), unsolicited
	TypeError  Type = 0x41 // status, reason: the message with this id was refused

	// ReplyBit marks a reply.
	ReplyBit Type = 0x80
)

func (t Type) String() string {
	switch t {
	case TypeHello:
		return "HELLO"
	case TypeCommand:
		return "COMMAND"
	case TypeMapMem:
		return "MAP_MEM"
	case TypeUnmap:
		return "UNMAP"
	case TypeRingSQ:
		return "RING_SQ"
	case TypeRingRQ:
		return "RING_RQ"
	case TypeArmCQ:
		return "ARM_CQ"
	case TypeUcmaOpen:
		return "UCMA_OPEN"
	case TypeUcma:
		return "UCMA"
	case TypeEvents:
		return "EVENTS"
	case TypeError:
		return "ERROR"
	}
	if t&ReplyBit != 0 && t&^ReplyBit != 0 && t&^ReplyBit < TypeEvents {
		return (t &^ ReplyBit).String() + "_REPLY"
	}
	return fmt.Sprintf("type %#x", uint16(t))
}

// Status is a protocol status (in replies and ERROR messages).
type Status uint32

// Protocol statuses.
const (
	StatusOK          Status = 0
	StatusBadMessage  Status = 1 // malformed: short, wrong length, bad fields
	StatusBadVersion  Status = 2 // HELLO with another magic or version
	StatusUnknownType Status = 3
	StatusBadFD       Status = 4 // missing, extra, or unusable descriptor
	StatusNoMemory    Status = 5 // the mapping limit is reached or mmap failed
	StatusNotMapped   Status = 6 // UNMAP of an IOVA MAP_MEM did not return
	StatusNotReady    Status = 7 // a message before HELLO
	StatusShutdown    Status = 8 // the daemon is stopping
)

func (s Status) String() string {
	names := [...]string{"OK", "BAD_MESSAGE", "BAD_VERSION", "UNKNOWN_TYPE", "BAD_FD", "NO_MEMORY", "NOT_MAPPED", "NOT_READY", "SHUTDOWN"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("status %d", uint32(s))
}

// Errors.
var (
	// ErrMessage is a malformed message.
	ErrMessage = errors.New("remote: malformed message")
	// ErrProtocol is a peer that broke the protocol (wrong reply, version).
	ErrProtocol = errors.New("remote: protocol error")
	// ErrClosed is a closed connection.
	ErrClosed = errors.New("remote: connection closed")
	// ErrTimeout is a daemon that did not answer a request within
	// ReplyTimeout; the client closed the connection.
	ErrTimeout = errors.New("remote: no reply in time")
)

// StatusError is a request the daemon refused.
type StatusError struct {
	Status Status
	Reason string
}

func (e *StatusError) Error() string {
	if e.Reason == "" {
		return "remote: " + e.Status.String()
	}
	return "remote: " + e.Status.String() + ": " + e.Reason
}

// Header is a message header: type (BE16), reserved (BE16, zero), id
// (BE32: a request's, echoed by its reply; 0 for messages without reply),
// and the payload length (BE32), which must equal the packet's length less
// the header.
type Header struct {
	Type Type
	ID   uint32
	Len  uint32
}

// Encode appends the message (header and payload) to b.
func Encode(b []byte, t Type, id uint32, payload []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(t))
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// Decode splits a packet into header and payload.
func Decode(p []byte) (Header, []byte, error) {
	if len(p) < HeaderSize {
		return Header{}, nil, fmt.Errorf("%d-byte message: %w", len(p), ErrMessage)
	}
	if len(p) > MaxMessage {
		return Header{}, nil, fmt.Errorf("%d-byte message, the limit is %d: %w", len(p), MaxMessage, ErrMessage)
	}
	h := Header{Type: Type(binary.BigEndian.Uint16(p)), ID: binary.BigEndian.Uint32(p[4:]), Len: binary.BigEndian.Uint32(p[8:])}
	if binary.BigEndian.Uint16(p[2:]) != 0 {
		return h, nil, fmt.Errorf("reserved header bits set: %w", ErrMessage)
	}
	if uint64(h.Len) != uint64(len(p)-HeaderSize) {
		return h, nil, fmt.Errorf("payload length %d in a %d-byte message: %w", h.Len, len(p), ErrMessage)
	}
	return h, p[HeaderSize:], nil
}

// Fixed payload sizes (docs/PROTOCOL.md).
const (
	HelloSize      = 8  // magic BE32, version BE16, reserved BE16
	HelloReplySize = 12 // status BE32, version BE16, LID BE16, max message BE32
	MapSize        = 16 // size BE64, align BE32, reserved BE32
	MapReplySize   = 16 // status BE32, reserved BE32, IOVA BE64
	UnmapSize      = 8  // IOVA BE64
	StatusSize     = 4  // status BE32
	RingSize       = 4  // qpn BE32
	ArmSize        = 8  // cqn BE32, arm word BE32
	EventSize      = 8  // type u8, reserved [3], object BE32
)

func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// ErrorPayload is an ERROR message's payload: status, then the reason.
func ErrorPayload(st Status, reason string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(st))
	return append(b, reason...)
}

// ParseStatus reads a status-first payload (replies and ERROR).
func ParseStatus(p []byte) (Status, string, error) {
	if len(p) < StatusSize {
		return 0, "", fmt.Errorf("%d-byte status payload: %w", len(p), ErrMessage)
	}
	return Status(be32(p)), string(p[StatusSize:]), nil
}
