package e2e

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgergrpc"
	"github.com/strata-log/strata/ledger/ledgermetad"
)

// BenchmarkLedger measures, in one run on one machine, appends through the
// quorum ledger writer (E=3 Qw=3 Qa=2, three bookie processes, metad for
// metadata) side by side with adds to a single bookie over its gRPC API
// (BenchmarkBookie's benchAdds), for 1 KiB and 64 KiB entries:
//
//   - single-bookie/SIZE: 16 ledgers, pipelined, as BenchmarkBookie;
//   - ledger/SIZE: one ledger writer, pipelined with as many entries in
//     flight as the single-bookie run has over its 16 streams;
//   - ledger/SIZE/load-20% and load-40%: the writer open-loop at 20% and
//     40% of the rate ledger/SIZE reached (moderate load); latency counts
//     from each append's scheduled time, so a stall cannot hide.
//
// Every sub-benchmark reports entries/s, MB/s, p50/p99 latency, and the
// CPU the processes used while it ran, in cores (CPU seconds per second
// of wall time): the bookies, the metad members, this process (the writer
// or the add client), and all of them. With everything on one machine the
// total, against runtime.NumCPU(), says how CPU-bound the run is;
// machine-cores is the whole machine's busy CPU, which shows when
// something else competed. Ledgers are deleted after each run (their
// space is not reclaimed until the bookies stop), and each run starts
// after sync(2).
//
//	go test ./e2e -run '^$' -bench Ledger -benchtime 3s
func BenchmarkLedger(b *testing.B) {
	meta := proctest.StartMetad(b, bins["metad"], 3)
	var nodes []*proctest.BookieNode
	for i := 1; i <= 3; i++ {
		// No space reclaimed from deleted ledgers during the run: its
		// I/O would land in whichever sub-benchmark runs at the time.
		nodes = append(nodes, proctest.StartBookie(b, bins["bookie"], meta, fmt.Sprintf("b%d", i), "--gc-interval", "1h"))
	}
	cl := newMetaClient(b, meta)
	bookies := ledgergrpc.New(ledgergrpc.Options{})
	b.Cleanup(func() { bookies.Close() })
	env := ledger.Env{Meta: ledgermetad.NewStore(cl), Bookies: bookies, Registry: ledgermetad.NewRegistry(cl)}
	cpu := &cpuMeter{procs: []cpuProcess{{group: "client", pid: os.Getpid()}}}
	for _, n := range nodes {
		cpu.procs = append(cpu.procs, cpuProcess{group: "bookies", pid: n.Pid()})
	}
	for _, m := range meta.Members {
		cpu.procs = append(cpu.procs, cpuProcess{group: "metad", pid: m.Pid()})
	}
	single := dialBookie(b, nodes[0].Listen)

	// Ledger ids of the single-bookie adds stay clear of the ids metad
	// hands out to the ledger writer's ledgers.
	bookieLedger := uint64(1_000_000)
	for _, size := range []int{1 << 10, 64 << 10} {
		name := fmt.Sprintf("%dKiB", size>>10)
		var singleRate, ledgerRate float64
		b.Run("single-bookie/"+name, func(b *testing.B) {
			bookieLedger += 100
			settleDisk()
			start := cpu.sample()
			singleRate = benchAdds(b, single, bookieLedger, size, 0)
			cpu.report(b, start)
		})
		b.Run("ledger/"+name, func(b *testing.B) {
			ledgerRate = benchLedgerAppends(b, env, cpu, size, 0)
		})
		for _, load := range []float64{0.2, 0.4} {
			b.Run(fmt.Sprintf("ledger/%s/load-%.0f%%", name, 100*load), func(b *testing.B) {
				benchLedgerAppends(b, env, cpu, size, load*ledgerRate)
			})
		}
		if singleRate > 0 {
			b.Logf("%s: ledger %.0f entries/s = %.0f%% of the single bookie's %.0f; its bookies took %d copies of each, "+
				"%.0f adds/s = %.0f%% of the single bookie's (%d CPUs for everything)", name, ledgerRate,
				100*ledgerRate/singleRate, singleRate, benchWriteQuorum, benchWriteQuorum*ledgerRate,
				100*benchWriteQuorum*ledgerRate/singleRate, runtime.NumCPU())
		}
	}
}

// benchWriteQuorum is the copies the benchmark's ledgers write of each
// entry: every entry costs the bookies that many adds.
const benchWriteQuorum = 3

// benchLedgerAppends creates a ledger (E=3 Qw=3 Qa=2) and appends b.N
// entries of size bytes through one writer. With rate 0 it keeps a fixed
// number of entries in flight (as many as benchAdds has over its 16
// streams) and latency is from Append to the acknowledgement. With rate > 0
// it is open-loop: entry i is appended at start + i/rate and latency counts
// from that scheduled time. It closes and deletes the ledger afterwards and
// returns the entries/s reached.
func benchLedgerAppends(b *testing.B, env ledger.Env, cpu *cpuMeter, size int, rate float64) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	settleDisk()
	w, err := ledger.Create(ctx, env, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: benchWriteQuorum, AckQuorum: 2})
	if err != nil {
		b.Fatal(err)
	}
	window := 16 * 64
	if size >= 64<<10 {
		window = 16 * 8
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	interval := time.Duration(0)
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	var (
		lat      = make([]time.Duration, b.N) // by entry id; each written once
		inFlight = make(chan struct{}, window)
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	b.SetBytes(int64(size))
	b.ResetTimer()
	cpuStart := cpu.sample()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		scheduled := time.Now()
		if interval > 0 {
			scheduled = start.Add(time.Duration(i) * interval)
			if d := time.Until(scheduled); d > 0 {
				time.Sleep(d) // open-loop pacing to the offered rate, not a wait
			}
		}
		inFlight <- struct{}{}
		wg.Add(1)
		err := w.Append(ctx, payload, func(id int64, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("entry %d: %w", id, err)
				}
				mu.Unlock()
			} else {
				lat[id] = time.Since(scheduled)
			}
			<-inFlight
			wg.Done()
		})
		if err != nil {
			b.Fatalf("append %d: %v", i, err)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu.report(b, cpuStart)
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	if err := ledger.Delete(ctx, env, w.ID()); err != nil {
		b.Fatal(err)
	}
	reportLatency(b, lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "entries/s")
	return float64(b.N) / elapsed.Seconds()
}

// settleDisk writes the page cache's dirty data back (sync(2)) before a
// sub-benchmark starts, so that the writeback of what the previous one
// wrote (gigabytes at 64 KiB) does not land in this one's fsyncs.
func settleDisk() { syscall.Sync() }

// cpuMeter reads the CPU time (user + system) of processes from
// /proc/PID/stat, grouped.
type cpuMeter struct {
	procs []cpuProcess
}

type cpuProcess struct {
	group string
	pid   int
}

// cpuSample is CPU seconds by group at a point in time, and the whole
// machine's busy CPU seconds.
type cpuSample struct {
	at      time.Time
	seconds map[string]float64
	machine float64
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

func (m *cpuMeter) sample() cpuSample {
	s := cpuSample{at: time.Now(), seconds: map[string]float64{}}
	for _, p := range m.procs {
		s.seconds[p.group] += processCPUSeconds(p.pid)
	}
	s.machine = machineBusySeconds()
	return s
}

// report reports the cores each group used since start, and their total.
func (m *cpuMeter) report(b *testing.B, start cpuSample) {
	end := m.sample()
	wall := end.at.Sub(start.at).Seconds()
	if wall <= 0 {
		return
	}
	total := 0.0
	for group, after := range end.seconds {
		cores := (after - start.seconds[group]) / wall
		total += cores
		b.ReportMetric(cores, group+"-cores")
	}
	b.ReportMetric(total, "total-cores")
	// Busy CPU of the whole machine: above total-cores when something
	// else (another test run, say) competed for the CPUs.
	b.ReportMetric((end.machine-start.machine)/wall, "machine-cores")
}

// machineBusySeconds is the CPU time all CPUs spent neither idle nor
// waiting for I/O, from /proc/stat's first line; 0 if unknown.
func machineBusySeconds() float64 {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0
	}
	busy := 0.0
	for i, f := range fields[1:] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0
		}
		// user nice system idle iowait irq softirq, then steal (other
		// VMs' time) and guest time (already counted in user and nice).
		if i != 3 && i != 4 && i < 7 {
			busy += v
		}
	}
	return busy / clockTicks
}

// processCPUSeconds is the user + system CPU time of pid, 0 if unknown.
func processCPUSeconds(pid int) float64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return (utime + stime) / clockTicks
}
