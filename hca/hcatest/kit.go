package hcatest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca/verbs"
)

// The test-helper kit: waiting for completions, expecting none, and
// checking one, for the suite's scenarios and for any package's tests of
// a verbs device. Failures name what was checked and print the
// completions as FormatWC does.

// WaitFor is how long Poll waits for the completions it expects.
const WaitFor = waitFor

// Poll waits up to WaitFor for exactly n completions on c (more may
// follow) and returns them; it fails the test when they do not come.
func Poll(t testing.TB, c *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	return PollWithin(t, c, n, WaitFor)
}

// PollWithin is Poll with its own deadline, for completions that take
// longer than WaitFor to come (a retry count running out, a shutdown's
// grace period).
func PollWithin(t testing.TB, c *verbs.CQ, n int, d time.Duration) []verbs.WC {
	t.Helper()
	out, err := pollWithin(c, n, d)
	require.NoError(t, err)
	return out
}

// Poll1 waits for one completion and returns it.
func Poll1(t testing.TB, c *verbs.CQ) verbs.WC {
	t.Helper()
	return Poll(t, c, 1)[0]
}

// PollErr is Poll for goroutines other than the test's: it returns an
// error instead of failing the test.
func PollErr(c *verbs.CQ, n int) ([]verbs.WC, error) {
	return pollWithin(c, n, WaitFor)
}

func pollWithin(c *verbs.CQ, n int, d time.Duration) ([]verbs.WC, error) {
	out := make([]verbs.WC, 0, n)
	wcs := make([]verbs.WC, 16)
	deadline := time.Now().Add(d)
	idle := 0
	for len(out) < n {
		k, err := c.Poll(wcs[:min(len(wcs), n-len(out))])
		if err != nil {
			return out, fmt.Errorf("poll cq %d: %w", c.Handle(), err)
		}
		out = append(out, wcs[:k]...)
		if k > 0 {
			idle = 0
			continue
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("cq %d: %d of %d completions in %v: %s", c.Handle(), len(out), n, d, FormatWCs(out))
		}
		if idle++; idle > 100 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out, nil
}

// Quiet fails the test (and goes on) if c yields a completion within d.
func Quiet(t testing.TB, c *verbs.CQ, d time.Duration, what string) {
	t.Helper()
	wcs := make([]verbs.WC, 8)
	deadline := time.Now().Add(d)
	for {
		k, err := c.Poll(wcs)
		require.NoError(t, err, "%s: poll cq %d", what, c.Handle())
		if k > 0 {
			t.Errorf("%s: unexpected completions: %s", what, FormatWCs(wcs[:k]))
			return
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// FormatWCs formats work completions as FormatWC does, in brackets.
func FormatWCs(wcs []verbs.WC) string {
	var b bytes.Buffer
	for i, w := range wcs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(FormatWC(w))
	}
	return "[" + b.String() + "]"
}

// FormatWC formats a work completion with the fields that are defined
// for it: id, status, opcode, byte count, QP, and the immediate, the
// invalidated key and the vendor syndrome when present.
func FormatWC(w verbs.WC) string {
	s := fmt.Sprintf("{wr_id %#x %v %v len %d qpn %#x", w.WRID, w.Status, w.Opcode, w.ByteLen, w.QPN)
	if w.WithImm {
		s += fmt.Sprintf(" imm %#x", w.Imm)
	}
	if w.WithInv {
		s += fmt.Sprintf(" inv %#x", w.Imm)
	}
	if w.VendorErr != 0 {
		s += fmt.Sprintf(" vendor %#x", w.VendorErr)
	}
	return s + "}"
}

// AnyLen in a Want skips the byte count (undefined for the completion).
const AnyLen = -1

// Want is an expected successful completion.
type Want struct {
	WRID    uint64
	Op      verbs.WCOpcode
	Len     int // AnyLen: not checked
	Imm     uint32
	WithImm bool
	WithInv bool
	QPN     uint32 // 0: not checked
}

// Check compares a successful completion with w and ends the test on a
// mismatch: what it does next (comparing memory a peer may still be
// writing, after a failed transfer) means nothing then.
func Check(t testing.TB, what string, got verbs.WC, w Want) {
	t.Helper()
	ok := got.Status == verbs.WCSuccess && got.WRID == w.WRID && got.Opcode == w.Op &&
		(w.Len == AnyLen || got.ByteLen == uint32(w.Len)) &&
		got.WithImm == w.WithImm && got.WithInv == w.WithInv &&
		(!(w.WithImm || w.WithInv) || got.Imm == w.Imm) &&
		(w.QPN == 0 || got.QPN == w.QPN)
	if !ok {
		wl := "any"
		if w.Len != AnyLen {
			wl = fmt.Sprint(w.Len)
		}
		require.Failf(t, what, "got %s\nwant {wr_id %#x IBV_WC_SUCCESS %v len %s imm %#x (imm %v inv %v) qpn %#x}",
			FormatWC(got), w.WRID, w.Op, wl, w.Imm, w.WithImm, w.WithInv, w.QPN)
	}
}

// CheckErr compares an error completion with its id, status and QP (0:
// not checked) and ends the test on a mismatch; opcode and byte count
// are undefined for error completions.
func CheckErr(t testing.TB, what string, got verbs.WC, wrid uint64, st verbs.WCStatus, qpn uint32) {
	t.Helper()
	if got.WRID != wrid || got.Status != st || (qpn != 0 && got.QPN != qpn) {
		require.Failf(t, what, "got %s\nwant {wr_id %#x %v qpn %#x}", FormatWC(got), wrid, st, qpn)
	}
}
