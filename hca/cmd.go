package hca

import (
	"fmt"

	"github.com/hcasim/hcasim/hca/ifc"
)

// okOut returns a successful output of n bytes.
func okOut(n int) ifc.Out { return make(ifc.Out, max(n, ifc.OutHeaderSize)) }

// failOut returns a failed output: status, syndrome, and the reason as text
// after the header (the device's log line; drivers may show it).
func failOut(st ifc.Status, syndrome uint32, format string, args ...any) ifc.Out {
	return ifc.FailOut(st, syndrome, fmt.Sprintf(format, args...))
}
