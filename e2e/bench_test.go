package e2e

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
)

// BenchmarkMetad measures a three-member metad cluster on loopback with
// fsync on: puts/s and put latency at 1, 16 and 64 concurrent clients, and
// linearizable gets/s.
//
//	go test ./e2e -run '^$' -bench Metad -benchtime 5000x
func BenchmarkMetad(b *testing.B) {
	c := proctest.StartMetad(b, bins["metad"], 3)
	cl := newMetaClient(b, c)
	for _, conc := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("put/clients=%d", conc), func(b *testing.B) {
			runConcurrent(b, conc, func(ctx context.Context, i int64) error {
				_, err := cl.Put(ctx, fmt.Sprintf("/bench/%d", i%1000), []byte("0123456789abcdef0123456789abcdef"))
				return err
			})
		})
	}
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("get/clients=%d", conc), func(b *testing.B) {
			runConcurrent(b, conc, func(ctx context.Context, i int64) error {
				_, err := cl.Get(ctx, fmt.Sprintf("/bench/%d", i%1000))
				return err
			})
		})
	}
}

// runConcurrent spreads b.N calls of op over conc goroutines and reports
// ops/s and latency percentiles.
func runConcurrent(b *testing.B, conc int, op func(context.Context, int64) error) {
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	var failed atomic.Int64
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := op(ctx, i); err != nil {
					failed.Add(1)
					continue
				}
				lat[g] = append(lat[g], time.Since(t0))
			}
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d operations failed", n, b.N)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) float64 {
		return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
