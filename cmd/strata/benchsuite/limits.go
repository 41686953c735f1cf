package benchsuite

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/strata-log/strata/vfs"
)

// ProbeFileBytes bounds each probe journal's file: writes wrap around
// (B2). It is the journal's own preallocation step
// (journal.DefaultPreallocateBytes).
const ProbeFileBytes = 64 << 20

// DefaultGroupBytes are the group sizes the disk is probed at. The
// bookie journal (ledger/journal) has no linger: its writer takes
// everything queued, up to MaxGroupBytes (default 4 MiB), writes it with
// one write and makes it durable with one fdatasync. So the group size
// follows the load: a few KiB at 5,000 records/s, up to 4 MiB at the
// maximum. The probes span that range; a workload's ratio uses the probe
// nearest the mean group size its bookies reported (BandwidthAt).
var DefaultGroupBytes = []int{4 << 10, 64 << 10, 1 << 20, 4 << 20}

// DiskProbe is one disk measurement: Journals files written at once, each
// in groups of GroupBytes, each group followed by an fdatasync.
type DiskProbe struct {
	GroupBytes int `json:"group_bytes"`
	Journals   int `json:"journals"`
	Syncs      int `json:"syncs"`
	// SyncP50Ms and SyncP99Ms are fdatasync latencies (every journal's
	// samples together).
	SyncP50Ms float64 `json:"sync_p50_ms"`
	SyncP99Ms float64 `json:"sync_p99_ms"`
	// MBPerSec is the bytes of every journal over the probe's wall time
	// (combined bandwidth), in 10^6 bytes per second.
	MBPerSec float64 `json:"mb_per_sec"`
	Seconds  float64 `json:"seconds"`
	// Direct: written with O_DIRECT, as the journal's format 2 is (false
	// where the file system refuses it, as the journal then falls back).
	Direct bool `json:"direct"`
}

// DiskConfig says how to probe the disk.
type DiskConfig struct {
	Dir        string        // a directory on the file system to measure
	GroupBytes []int         // default DefaultGroupBytes
	Journals   []int         // default 1 and 3
	Duration   time.Duration // per probe; default 2s
}

// MeasureDisk runs a probe for every group size and journal count.
func MeasureDisk(ctx context.Context, cfg DiskConfig) ([]DiskProbe, error) {
	if len(cfg.GroupBytes) == 0 {
		cfg.GroupBytes = DefaultGroupBytes
	}
	if len(cfg.Journals) == 0 {
		cfg.Journals = []int{1, 3}
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 2 * time.Second
	}
	// A first, discarded probe: the first fdatasyncs on new files of a
	// quiet disk are slower (block allocation, caches) and would be
	// charged to the first group size.
	if _, err := ProbeDisk(ctx, cfg.Dir, cfg.GroupBytes[0], 1, cfg.Duration/2); err != nil {
		return nil, err
	}
	var out []DiskProbe
	for _, g := range cfg.GroupBytes {
		for _, j := range cfg.Journals {
			p, err := ProbeDisk(ctx, cfg.Dir, g, j, cfg.Duration)
			if err != nil {
				return out, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// ProbeDisk writes journals files in dir at once for d, each in groups of
// groupBytes followed by an fdatasync (B2), and removes them.
func ProbeDisk(ctx context.Context, dir string, groupBytes, journals int, d time.Duration) (DiskProbe, error) {
	if groupBytes <= 0 || groupBytes > ProbeFileBytes || journals <= 0 {
		return DiskProbe{}, fmt.Errorf("benchsuite: probe of %d journals of %d-byte groups: out of range", journals, groupBytes)
	}
	buf := vfs.AlignedBuffer(groupBytes)
	_, _ = rand.Read(buf) // incompressible
	files := make([]*os.File, journals)
	direct := true
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
				os.Remove(f.Name())
			}
		}
	}()
	for i := range files {
		f, d, err := openProbe(filepath.Join(dir, fmt.Sprintf("disk-probe-%d", i)), os.O_CREATE|os.O_RDWR|os.O_TRUNC)
		if err != nil {
			return DiskProbe{}, fmt.Errorf("benchsuite: %w", err)
		}
		files[i], direct = f, direct && d
		_ = reserve(f, ProbeFileBytes)
	}
	type result struct {
		syncs []time.Duration
		bytes int64
		err   error
	}
	results := make([]result, journals)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			var off int64
			for ctx.Err() == nil && time.Now().Before(end) {
				if off+int64(groupBytes) > ProbeFileBytes {
					off = 0
				}
				if _, err := f.WriteAt(buf, off); err != nil {
					r.err = err
					return
				}
				t := time.Now()
				if err := fdatasync(f); err != nil {
					r.err = err
					return
				}
				r.syncs = append(r.syncs, time.Since(t))
				off += int64(groupBytes)
				r.bytes += int64(groupBytes)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	var total int64
	var errs []error
	for _, r := range results {
		all = append(all, r.syncs...)
		total += r.bytes
		errs = append(errs, r.err)
	}
	if err := errors.Join(errs...); err != nil {
		return DiskProbe{}, fmt.Errorf("benchsuite: disk probe: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return DiskProbe{}, err
	}
	return DiskProbe{
		GroupBytes: groupBytes, Journals: journals, Syncs: len(all),
		SyncP50Ms: Millis(Quantile(all, 0.5)), SyncP99Ms: Millis(Quantile(all, 0.99)),
		MBPerSec: float64(total) / max(elapsed.Seconds(), 1e-9) / 1e6, Seconds: elapsed.Seconds(), Direct: direct,
	}, nil
}

// ReadProbe is the disk's sequential read bandwidth: Files files of
// ProbeFileBytes read at once from start to end, again and again, in
// ReadChunkBytes reads, with O_DIRECT (from the disk, not the page cache)
// where the file system allows it. Catch-up reads from the bookies read
// their journals this way (one reader per bookie, sequentially).
type ReadProbe struct {
	Files    int     `json:"files"`
	MBPerSec float64 `json:"mb_per_sec"`
	Seconds  float64 `json:"seconds"`
	Direct   bool    `json:"direct"`
}

// ReadChunkBytes is a read probe's read size.
const ReadChunkBytes = 1 << 20

// ProbeDiskRead writes files files of ProbeFileBytes in dir, reads them
// back at once for d (B2's bound on disk use holds) and removes them.
func ProbeDiskRead(ctx context.Context, dir string, files int, d time.Duration) (ReadProbe, error) {
	buf := vfs.AlignedBuffer(ReadChunkBytes)
	_, _ = rand.Read(buf)
	names := make([]string, files)
	defer func() {
		for _, n := range names {
			if n != "" {
				os.Remove(n)
			}
		}
	}()
	direct := true
	for i := range names {
		names[i] = filepath.Join(dir, fmt.Sprintf("read-probe-%d", i))
		f, d, err := openProbe(names[i], os.O_CREATE|os.O_WRONLY|os.O_TRUNC)
		if err != nil {
			return ReadProbe{}, fmt.Errorf("benchsuite: %w", err)
		}
		direct = direct && d
		for off := int64(0); off < ProbeFileBytes && err == nil; off += ReadChunkBytes {
			_, err = f.WriteAt(buf, off)
		}
		if err == nil {
			err = fdatasync(f)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return ReadProbe{}, fmt.Errorf("benchsuite: read probe: %w", err)
		}
	}
	totals := make([]int64, files)
	errs := make([]error, files)
	readDirect := make([]bool, files)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			f, d, err := openProbe(name, os.O_RDONLY)
			if err != nil {
				errs[i] = err
				return
			}
			defer f.Close()
			readDirect[i] = d
			b := vfs.AlignedBuffer(ReadChunkBytes)
			for off := int64(0); ctx.Err() == nil && time.Now().Before(end); off = (off + ReadChunkBytes) % ProbeFileBytes {
				n, err := f.ReadAt(b, off)
				totals[i] += int64(n)
				if err != nil && !errors.Is(err, io.EOF) {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return ReadProbe{}, fmt.Errorf("benchsuite: read probe: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return ReadProbe{}, err
	}
	var total int64
	for i, t := range totals {
		total += t
		direct = direct && readDirect[i]
	}
	return ReadProbe{Files: files, MBPerSec: float64(total) / max(elapsed.Seconds(), 1e-9) / 1e6,
		Seconds: elapsed.Seconds(), Direct: direct}, nil
}

// RoundTrip is the loopback TCP round trip measurement.
type RoundTrip struct {
	Count int     `json:"count"`
	P50Us float64 `json:"p50_us"`
	P99Us float64 `json:"p99_us"`
}

// MeasureLoopback times n one-byte ping-pongs over a TCP connection on
// 127.0.0.1 (Nagle off, as gRPC has it).
func MeasureLoopback(ctx context.Context, n int) (RoundTrip, error) {
	ln, err := listenLoopback()
	if err != nil {
		return RoundTrip{}, err
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // echo until the client closes
	}()
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return RoundTrip{}, fmt.Errorf("benchsuite: %w", err)
	}
	samples := make([]time.Duration, 0, n)
	b := []byte{1}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		t := time.Now()
		if _, err := c.Write(b); err != nil {
			c.Close()
			return RoundTrip{}, fmt.Errorf("benchsuite: %w", err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			c.Close()
			return RoundTrip{}, fmt.Errorf("benchsuite: %w", err)
		}
		samples = append(samples, time.Since(t))
	}
	c.Close()
	<-served
	return RoundTrip{Count: len(samples), P50Us: float64(Quantile(samples, 0.5)) / 1e3,
		P99Us: float64(Quantile(samples, 0.99)) / 1e3}, ctx.Err()
}
