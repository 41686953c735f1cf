package tiering

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/strata-log/strata/internal/miniotest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/diskcache"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/s3"
	"github.com/strata-log/strata/tiering/segfile"
	"github.com/strata-log/strata/vfs"
)

// TestCatchUpThroughput is the cold catch-up benchmark: it
// puts STRATA_TIER_CATCHUP_MIB MiB of segment objects in a real MinIO,
// reads them with plain sequential GETs, then reads them cold through a
// Reader the way a broker's fetches do (one consumer, 1 MiB fetches, each
// from the offset after the last batch returned), and reports both rates,
// their ratio and the CPU seconds of this process and of MinIO. It runs
// only when the variable is set (not in `make test`):
//
//	STRATA_TIER_CATCHUP_MIB=1024 go test -run TestCatchUpThroughput -v ./tiering/
//
// STRATA_TIER_CATCHUP_PROFILE=DIR writes a CPU profile of the cold reads
// to DIR/catchup.pprof; STRATA_TIER_CATCHUP_ROUNDS (default 2) repeats
// both measurements, alternating, and the best of each is compared.
// STRATA_TIER_CATCHUP_WARM=1 uses one Reader for all rounds, each round
// reading objects of its own (a broker in service rather than one just
// started: the chunks are cold, the process's memory is not).
// STRATA_TIER_CATCHUP_DISK=1 also gives the Reader an on-disk chunk cache
// (cold: empty) and then reads once more from it (memory cache empty).
// STRATA_TIER_CATCHUP_AUTH=1 writes the objects authenticated (segfile
// format version 2, as brokers do), so that the cold reads include
// checking every block against its tag.
func TestCatchUpThroughput(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("STRATA_TIER_CATCHUP_MIB"))
	if mib <= 0 {
		t.Skip("set STRATA_TIER_CATCHUP_MIB to run the catch-up benchmark")
	}
	rounds := 2
	if n, err := strconv.Atoi(os.Getenv("STRATA_TIER_CATCHUP_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	srv := miniotest.Start(t)
	raw, err := s3.New(s3.Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Insecure: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	st, err := objstore.WithPrefix(raw, "catchup")
	if err != nil {
		t.Fatal(err)
	}
	// Warm: one Reader for every round, each round reading objects of its
	// own (its chunks are cold, the process's memory is not): a broker in
	// service, not one just started.
	warm := os.Getenv("STRATA_TIER_CATCHUP_WARM") != ""
	sets := make([][]SegmentRef, 1, rounds)
	sets[0] = putCatchUpSegments(t, st, "r0", int64(mib)<<20, 64<<20)
	for round := 1; warm && round < rounds; round++ {
		sets = append(sets, putCatchUpSegments(t, st, fmt.Sprintf("r%d", round), int64(mib)<<20, 64<<20))
	}
	segs := sets[0]
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	var shared *Reader
	sharedMetrics := NewMetrics(nil)
	if warm {
		shared = NewReader(st, catchUpConfig(), sharedMetrics)
		defer shared.Close()
	}
	minioPID := childPID(t, "minio")
	t.Logf("%d objects, %.0f MiB, GOMAXPROCS=%d, NumCPU=%d", len(segs), float64(total)/(1<<20), runtime.GOMAXPROCS(0), runtime.NumCPU())

	plainBest, coldBest := measurement{}, measurement{}
	for round := range rounds {
		if warm {
			segs = sets[round]
		}
		p := measure(minioPID, total, func() { plainGet(t, st, segs) })
		t.Logf("round %d plain GET: %s", round, p)
		plainBest = best(plainBest, p)

		profile := round == rounds-1 && os.Getenv("STRATA_TIER_CATCHUP_PROFILE") != ""
		if profile {
			f, err := os.Create(filepath.Join(os.Getenv("STRATA_TIER_CATCHUP_PROFILE"), "catchup.pprof"))
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				t.Fatal(err)
			}
			defer f.Close()
		}
		m := NewMetrics(nil)
		c := measure(minioPID, total, func() {
			if warm {
				consume(t, shared, segs)
				return
			}
			r := NewReader(st, catchUpConfig(), m)
			defer r.Close()
			consume(t, r, segs)
		})
		if warm {
			m = sharedMetrics
		}
		t.Logf("round %d: %v GETs, %.0f MiB, %.1f ms per GET; chunk cache %v hits, %v misses", round,
			value(t, m.RemoteReads), value(t, m.RemoteReadBytes)/(1<<20), 1000*histSum(t, m.RemoteReadDuration)/value(t, m.RemoteReads),
			value(t, m.ChunkCacheHits), value(t, m.ChunkCacheMisses))
		if profile {
			pprof.StopCPUProfile()
		}
		t.Logf("round %d cold Reader: %s", round, c)
		coldBest = best(coldBest, c)
	}
	t.Logf("RESULT plain GET %.1f MB/s, cold Reader %.1f MB/s, ratio %.0f%% (best of %d; CPU s per GiB: plain %.2f+%.2f minio, cold %.2f+%.2f minio)",
		plainBest.mbps(), coldBest.mbps(), 100*coldBest.mbps()/plainBest.mbps(), rounds,
		plainBest.perGiB(plainBest.cpu), plainBest.perGiB(plainBest.minioCPU),
		coldBest.perGiB(coldBest.cpu), coldBest.perGiB(coldBest.minioCPU))

	if os.Getenv("STRATA_TIER_CATCHUP_DISK") != "" {
		dc, err := diskcache.Open(vfs.Default(), diskcache.Config{Dir: t.TempDir(), CapBytes: 2 * total}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var r *Reader
		c := measure(minioPID, total, func() {
			r = NewReader(st, ReaderConfig{DiskCache: dc, Key: tierKey}, nil)
			consume(t, r, segs)
		})
		t.Logf("cold Reader, writing the disk cache: %s (%.0f%% of plain)", c, 100*c.mbps()/plainBest.mbps())
		testwait.Until(t, time.Minute, "the disk writer to be idle", func() bool { return r.pendingSpills.Load() == 0 })
		r.Close()
		t.Logf("disk cache: %d chunks, %.0f MiB", dc.Len(), float64(dc.Bytes())/(1<<20))
		w := measure(minioPID, total, func() {
			r := NewReader(st, ReaderConfig{DiskCache: dc, Key: tierKey}, nil)
			defer r.Close()
			consume(t, r, segs)
		})
		t.Logf("Reader from the disk cache (memory cold): %s (%.0f%% of plain)", w, 100*w.mbps()/plainBest.mbps())
	}
}

// putCatchUpSegments writes about total bytes as segments of about
// segBytes, of 16 KiB batches of 100 records (dense offsets).
func putCatchUpSegments(t *testing.T, st objstore.Store, set string, total, segBytes int64) []SegmentRef {
	t.Helper()
	rng := rand.New(rand.NewSource(1))
	recs := make([]recordbatch.Record, 100)
	for i := range recs {
		v := make([]byte, 150)
		rng.Read(v)
		recs[i] = recordbatch.Record{TimestampMs: int64(1_700_000_000_000 + i), Key: []byte("key"), Value: v}
	}
	tmpl, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	var refs []SegmentRef
	next := int64(0)
	auth := os.Getenv("STRATA_TIER_CATCHUP_AUTH") != ""
	for written := int64(0); written < total; {
		var buf bytes.Buffer
		key := fmt.Sprintf("t/catchup/%s/%020d.seg", set, next)
		opts := segfile.Options{BaseOffset: next}
		if auth {
			opts.Key, opts.Name = tierKey, key
		}
		w, err := segfile.NewWriter(&buf, opts)
		if err != nil {
			t.Fatal(err)
		}
		for n := int64(0); n < min(segBytes, total-written); n += int64(len(tmpl)) {
			b := bytes.Clone(tmpl)
			recordbatch.SetBaseOffset(b, next)
			if err := w.Append(b); err != nil {
				t.Fatal(err)
			}
			next += int64(len(recs))
		}
		sum, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Put(context.Background(), key, bytes.NewReader(buf.Bytes()), int64(buf.Len()), nil); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, SegmentRef{Key: key, Size: sum.Size, IndexPos: sum.IndexPos, BaseOffset: sum.BaseOffset, LastOffset: sum.LastOffset,
			Authenticated: sum.Authenticated})
		written += sum.Size
	}
	return refs
}

// plainGet reads every object whole, one GET each, in order.
func plainGet(t *testing.T, st objstore.Store, segs []SegmentRef) {
	for _, s := range segs {
		body, err := st.GetRange(context.Background(), s.Key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, body)
		body.Close()
		if err != nil || n != s.Size {
			t.Fatalf("%s: %d bytes, %v", s.Key, n, err)
		}
	}
}

// consume reads every segment from its base offset to its end in 1 MiB
// fetches, as one consumer catching up does.
func consume(t *testing.T, r *Reader, segs []SegmentRef) {
	for _, s := range segs {
		for off := s.BaseOffset; off <= s.LastOffset; {
			got, err := r.Fetch(context.Background(), s, off, 1<<20)
			if err != nil || len(got) == 0 {
				t.Fatalf("%s at %d: %d bytes, %v", s.Key, off, len(got), err)
			}
			last, err := lastOffsetOf(got)
			if err != nil {
				t.Fatal(err)
			}
			off = last + 1
		}
	}
}

// lastOffsetOf is the last offset of the last of the batches in b.
func lastOffsetOf(b []byte) (int64, error) {
	last := int64(-1)
	for len(b) > 0 {
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			return 0, err
		}
		last = h.LastOffset()
		b = b[h.Size():]
	}
	return last, nil
}

// measurement is one timed read of total bytes.
type measurement struct {
	bytes         int64
	wall          time.Duration
	cpu, minioCPU time.Duration
	faults        int64 // minor page faults of this process
}

func (m measurement) mbps() float64 {
	if m.wall == 0 {
		return 0
	}
	return float64(m.bytes) / 1e6 / m.wall.Seconds()
}

func (m measurement) perGiB(d time.Duration) float64 {
	return d.Seconds() / (float64(m.bytes) / (1 << 30))
}

func (m measurement) String() string {
	return fmt.Sprintf("%.1f MB/s in %v, CPU %.2fs (this process, %d page faults) + %.2fs (minio)",
		m.mbps(), m.wall.Round(time.Millisecond), m.cpu.Seconds(), m.faults, m.minioCPU.Seconds())
}

func best(a, b measurement) measurement {
	if b.mbps() > a.mbps() {
		return b
	}
	return a
}

// measure runs fn and reports its wall time and the CPU time this
// process and MinIO spent meanwhile.
func measure(minioPID int, total int64, fn func()) measurement {
	runtime.GC()
	c0, f0 := selfCPU()
	m0 := procCPU(minioPID)
	start := time.Now()
	fn()
	wall := time.Since(start)
	c1, f1 := selfCPU()
	return measurement{bytes: total, wall: wall, cpu: c1 - c0, minioCPU: procCPU(minioPID) - m0, faults: f1 - f0}
}

// selfCPU is this process's CPU time and minor page faults so far.
func selfCPU() (time.Duration, int64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Minflt
}

// procCPU is a process's user+system CPU time from /proc (0 if unknown).
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start after ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// childPID finds this process's child named comm (0 if none).
func childPID(t *testing.T, comm string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(s[close+1:])
		if len(f) > 1 && s[open+1:close] == comm && f[1] == strconv.Itoa(os.Getpid()) {
			return pid
		}
	}
	t.Logf("no child process %q: its CPU is not measured", comm)
	return 0
}

// histSum is a histogram's sum of observations.
func histSum(t *testing.T, h prometheus.Histogram) float64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.Histogram.GetSampleSum()
}

// catchUpConfig is the Reader's configuration: the broker's defaults
// with the tests' tier key, but STRATA_TIER_CATCHUP_CACHE_MIB, _CHUNK_MIB and _READAHEAD override
// the memory cache, the chunk size and the read-ahead.
func catchUpConfig() ReaderConfig {
	c := ReaderConfig{Key: tierKey}
	if n, err := strconv.Atoi(os.Getenv("STRATA_TIER_CATCHUP_CACHE_MIB")); err == nil {
		c.CacheBytes = int64(n) << 20
	}
	if n, err := strconv.Atoi(os.Getenv("STRATA_TIER_CATCHUP_CHUNK_MIB")); err == nil {
		c.ChunkBytes = int64(n) << 20
	}
	if n, err := strconv.Atoi(os.Getenv("STRATA_TIER_CATCHUP_READAHEAD")); err == nil {
		c.ReadAhead = n
	}
	return c
}
