package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/proto/bookiepb"
)

// BenchmarkBookie measures, in one run on the same disk: (a) the disk's raw
// sequential write bandwidth with one fdatasync per 64 KiB and a single
// small fdatasync's latency, and (b) a real bookie process's add throughput
// and latency over gRPC for 1 KiB and 64 KiB entries from 16 concurrent
// ledgers, and its latency at half the throughput it reached.
//
//	go test ./e2e -run '^$' -bench Bookie -benchtime 20000x
func BenchmarkBookie(b *testing.B) {
	meta := proctest.StartMetad(b, bins["metad"], 3)
	bk := proctest.StartBookie(b, bins["bookie"], meta, "b1")
	c := dialBookie(b, bk.Listen)

	b.Run("raw-fdatasync/64KiB", func(b *testing.B) { benchRawSync(b, 64<<10) })
	b.Run("raw-fdatasync/4KiB", func(b *testing.B) { benchRawSync(b, 4<<10) })
	ledger := uint64(1000)
	for _, size := range []int{1 << 10, 64 << 10} {
		var maxRate float64
		b.Run(fmt.Sprintf("add/%dKiB/16-ledgers", size>>10), func(b *testing.B) {
			ledger += 100
			maxRate = benchAdds(b, c, ledger, size, 0)
		})
		b.Run(fmt.Sprintf("add/%dKiB/16-ledgers/half-load", size>>10), func(b *testing.B) {
			ledger += 100
			benchAdds(b, c, ledger, size, maxRate/2)
		})
	}
	logMetrics(b, "http://"+bk.AdminAddr+"/metrics", "strata_bookie_journal_sync_latency_seconds", "strata_bookie_journal_group_bytes",
		"process_cpu_seconds_total")
}

// logMetrics prints the bookie's metrics with the given prefixes, for the
// numbers that explain a benchmark (fsync latency, group sizes, CPU).
func logMetrics(b *testing.B, url string, prefixes ...string) {
	resp, err := http.Get(url)
	if err != nil {
		b.Logf("metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				lines = append(lines, l)
			}
		}
	}
	b.Logf("bookie metrics:\n%s", strings.Join(lines, "\n"))
}

// benchRawSync writes size bytes and fdatasyncs, b.N times, in one file.
func benchRawSync(b *testing.B, size int) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, size)
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil { // fdatasync on Linux
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// benchAdds spreads b.N adds of size bytes over 16 ledgers, one pipelined
// stream each. With rate > 0 it is open-loop: adds are scheduled at a fixed
// total rate and latency counts from the scheduled time, so a stall cannot
// hide. It returns the entries/s reached.
func benchAdds(b *testing.B, c bookiepb.BookieClient, firstLedger uint64, size int, rate float64) float64 {
	const ledgers = 16
	window := 64
	if size >= 64<<10 {
		window = 8
	}
	payload := make([]byte, size)
	perLedger := (b.N + ledgers - 1) / ledgers
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, ledgers)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for l := 0; l < ledgers; l++ {
		wg.Add(1)
		go func(l int) {
			defer wg.Done()
			stream, err := c.AddEntries(ctx)
			if err != nil {
				errs <- err
				return
			}
			sem := make(chan struct{}, window)
			sentAt := make([]time.Time, perLedger)
			var local []time.Duration
			recvDone := make(chan error, 1)
			go func() {
				for n := 0; n < perLedger; n++ {
					resp, err := stream.Recv()
					if err != nil {
						recvDone <- err
						return
					}
					if resp.Status != bookiepb.AddStatus_ADD_OK {
						recvDone <- fmt.Errorf("add %d: %v %s", resp.EntryId, resp.Status, resp.Message)
						return
					}
					local = append(local, time.Since(sentAt[resp.RequestId]))
					<-sem
				}
				recvDone <- nil
			}()
			interval := time.Duration(0)
			if rate > 0 {
				interval = time.Duration(float64(time.Second) * ledgers / rate)
			}
			for n := 0; n < perLedger; n++ {
				scheduled := time.Now()
				if interval > 0 {
					scheduled = start.Add(time.Duration(n)*interval + time.Duration(l)*interval/ledgers)
					if d := time.Until(scheduled); d > 0 {
						time.Sleep(d) // open-loop pacing to the offered rate, not a wait
					}
				}
				sem <- struct{}{}
				sentAt[n] = scheduled
				if err := stream.Send(&bookiepb.AddRequest{RequestId: uint64(n), LedgerId: firstLedger + uint64(l),
					EntryId: uint64(n), Lac: int64(n) - 1, Payload: payload}); err != nil {
					errs <- err
					return
				}
			}
			if err := <-recvDone; err != nil {
				errs <- err
				return
			}
			_ = stream.CloseSend()
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}(l)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	entries := float64(perLedger * ledgers)
	reportLatency(b, lat)
	b.ReportMetric(entries/elapsed.Seconds(), "entries/s")
	return entries / elapsed.Seconds()
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
