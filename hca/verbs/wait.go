package verbs

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// PollWait polls the CQ until wcs holds at least n work completions, or
// until ctx is done. It returns how many it got: n or more (up to
// len(wcs), as Poll fills what is there), or fewer with ctx's error
// wrapped (errors.Is(err, context.DeadlineExceeded) after a timeout:
// give it a context.WithTimeout). n must be 0 … len(wcs); with 0 it polls
// once.
//
// It polls, spinning briefly and then sleeping up to 100 µs between polls,
// and arms nothing: a CompChannel of the CQ sees no notification from it.
// Like Poll, it consumes signature error CQEs (no work completion; see
// MR.CheckMRStatus), and one poller at a time may use the CQ.
func (q *CQ) PollWait(ctx context.Context, wcs []WC, n int) (int, error) {
	if n < 0 || n > len(wcs) {
		return 0, fmt.Errorf("poll wait for %d completions into %d: %w", n, len(wcs), ErrInvalid)
	}
	got := 0
	sleep := time.Microsecond
	for spins := 0; ; spins++ {
		k, err := q.Poll(wcs[got:])
		got += k
		if err != nil {
			return got, err
		}
		if got >= n {
			return got, nil
		}
		if err := ctx.Err(); err != nil {
			return got, fmt.Errorf("poll cq %d: %d of %d completions: %w", q.cqn, got, n, err)
		}
		if k > 0 {
			spins, sleep = 0, time.Microsecond
		}
		if spins < 64 {
			runtime.Gosched()
			continue
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		sleep = min(2*sleep, 100*time.Microsecond)
	}
}
