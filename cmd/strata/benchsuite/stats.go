package benchsuite

import (
	"math"
	"slices"
	"time"
)

// Quantile returns the nearest-rank q-quantile (0 < q <= 1) of samples,
// which it sorts in place; 0 when there are none (B3).
func Quantile(samples []time.Duration, q float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	if !slices.IsSorted(samples) {
		slices.Sort(samples)
	}
	rank := int(math.Ceil(q * float64(len(samples))))
	rank = min(max(rank, 1), len(samples))
	return samples[rank-1]
}

// Millis is d in milliseconds, for the report.
func Millis(d time.Duration) float64 { return float64(d) / 1e6 }
