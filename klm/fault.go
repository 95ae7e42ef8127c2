package klm

import (
	"errors"
	"fmt"
)

// FaultKind is why an access through a key failed.
type FaultKind uint8

// Fault kinds.
const (
	FaultInvalid     FaultKind = iota // zero value: not a fault kind
	FaultBadIndex                     // the index names no mkey
	FaultVariant                      // the variant is not the mkey's current one
	FaultFree                         // the mkey is free (never registered or invalidated)
	FaultPD                           // the mkey belongs to another protection domain
	FaultAccess                       // the mkey (or an MTT entry) does not allow the access
	FaultRange                        // the range is outside the mkey or its translation
	FaultDepth                        // too many indirect keys on the way
	FaultCycle                        // an indirect key refers back to itself
	FaultUnmapped                     // the translation leads to unmapped memory
	FaultTranslation                  // the mkey's translation cannot be used (bad entry)
	FaultQP                           // the mkey (a type 2 memory window) is bound to another QP
)

var faultNames = [...]string{
	FaultInvalid:     "invalid",
	FaultBadIndex:    "bad index",
	FaultVariant:     "variant mismatch",
	FaultFree:        "free key",
	FaultPD:          "PD mismatch",
	FaultAccess:      "access denied",
	FaultRange:       "out of range",
	FaultDepth:       "indirection depth exceeded",
	FaultCycle:       "indirection cycle",
	FaultUnmapped:    "unmapped memory",
	FaultTranslation: "bad translation",
	FaultQP:          "bound to another QP",
}

func (k FaultKind) String() string {
	if int(k) < len(faultNames) {
		return faultNames[k]
	}
	return fmt.Sprintf("FaultKind(%d)", uint8(k))
}

// ErrFault matches every *Fault.
var ErrFault = errors.New("klm: access fault")

// Fault is a failed access: what went wrong, and where.
type Fault struct {
	Kind FaultKind
	// Key is the key being resolved when the access failed (an inner key
	// for indirect translations); Depth is how many indirect keys led to it.
	Key   Key
	Depth int
	// Addr and Len are the failing part of the access, in Key's address space.
	Addr, Len uint64
	// Need is the access asked for.
	Need Access
}

// Error describes the fault.
func (f *Fault) Error() string {
	return fmt.Sprintf("klm: %s: key %v addr %#x len %#x need %v (depth %d)", f.Kind, f.Key, f.Addr, f.Len, f.Need, f.Depth)
}

// Is makes every Fault match ErrFault.
func (f *Fault) Is(target error) bool { return target == ErrFault }
