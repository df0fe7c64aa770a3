package benchutil

import (
	"math"
	"slices"
	"time"
)

// Percentiles is the nearest-rank percentile of vs at each of qs
// (0 < q <= 1), in the order of qs; vs is left as it is. It is NaN at
// every q when vs is empty.
func Percentiles(vs []float64, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if len(vs) == 0 {
		for i := range out {
			out[i] = math.NaN()
		}
		return out
	}
	sorted := slices.Clone(vs)
	slices.Sort(sorted)
	for i, q := range qs {
		rank := int(math.Ceil(q*float64(len(sorted)))) - 1
		out[i] = sorted[max(rank, 0)]
	}
	return out
}

// LatencyPercentiles is the p50, p90, p99 and highest (nearest rank) of
// ds, in milliseconds to the microsecond, keyed "p50", "p90", "p99" and
// "max", and how many there were: nil and 0 for none.
func LatencyPercentiles(ds []time.Duration) (pct map[string]float64, n int) {
	if len(ds) == 0 {
		return nil, 0
	}
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d.Microseconds()) / 1000
	}
	p := Percentiles(ms, 0.50, 0.90, 0.99, 1)
	return map[string]float64{"p50": p[0], "p90": p[1], "p99": p[2], "max": p[3]}, len(ds)
}
