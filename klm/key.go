package klm

import (
	"fmt"
	"strconv"
	"strings"
)

// Key is a memory key (lkey or rkey): a 24-bit index into the mkey table
// and an 8-bit variant that the owner bumps on every re-registration, so
// that stale keys stop working.
//
//	31                       8 7        0
//	|         index           | variant |
//
// The zero Key (index 0) is never valid.
type Key uint32

// MakeKey returns the key with the given index and variant.
func MakeKey(index uint32, variant uint8) Key { return Key(index<<8 | uint32(variant)) }

// Index returns the key's table index.
func (k Key) Index() uint32 { return uint32(k) >> 8 }

// Variant returns the key's variant byte.
func (k Key) Variant() uint8 { return uint8(k) }

// IsValid reports whether the key can name an mkey (its index is not 0).
func (k Key) IsValid() bool { return k.Index() != 0 }

// String returns the key in hex, as 0x00001234.
func (k Key) String() string { return fmt.Sprintf("%#08x", uint32(k)) }

// ParseKey parses a key written in hex ("0x1203") or decimal.
func ParseKey(s string) (Key, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 0, 32)
	if err != nil {
		return 0, fmt.Errorf("parse key %q: %w", s, err)
	}
	return Key(v), nil
}

// MustParseKey is ParseKey for tests; it panics on a bad key.
func MustParseKey(s string) Key {
	k, err := ParseKey(s)
	if err != nil {
		panic(err)
	}
	return k
}

// ReservedLKey is the function's reserved lkey (mlx5 local_dma_lkey,
// QUERY_SPECIAL_CONTEXTS resd_lkey): physical (PA) access to all of the
// function's mapped memory with local rights, in any PD.
const ReservedLKey Key = 0x200

// TerminatorLKey (index 1, mlx5 MLX5_INVALID_LKEY 0x100) is never a key: in
// a receive WQE it ends the scatter list.
const TerminatorLKey Key = 0x100

// FirstIndex is the lowest index the table allocates; indices below it are
// reserved (index 1 is TerminatorLKey, index 2 ReservedLKey). Index 4, variant 0, would read as the
// repeat-block marker 0x400 in a KLM list, so it is never a key.
const FirstIndex = 8

// MaxIndex is the largest index a key holds (24 bits).
const MaxIndex = 1<<24 - 1

// Access is a set of mkey permissions, in the mlx5 permission-byte
// encoding (MLX5_PERM_*, the mkey context flags byte without its mode bits).
type Access uint8

// Permissions.
const (
	LocalRead   Access = 0x04 // LR
	LocalWrite  Access = 0x08 // LW
	RemoteRead  Access = 0x10 // RR
	RemoteWrite Access = 0x20 // RW
	Atomic      Access = 0x40 // A (remote atomic)

	// AccessMask has every permission bit.
	AccessMask = LocalRead | LocalWrite | RemoteRead | RemoteWrite | Atomic
)

// Remote reports whether a contains a remote permission.
func (a Access) Remote() bool { return a&(RemoteRead|RemoteWrite|Atomic) != 0 }

// Local returns a with each remote permission replaced by the local one it
// implies (remote read → local read; remote write and atomic → local write):
// what an inner key of an indirect key must allow.
func (a Access) Local() Access {
	l := a & (LocalRead | LocalWrite)
	if a&RemoteRead != 0 {
		l |= LocalRead
	}
	if a&(RemoteWrite|Atomic) != 0 {
		l |= LocalWrite
	}
	return l
}

// Valid reports whether an mkey may hold these permissions: the HCA
// refuses remote write or atomic without local write.
func (a Access) Valid() bool {
	return a&^AccessMask == 0 && (a&(RemoteWrite|Atomic) == 0 || a&LocalWrite != 0)
}

func (a Access) String() string {
	var b []string
	for _, p := range []struct {
		bit  Access
		name string
	}{{LocalRead, "LR"}, {LocalWrite, "LW"}, {RemoteRead, "RR"}, {RemoteWrite, "RW"}, {Atomic, "A"}} {
		if a&p.bit != 0 {
			b = append(b, p.name)
		}
	}
	if a&^AccessMask != 0 {
		b = append(b, fmt.Sprintf("%#x", uint8(a&^AccessMask)))
	}
	if len(b) == 0 {
		return "none"
	}
	return strings.Join(b, "|")
}

// AccessMode is an mkey's translation mode (mkey context access_mode).
type AccessMode uint8

// Access modes, with the mlx5 values.
const (
	ModePA  AccessMode = 0 // physical: the address is the IOVA
	ModeMTT AccessMode = 1 // page table of 8-byte entries
	ModeKLM AccessMode = 2 // KLMS: list of {bcount, key, va}, or a repeat block
	ModeKSM AccessMode = 3 // fixed-size indirect entries of 2^log_page_size bytes
)

func (m AccessMode) String() string {
	switch m {
	case ModePA:
		return "PA"
	case ModeMTT:
		return "MTT"
	case ModeKLM:
		return "KLM"
	case ModeKSM:
		return "KSM"
	}
	return fmt.Sprintf("AccessMode(%d)", uint8(m))
}
