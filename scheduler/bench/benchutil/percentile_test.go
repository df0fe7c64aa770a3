package benchutil

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPercentiles(t *testing.T) {
	vs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	got := Percentiles(vs, 0.5, 0.9, 0.99, 1, 0.01)
	if diff := cmp.Diff([]float64{5, 9, 10, 10, 1}, got); diff != "" {
		t.Errorf("Percentiles (-want +got):\n%s", diff)
	}
	if vs[0] != 5 {
		t.Errorf("Percentiles reordered its input: %v", vs)
	}
	if got := Percentiles(nil, 0.5); !math.IsNaN(got[0]) {
		t.Errorf("Percentiles of none = %v, want NaN", got)
	}
}

func TestLatencyPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		// 1.0015 ms, 2.0015 ms, ...: kept to the microsecond.
		ds = append(ds, time.Duration(i)*time.Millisecond+1500*time.Nanosecond)
	}
	pct, n := LatencyPercentiles(ds)
	want := map[string]float64{"p50": 50.001, "p90": 90.001, "p99": 99.001, "max": 100.001}
	if n != 100 || !cmp.Equal(want, pct) {
		t.Errorf("LatencyPercentiles = %v, %d; want %v, 100", pct, n, want)
	}
	if pct, n := LatencyPercentiles(nil); pct != nil || n != 0 {
		t.Errorf("LatencyPercentiles(nil) = %v, %d; want nil, 0", pct, n)
	}
}
