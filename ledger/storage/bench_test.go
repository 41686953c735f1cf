package storage

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/vfs"
)

// BenchmarkAdd measures durable adds on the real disk (vfs.Default, Pebble
// on the OS) from 16 ledgers written concurrently, each with up to 32 adds
// in flight (a pipelining writer). It reports throughput (MB/s of payload),
// add latency (Add call to durable acknowledgement) and records per fsync
// group.
func BenchmarkAdd(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("entry=%dKiB", size>>10), func(b *testing.B) { benchmarkAdd(b, size) })
	}
}

func benchmarkAdd(b *testing.B, size int) {
	const ledgers, window = 16, 32
	s, err := Open(context.Background(), Options{
		FS:                 vfs.Default(),
		Dir:                b.TempDir(),
		DiskCheckInterval:  -1,
		GCInterval:         -1,
		CheckpointInterval: time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	latencies := make([]time.Duration, b.N)
	groups0, records0 := s.groups.Load(), s.groupRecords.Load()
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	for l := range ledgers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := make(chan struct{}, window)
			var pending sync.WaitGroup
			entry := uint64(0)
			for i := l; i < b.N; i += ledgers {
				slots <- struct{}{}
				pending.Add(1)
				start := time.Now()
				err := s.Add(context.Background(), uint64(l), entry, int64(entry)-1, payload, false, func(err error) {
					if err != nil {
						b.Error(err)
					}
					latencies[i] = time.Since(start)
					<-slots
					pending.Done()
				})
				if err != nil {
					b.Error(err)
					pending.Done()
					<-slots
				}
				entry++
			}
			pending.Wait()
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
	if groups := s.groups.Load() - groups0; groups > 0 {
		b.ReportMetric(float64(s.groupRecords.Load()-records0)/float64(groups), "records/fsync")
	}
	b.ReportMetric(0, "ns/op") // throughput and latency say more
}
