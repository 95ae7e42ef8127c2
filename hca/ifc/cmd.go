package ifc

import (
	"encoding/binary"
	"fmt"
)

// Command opcodes (mlx5 MLX5_CMD_OP_*).
const (
	CmdQueryHCACap = 0x100
	CmdCreateMkey  = 0x200
	CmdQueryMkey   = 0x201
	CmdDestroyMkey = 0x202
	CmdCreateCQ    = 0x400
	CmdDestroyCQ   = 0x401
	CmdModifyCQ    = 0x402 // resize only (mlx5's MODIFY_CQ with op_mod RESIZE)
	CmdCreateQP    = 0x500
	CmdDestroyQP   = 0x501
	CmdRST2INIT    = 0x502
	CmdINIT2RTR    = 0x503
	CmdRTR2RTS     = 0x504
	CmdRTS2RTS     = 0x505
	CmdSQERR2RTS   = 0x506
	Cmd2ERR        = 0x507
	Cmd2RST        = 0x50A
	CmdQueryQP     = 0x50B
	CmdSQD2RTS     = 0x50C
	CmdRTS2SQD     = 0x50D // the gap in mlx5's numbering; the Linux driver has no RTS→SQD command
	CmdINIT2INIT   = 0x50E
	CmdCreatePSV   = 0x600
	CmdDestroyPSV  = 0x601
	CmdCreateSRQ   = 0x700
	CmdDestroySRQ  = 0x701
	CmdQuerySRQ    = 0x702
	CmdArmRQ       = 0x703 // arms an SRQ's limit (mlx5's ARM_RQ with op_mod SRQ)
	CmdAllocPD     = 0x800
	CmdDeallocPD   = 0x801
	CmdAllocXRCD   = 0x80E // output: the XRC domain at 8 (XRCDOff)
	CmdDeallocXRCD = 0x80F // input: the XRC domain at 8
	// CmdCreateFlow attaches a steering rule to a raw packet QP (the
	// model's layout, FlowIn*; mlx5's SET_FLOW_TABLE_ENTRY opcode);
	// output: the flow at 8. CmdDestroyFlow takes it at 8 (mlx5's
	// DELETE_FLOW_TABLE_ENTRY opcode).
	CmdCreateFlow  = 0x936
	CmdDestroyFlow = 0x938
	// CmdQueryPortCounters reads the port's counters (PortCounters, in
	// field order, BE64 each from byte 8): mlx5's QUERY_VPORT_COUNTER
	// opcode with the model's own layout.
	CmdQueryPortCounters = 0x770
	// CmdQueryUsage reads what the whole device holds (Usage, in field
	// order, BE64 each from byte 8): the model's own command, in the
	// counters' opcode range.
	CmdQueryUsage = 0x772
)

// Status is a command's completion status (the output mailbox's first byte).
type Status uint8

// Command statuses (mlx5 MLX5_CMD_STAT_*).
const (
	StatusOK          Status = 0x00
	StatusIntErr      Status = 0x01
	StatusBadOp       Status = 0x02
	StatusBadParam    Status = 0x03
	StatusBadSysState Status = 0x04
	StatusBadResource Status = 0x05
	StatusResBusy     Status = 0x06
	StatusExceedLim   Status = 0x08
	StatusBadResState Status = 0x09
	StatusBadIndex    Status = 0x0A
	StatusNoResources Status = 0x0F
	StatusBadInputLen Status = 0x10
	StatusBadOutLen   Status = 0x11
	StatusBadQPState  Status = 0x40
	StatusBadPkt      Status = 0x41
	StatusBadSize     Status = 0x42
)

var statusNames = map[Status]string{
	StatusOK: "OK", StatusIntErr: "INT_ERR", StatusBadOp: "BAD_OP", StatusBadParam: "BAD_PARAM",
	StatusBadSysState: "BAD_SYS_STATE", StatusBadResource: "BAD_RESOURCE", StatusResBusy: "RESOURCE_BUSY",
	StatusExceedLim: "EXCEED_LIM", StatusBadResState: "BAD_RES_STATE", StatusBadIndex: "BAD_INDEX",
	StatusNoResources: "NO_RESOURCES", StatusBadInputLen: "BAD_INPUT_LEN", StatusBadOutLen: "BAD_OUTPUT_LEN",
	StatusBadQPState: "BAD_QP_STATE", StatusBadPkt: "BAD_PKT", StatusBadSize: "BAD_SIZE",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Status(%#02x)", uint8(s))
}

// Mailbox header sizes: every input starts with opcode (BE16), uid
// (BE16), reserved (BE16), op_mod (BE16); every output with status (u8),
// 3 reserved bytes and a syndrome (BE32).
const (
	InHeaderSize  = 8
	OutHeaderSize = 8
)

// CmdError is a command that failed: its status and syndrome.
type CmdError struct {
	Opcode   uint16
	Status   Status
	Syndrome uint32
	Msg      string
}

// Error describes the failure.
func (e *CmdError) Error() string {
	return fmt.Sprintf("command %#x: %v (syndrome %#x): %s", e.Opcode, e.Status, e.Syndrome, e.Msg)
}

// In is an input mailbox being built or read: big-endian fields at byte
// offsets, bounds-checked (reads past the end give 0, as a short mailbox
// is checked against each command's length first).
type In []byte

// NewIn returns an input mailbox of n bytes for opcode.
func NewIn(opcode uint16, n int) In {
	b := make(In, max(n, InHeaderSize))
	binary.BigEndian.PutUint16(b, opcode)
	return b
}

// Opcode returns the mailbox's opcode.
func (b In) Opcode() uint16 {
	if len(b) < 2 {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}

// U8, U16, U32 and U64 read big-endian fields.
func (b In) U8(off int) uint8 {
	if off < 0 || off+1 > len(b) {
		return 0
	}
	return b[off]
}

// U16 reads a big-endian 16-bit field.
func (b In) U16(off int) uint16 {
	if off < 0 || off+2 > len(b) {
		return 0
	}
	return binary.BigEndian.Uint16(b[off:])
}

// U32 reads a big-endian 32-bit field.
func (b In) U32(off int) uint32 {
	if off < 0 || off+4 > len(b) {
		return 0
	}
	return binary.BigEndian.Uint32(b[off:])
}

// U64 reads a big-endian 64-bit field.
func (b In) U64(off int) uint64 {
	if off < 0 || off+8 > len(b) {
		return 0
	}
	return binary.BigEndian.Uint64(b[off:])
}

// Put8, Put16, Put32 and Put64 write big-endian fields.
func (b In) Put8(off int, v uint8) In { b[off] = v; return b }

// Put16 writes a big-endian 16-bit field.
func (b In) Put16(off int, v uint16) In { binary.BigEndian.PutUint16(b[off:], v); return b }

// Put32 writes a big-endian 32-bit field.
func (b In) Put32(off int, v uint32) In { binary.BigEndian.PutUint32(b[off:], v); return b }

// Put64 writes a big-endian 64-bit field.
func (b In) Put64(off int, v uint64) In { binary.BigEndian.PutUint64(b[off:], v); return b }

// Out is an output mailbox.
type Out []byte

// Status returns the command status.
func (b Out) Status() Status {
	if len(b) < OutHeaderSize {
		return StatusBadOutLen
	}
	return Status(b[0])
}

// Syndrome returns the command syndrome.
func (b Out) Syndrome() uint32 { return In(b).U32(4) }

// U32 reads a big-endian 32-bit field of the output.
func (b Out) U32(off int) uint32 { return In(b).U32(off) }

// U64 reads a big-endian 64-bit field of the output.
func (b Out) U64(off int) uint64 { return In(b).U64(off) }

// Err returns the output's failure as a *CmdError, or nil.
func (b Out) Err(opcode uint16) error {
	if b.Status() == StatusOK {
		return nil
	}
	msg := ""
	if len(b) > OutHeaderSize {
		msg = string(b[OutHeaderSize:])
	}
	return &CmdError{Opcode: opcode, Status: b.Status(), Syndrome: b.Syndrome(), Msg: msg}
}

// FailOut returns a failed output mailbox with a status, a syndrome and a
// reason: what a transport returns for a command it could not deliver.
func FailOut(st Status, syndrome uint32, reason string) Out {
	b := make(Out, OutHeaderSize+len(reason))
	b[0] = uint8(st)
	binary.BigEndian.PutUint32(b[4:], syndrome)
	copy(b[OutHeaderSize:], reason)
	return b
}
