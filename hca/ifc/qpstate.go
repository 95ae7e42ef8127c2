package ifc

import "fmt"

// QPState is a QP state (mlx5 MLX5_QP_STATE_* values).
type QPState uint8

// QP states.
const (
	StateRST  QPState = 0
	StateINIT QPState = 1
	StateRTR  QPState = 2
	StateRTS  QPState = 3
	StateSQE  QPState = 4
	StateSQD  QPState = 5
	StateERR  QPState = 6
)

func (s QPState) String() string {
	switch s {
	case StateRST:
		return "RST"
	case StateINIT:
		return "INIT"
	case StateRTR:
		return "RTR"
	case StateRTS:
		return "RTS"
	case StateSQE:
		return "SQE"
	case StateSQD:
		return "SQD"
	case StateERR:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}
