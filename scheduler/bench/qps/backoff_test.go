package qps

// No build tag: backoffBefore, which BenchmarkPreemptionVictimDeleteFaults
// reports against, is tested with the rest of the repository.

import (
	"testing"
	"time"
)

// backoffBefore is the cumulative backoff of a preemptor that fails from
// its first attempt until at least end: 1s, 2s, 4s, 8s, then 10s a retry.
func backoffBefore(first, end time.Time) time.Duration {
	var total time.Duration
	for step := time.Second; first.Add(total).Before(end); step = min(2*step, 10*time.Second) {
		total += step
	}
	return total
}

func TestBackoffBefore(t *testing.T) {
	first := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		faultFor time.Duration
		want     time.Duration
	}{
		{0, 0},                                // no fault: no backoff
		{500 * time.Millisecond, time.Second}, // the first retry comes after the fault
		{time.Second, time.Second},            // ... exactly at its end
		{2 * time.Second, 3 * time.Second},    // 1s, 2s
		{10 * time.Second, 15 * time.Second},  // 1s, 2s, 4s, 8s
		{16 * time.Second, 25 * time.Second},  // then 10s each
		{30 * time.Second, 35 * time.Second},  // 15, 25, 35
	} {
		if got := backoffBefore(first, first.Add(tc.faultFor)); got != tc.want {
			t.Errorf("backoffBefore(fault of %v) = %v, want %v", tc.faultFor, got, tc.want)
		}
	}
}
