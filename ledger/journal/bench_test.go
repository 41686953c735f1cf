package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/alloctest"
	"github.com/strata-log/strata/vfs"
)

// BenchmarkAppend measures durable appends on the real disk (vfs.Default
// in b.TempDir) from 16 goroutines. "wait" goroutines append one record
// and wait for its ack (16 records outstanding); "window16" goroutines keep
// 16 each in flight (256 outstanding), as a bookie serving many ledgers
// does. Reports MB/s, records per sync group and the mean fdatasync time.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, inflight := range []int{1, 16} {
			name := fmt.Sprintf("%dKiB/16x%s", size>>10, map[int]string{1: "wait", 16: "window16"}[inflight])
			b.Run(name, func(b *testing.B) { benchAppend(b, size, 16, inflight) })
		}
	}
}

func benchAppend(b *testing.B, size, writers, inflight int) {
	var groups, records, syncNanos atomic.Int64
	j, err := Open(Options{
		Dir: filepath.Join(b.TempDir(), "journal"),
		OnGroupCommit: func(_, n int, d time.Duration) {
			groups.Add(1)
			records.Add(int64(n))
			syncNanos.Add(int64(d))
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := j.Replay(Position{}, func(Record, Location) error { return nil }); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := make(chan struct{}, inflight)
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				slots <- struct{}{}
				rec := Record{Type: TypeAdd, LedgerID: uint64(w), EntryID: uint64(i), Payload: payload}
				if err := j.Append(context.Background(), rec, func(_ Location, err error) {
					if err != nil {
						b.Error(err)
					}
					<-slots
				}); err != nil {
					b.Error(err)
					return
				}
			}
			for range inflight {
				slots <- struct{}{}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if g := groups.Load(); g > 0 {
		b.ReportMetric(float64(records.Load())/float64(g), "records/group")
		b.ReportMetric(float64(syncNanos.Load())/float64(g)/1e3, "µs/sync")
	}
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRawFdatasync is the disk's own cost, for comparison: append
// 64 KiB and fdatasync in a loop (bandwidth when every write is synced),
// and append a small record and fdatasync (the latency floor of an ack).
func BenchmarkRawFdatasync(b *testing.B) {
	for _, size := range []int{64 << 10, 128} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			f, err := vfs.Default().Create(filepath.Join(b.TempDir(), "raw"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGroupWrite compares the write path's CPU cost with direct I/O
// (the default) and through the page cache (BufferedWrites), on the real
// disk: each op is one record that makes a group of its own (one write and
// one fdatasync) of 1 or 4 MiB. Besides ns/op and B/s it reports the
// process CPU time (user+sys, getrusage) per GB written, and whether the
// file system took direct I/O.
func BenchmarkGroupWrite(b *testing.B) {
	for _, mode := range []string{"buffered", "direct"} {
		for _, size := range []int{1 << 20, 4 << 20} {
			b.Run(fmt.Sprintf("%s/%dMiB", mode, size>>20), func(b *testing.B) {
				benchGroupWrite(b, size, mode == "buffered")
			})
		}
	}
}

func benchGroupWrite(b *testing.B, groupBytes int, buffered bool) {
	j, err := Open(Options{Dir: filepath.Join(b.TempDir(), "journal"), BufferedWrites: buffered, MaxGroupBytes: 2 * int64(groupBytes)})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := j.Replay(Position{}, func(Record, Location) error { return nil }); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, groupBytes-RecordHeaderSize)
	for i := range payload {
		payload[i] = byte(i)
	}
	done := make(chan error, 1)
	b.SetBytes(int64(groupBytes))
	b.ResetTimer()
	before := alloctest.CPUTime(b)
	for i := 0; b.Loop(); i++ {
		rec := Record{Type: TypeAdd, LedgerID: 1, EntryID: uint64(i), Payload: payload}
		if err := j.Append(context.Background(), rec, func(_ Location, err error) { done <- err }); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	cpu := alloctest.CPUTime(b) - before
	b.StopTimer()
	b.ReportMetric(cpu.Seconds()/(float64(b.N)*float64(groupBytes)/1e9), "cpu-s/GB")
	b.ReportMetric(map[bool]float64{true: 1}[j.DirectIO()], "direct")
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
}
