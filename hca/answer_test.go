package hca

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/sq"
)

// Consecutive ACKs of one batch coalesce into the last, as on the wire;
// an ACK of an earlier PSN (a duplicate's), a READ's answer and a NAK are
// kept as they are, and an ACK after them starts again.
func TestAnswerCoalescesACKs(t *testing.T) {
	qp := &QP{}
	var s respState
	w := func(psn uint32, npkts int) *request {
		return &request{op: sq.OpRDMAWrite, psn: psn, npkts: npkts}
	}
	qp.answer(&s, w(10, 1), respACK, 0)
	qp.answer(&s, w(11, 3), respACK, 0)
	require.Equal(t, []response{{psn: 13}}, s.answers, "two WRITEs: one ACK of the second's last PSN")
	qp.answer(&s, w(5, 1), respACK, 0)
	require.Len(t, s.answers, 2, "a duplicate's ACK of an earlier PSN is kept")
	qp.answer(&s, &request{op: sq.OpRDMARead, psn: 14, npkts: 2}, respACK, 0)
	qp.answer(&s, w(16, 1), respACK, 0)
	qp.answer(&s, w(17, 1), respRNR, 3)
	qp.answer(&s, w(17, 1), respACK, 0)
	require.Equal(t, []response{{psn: 13}, {psn: 5}, {psn: 15, read: true}, {psn: 16}, {psn: 17, kind: respRNR, rnrDly: 3}, {psn: 17}}, s.answers)
}
