package ifc

import "fmt"

// EventType is the type of an event queue entry (mlx5 EQE types).
type EventType uint8

// Event types.
const (
	EventCompletion EventType = 0x00 // a CQ armed for it got a completion
	EventPathMig    EventType = 0x01
	EventQPFatal    EventType = 0x05 // local work queue catastrophic error
	EventSQDrained  EventType = 0x03 // a QP in SQD has no outstanding send WQEs
	EventCQError    EventType = 0x04 // CQ overflow
	EventLastWQE    EventType = 0x13 // a QP attached to an SRQ went to ERR: it takes no more of the SRQ's WQEs
	EventSRQLimit   EventType = 0x14 // an SRQ's WQEs fell below its armed limit (Obj is the SRQN)
)

func (t EventType) String() string {
	switch t {
	case EventCompletion:
		return "COMPLETION"
	case EventQPFatal:
		return "QP_FATAL"
	case EventSQDrained:
		return "SQ_DRAINED"
	case EventCQError:
		return "CQ_ERROR"
	case EventLastWQE:
		return "SRQ_LAST_WQE"
	case EventSRQLimit:
		return "SRQ_RQ_LIMIT"
	}
	return fmt.Sprintf("EventType(%#x)", uint8(t))
}

// Event is one event queue entry: what happened, and to which object (a
// CQN for completion and CQ events, a QPN for QP events, an SRQN for SRQ
// events).
type Event struct {
	Type EventType
	Obj  uint32
}

// Function is the driver|device boundary: everything a driver may do to
// the device. *Func implements it in process; the socket transport
// implements it for other processes.
type Function interface {
	// Command executes one command mailbox and returns the output mailbox.
	Command(in []byte) []byte
	// AllocDMA returns n bytes of host memory, zeroed, that the device
	// reaches at the returned IOVA (aligned to align, a power of two).
	AllocDMA(n int, align int) (buf []byte, iova uint64, err error)
	// FreeDMA unmaps and releases memory AllocDMA returned.
	FreeDMA(iova uint64) error
	// RingSQ rings the send doorbell of a QP: the device reads the send
	// counter from the QP's doorbell record.
	RingSQ(qpn uint32)
	// RingRQ tells the device that receive WQEs were posted. mlx5 has no
	// receive doorbell (the device reads the doorbell record when a message
	// arrives); the model needs one to flush receives posted to a QP in
	// error. Drivers ring it after posting receives.
	RingRQ(qpn uint32)
	// ArmCQ rings a CQ's arm doorbell with the arm word (cq.ArmWord) the
	// driver also wrote to the CQ's doorbell record.
	ArmCQ(cqn uint32, word uint32)
	// Events returns the channel that signals pending events; Drain takes
	// them. The channel is signalled at least once after each new event.
	Events() <-chan struct{}
	// DrainEvents appends the pending events to evs and returns it.
	DrainEvents(evs []Event) []Event
	// Close releases the function: its QPs stop, its memory is unmapped.
	Close() error
}

// Opener is a device a driver can open a function of (in process: an
// *hca.Device).
type Opener interface {
	OpenFunction() (Function, error)
}
