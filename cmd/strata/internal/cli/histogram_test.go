package cli

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHistogramBuckets(t *testing.T) {
	// Every value falls in a bucket whose upper bound is >= it and within
	// 1/64 of it, and bucket bounds increase.
	prev := int64(-1)
	for i := 0; i < histogramBuckets; i++ {
		u := histogramUpper(i)
		if u <= prev {
			t.Fatalf("bucket %d upper %d <= previous %d", i, u, prev)
		}
		prev = u
		if u > 1<<62 {
			break
		}
	}
	for _, v := range []int64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 123456789, 1<<62 + 12345} {
		i := histogramIndex(v)
		u := histogramUpper(i)
		if u < v || float64(u-v) > float64(v)/64+1 {
			t.Errorf("value %d: bucket %d upper %d", v, i, u)
		}
		if i > 0 && histogramUpper(i-1) >= v {
			t.Errorf("value %d: previous bucket %d upper %d holds it", v, i-1, histogramUpper(i-1))
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	if h.Quantile(0.99) != 0 || h.Max() != 0 {
		t.Fatal("empty histogram not zero")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	samples := make([]int64, 100000)
	for i := range samples {
		samples[i] = int64(rng.ExpFloat64() * 2e6) // ~2ms mean latencies in ns
	}
	half := len(samples) / 2
	var a, b Histogram
	for _, v := range samples[:half] {
		a.Record(v)
	}
	for _, v := range samples[half:] {
		b.Record(v)
	}
	h.Merge(&a)
	h.Merge(&b)
	slices.Sort(samples)
	if h.Count() != uint64(len(samples)) || h.Max() != samples[len(samples)-1] || h.Min() != samples[0] {
		t.Fatalf("count %d max %d min %d", h.Count(), h.Max(), h.Min())
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		exact := samples[int(q*float64(len(samples)-1))]
		got := h.Quantile(q)
		if float64(got) < float64(exact)*0.98 || float64(got) > float64(exact)*1.02+1 {
			t.Errorf("q%.3f = %d, exact %d", q, got, exact)
		}
	}
	var small Histogram
	for _, v := range []int64{5, 1, 3, -2} {
		small.Record(v)
	}
	if small.Quantile(0.5) != 1 || small.Quantile(0.75) != 3 || small.Quantile(1) != 5 || small.Min() != 0 {
		t.Fatalf("small: p50 %d p75 %d max %d min %d", small.Quantile(0.5), small.Quantile(0.75), small.Quantile(1), small.Min())
	}
}
