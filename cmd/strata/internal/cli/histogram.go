package cli

import (
	"math"
	"math/bits"
	"time"
)

// Histogram counts non-negative values (latencies in nanoseconds) in
// log-linear buckets, like HdrHistogram: values below 128 exactly, larger
// ones in 64 buckets per power of two, so a reported percentile is at most
// 1/64 (1.6%) above the true one. It takes ~30 KiB whatever the number of
// samples. Not safe for concurrent use.
type Histogram struct {
	counts   [histogramBuckets]uint64
	count    uint64
	sum      float64
	min, max int64
}

const (
	histogramLinear  = 128 // values below are exact
	histogramSubBits = 6   // 64 buckets per power of two above
	histogramBuckets = histogramLinear + (63-7+1)<<histogramSubBits
)

func histogramIndex(v int64) int {
	if v < histogramLinear {
		return int(v)
	}
	k := bits.Len64(uint64(v)) - 1 // 2^k <= v < 2^(k+1), k >= 7
	shift := k - histogramSubBits
	sub := int(v>>shift) - 1<<histogramSubBits // 0..63
	return histogramLinear + (k-7)<<histogramSubBits + sub
}

// histogramUpper is the largest value that falls in bucket i.
func histogramUpper(i int) int64 {
	if i < histogramLinear {
		return int64(i)
	}
	j := i - histogramLinear
	k := j>>histogramSubBits + 7
	sub := int64(j&(1<<histogramSubBits-1)) + 1<<histogramSubBits
	shift := k - histogramSubBits
	return (sub+1)<<shift - 1
}

// Record adds v (negative values count as 0).
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[histogramIndex(v)]++
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.count++
	h.sum += float64(v)
}

// RecordDuration adds d in nanoseconds.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Merge adds every sample of o.
func (h *Histogram) Merge(o *Histogram) {
	if o.count == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.count += o.count
	h.sum += o.sum
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 { return h.count }

// Max is the largest sample (0 when empty).
func (h *Histogram) Max() int64 { return h.max }

// Min is the smallest sample (0 when empty).
func (h *Histogram) Min() int64 { return h.min }

// Mean is the average sample (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / float64(h.count)
}

// Quantile returns the value at quantile q (0..1): the smallest bucket
// bound with at least q of the samples at or below it, never above Max.
// 0 when empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.count == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	target := uint64(math.Ceil(q * float64(h.count)))
	if target == 0 {
		target = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= target {
			return min(max(histogramUpper(i), h.min), h.max)
		}
	}
	return h.max
}
