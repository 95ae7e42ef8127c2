package verbs

import "github.com/hcasim/hcasim/cq"

// PeekSigErr returns the first SIG_ERR CQE waiting on q without consuming
// it (for tests of the CQE's bytes).
func PeekSigErr(q *CQ) (cq.SigFields, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for ci := q.ci; ; ci++ {
		e, ok := cq.Poll(q.buf, q.logSize, ci)
		if !ok {
			return cq.SigFields{}, false
		}
		if f := e.Fields(); f.Opcode == cq.OpSigErr {
			return f.Sig, true
		}
	}
}
