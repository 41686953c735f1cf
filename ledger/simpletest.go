package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Defaults of SimpleTestConfig.
const (
	DefaultSimpleTestEntries     = 1000
	DefaultSimpleTestEntrySize   = 1024
	DefaultSimpleTestMaxInFlight = 256
	DefaultSimpleTestProgress    = time.Second
)

// ErrSimpleTestMismatch means that an entry read back differs from what was written.
var ErrSimpleTestMismatch = errors.New("ledger: simple test: entry read back differs from the entry written")

// SimpleTestConfig configures RunSimpleTest. Zero fields take defaults.
type SimpleTestConfig struct {
	// EnsembleSize, WriteQuorum, AckQuorum of the test ledger; default
	// 3/3/2.
	EnsembleSize, WriteQuorum, AckQuorum int
	// Entries to write (default 1000) of EntrySize bytes (default 1024).
	Entries   int
	EntrySize int
	// MaxInFlight bounds the entries appended and not yet acknowledged.
	// Default 256.
	MaxInFlight int
	// Keep leaves the ledger in place; by default it is deleted.
	Keep bool
	// Progress, when set, is called every ProgressInterval (default 1s)
	// during the write and the read, and once at the end of each.
	Progress         func(SimpleTestProgress)
	ProgressInterval time.Duration
}

func (c SimpleTestConfig) withDefaults() SimpleTestConfig {
	if c.Entries == 0 {
		c.Entries = DefaultSimpleTestEntries
	}
	if c.EntrySize == 0 {
		c.EntrySize = DefaultSimpleTestEntrySize
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultSimpleTestMaxInFlight
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultSimpleTestProgress
	}
	return c
}

// Validate reports the first problem with c.
func (c SimpleTestConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Entries < 0:
		return fmt.Errorf("%w: %d entries", ErrInvalid, c.Entries)
	case c.EntrySize < 0:
		return fmt.Errorf("%w: entry size %d", ErrInvalid, c.EntrySize)
	}
	return c.createOptions().Validate()
}

func (c SimpleTestConfig) createOptions() CreateOptions {
	return CreateOptions{EnsembleSize: c.EnsembleSize, WriteQuorum: c.WriteQuorum, AckQuorum: c.AckQuorum,
		Properties: map[string]string{"creator": "strata ledger simpletest"}}
}

func (c SimpleTestConfig) String() string {
	c = c.withDefaults()
	return fmt.Sprintf("E=%d Qw=%d Qa=%d entries=%d entry-size=%d max-in-flight=%d keep=%t",
		c.EnsembleSize, c.WriteQuorum, c.AckQuorum, c.Entries, c.EntrySize, c.MaxInFlight, c.Keep)
}

// SimpleTestProgress reports how far a phase ("write" or "read") got.
type SimpleTestProgress struct {
	Phase   string
	Done    int
	Total   int
	Elapsed time.Duration
}

// SimpleTestResult is what RunSimpleTest measured.
type SimpleTestResult struct {
	LedgerID    uint64
	Ensemble    []string
	E, Qw, Qa   int
	Entries     int
	EntrySize   int
	Bytes       int64
	WriteTime   time.Duration
	ReadTime    time.Duration
	AddLatency  LatencySummary
	Verified    int  // entries read back and found identical
	Closed      bool // the writer closed the ledger
	Deleted     bool
	DeleteError error // why the ledger could not be deleted, if so
}

// WriteMBps is the write throughput in MB/s (10^6 bytes).
func (r *SimpleTestResult) WriteMBps() float64 { return mbps(r.Bytes, r.WriteTime) }

// ReadMBps is the read throughput in MB/s.
func (r *SimpleTestResult) ReadMBps() float64 { return mbps(r.Bytes, r.ReadTime) }

// WriteEntriesPerSecond is the write throughput in entries/s.
func (r *SimpleTestResult) WriteEntriesPerSecond() float64 { return perSecond(r.Entries, r.WriteTime) }

// ReadEntriesPerSecond is the read throughput in entries/s.
func (r *SimpleTestResult) ReadEntriesPerSecond() float64 { return perSecond(r.Entries, r.ReadTime) }

func mbps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// RunSimpleTest checks a cluster end to end: it creates a ledger, appends
// cfg.Entries entries of cfg.EntrySize pseudo-random bytes, pipelined (at
// most cfg.MaxInFlight unacknowledged), closes the ledger, reads every
// entry back through a Reader and compares it byte for byte, and deletes
// the ledger unless cfg.Keep. It returns the measurements so far and an
// error when any step up to the read fails or any entry differs
// (ErrSimpleTestMismatch). A ledger whose test failed is still closed and
// deleted (unless Keep), on a best-effort basis. Deleting is cleanup, not
// part of the test: its failure (a bookie down, say) is reported in
// SimpleTestResult.DeleteError only.
func RunSimpleTest(ctx context.Context, env Env, cfg SimpleTestConfig) (*SimpleTestResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w, err := Create(ctx, env, cfg.createOptions())
	if err != nil {
		return nil, err
	}
	md := w.Metadata()
	res := &SimpleTestResult{
		LedgerID: w.ID(), Ensemble: md.GetFragments()[0].GetBookies(), Entries: cfg.Entries, EntrySize: cfg.EntrySize,
		E: int(md.GetEnsembleSize()), Qw: int(md.GetWriteQuorum()), Qa: int(md.GetAckQuorum()),
		Bytes: int64(cfg.Entries) * int64(cfg.EntrySize),
	}
	testErr := runSimpleTest(ctx, env, cfg, w, res)
	if !cfg.Keep {
		// A failed test still cleans up; a canceled one gets a little
		// time of its own to do so.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		res.DeleteError = Delete(dctx, env, res.LedgerID)
		cancel()
		res.Deleted = res.DeleteError == nil
	}
	return res, testErr
}

func runSimpleTest(ctx context.Context, env Env, cfg SimpleTestConfig, w *Writer, res *SimpleTestResult) error {
	run := simpleTestWrite(ctx, cfg, w, res)
	// Close gets time of its own: a canceled test still closes the ledger
	// (and Close fails the entries still pending, so every callback runs).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	closeErr := w.Close(cctx)
	select {
	case <-run.done:
	case <-cctx.Done():
		return fmt.Errorf("ledger %d: appends still unanswered after Close: %w", res.LedgerID, cctx.Err())
	}
	run.mu.Lock()
	res.AddLatency = SummarizeLatencies(run.latencies)
	err := run.err
	run.mu.Unlock()
	if err != nil {
		return err
	}
	if closeErr != nil {
		return fmt.Errorf("close ledger %d: %w", res.LedgerID, closeErr)
	}
	res.Closed = true
	return simpleTestRead(ctx, env, cfg, res)
}

// simpleTestPayload is entry id's payload: the id, then bytes from a
// generator seeded with the ledger and entry ids, so the reader can
// recompute it.
func simpleTestPayload(ledgerID uint64, id int64, size int) []byte {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[0:], ledgerID)
	binary.LittleEndian.PutUint64(seed[8:], uint64(id))
	p := make([]byte, size)
	_, _ = rand.NewChaCha8(seed).Read(p)
	if size >= 8 {
		binary.BigEndian.PutUint64(p, uint64(id))
	}
	return p
}

// progressTicker calls cfg.Progress at most every ProgressInterval.
type progressTicker struct {
	cfg   SimpleTestConfig
	phase string
	start time.Time
	next  time.Time
}

func newProgressTicker(cfg SimpleTestConfig, phase string) *progressTicker {
	now := time.Now()
	return &progressTicker{cfg: cfg, phase: phase, start: now, next: now.Add(cfg.ProgressInterval)}
}

func (p *progressTicker) tick(done int, final bool) {
	if p.cfg.Progress == nil {
		return
	}
	now := time.Now()
	if !final && now.Before(p.next) {
		return
	}
	p.next = now.Add(p.cfg.ProgressInterval)
	p.cfg.Progress(SimpleTestProgress{Phase: p.phase, Done: done, Total: p.cfg.Entries, Elapsed: now.Sub(p.start)})
}

// writeRun is the state of simpleTestWrite's appends.
type writeRun struct {
	// done is closed once every callback ran.
	done chan struct{}
	mu   sync.Mutex
	// latencies of acknowledged entries, from Append to acknowledgement.
	latencies []time.Duration
	err       error // the first failure
}

func (r *writeRun) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

func (r *writeRun) state() (acked int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.latencies), r.err
}

// simpleTestWrite appends the entries, at most cfg.MaxInFlight
// unacknowledged, and returns when every callback ran or ctx ended.
func simpleTestWrite(ctx context.Context, cfg SimpleTestConfig, w *Writer, res *SimpleTestResult) *writeRun {
	run := &writeRun{done: make(chan struct{}), latencies: make([]time.Duration, 0, cfg.Entries)}
	slots := make(chan struct{}, cfg.MaxInFlight)
	var wg sync.WaitGroup
	progress := newProgressTicker(cfg, "write")
	start := time.Now()
	for i := range cfg.Entries {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			run.fail(ctx.Err())
		}
		acked, err := run.state()
		if err != nil {
			break
		}
		progress.tick(acked, false)
		payload := simpleTestPayload(res.LedgerID, int64(i), cfg.EntrySize)
		sent := time.Now()
		wg.Add(1)
		err = w.Append(ctx, payload, func(id int64, err error) {
			defer wg.Done()
			defer func() { <-slots }() // never blocks: this entry holds a slot
			switch {
			case err != nil:
				run.fail(fmt.Errorf("entry %d: %w", i, err))
			case id != int64(i):
				run.fail(fmt.Errorf("%w: entry %d acknowledged as entry %d", ErrWriterFailed, i, id))
			default:
				run.mu.Lock()
				run.latencies = append(run.latencies, time.Since(sent))
				run.mu.Unlock()
			}
		})
		if err != nil {
			wg.Done()
			<-slots
			run.fail(fmt.Errorf("append entry %d: %w", i, err))
			break
		}
	}
	go func() {
		wg.Wait()
		close(run.done)
	}()
	select {
	case <-run.done:
	case <-ctx.Done():
		run.fail(ctx.Err())
	}
	res.WriteTime = time.Since(start)
	acked, _ := run.state()
	progress.tick(acked, true)
	return run
}

// simpleTestRead reads the closed ledger back and compares every entry.
func simpleTestRead(ctx context.Context, env Env, cfg SimpleTestConfig, res *SimpleTestResult) error {
	start := time.Now()
	r, err := OpenReader(ctx, env, res.LedgerID)
	if err != nil {
		return fmt.Errorf("open reader: %w", err)
	}
	lac, err := r.LastAddConfirmed(ctx)
	if err != nil {
		return err
	}
	if lac != int64(cfg.Entries)-1 {
		return fmt.Errorf("%w: the closed ledger ends at entry %d, %d were written", ErrSimpleTestMismatch, lac, cfg.Entries)
	}
	progress := newProgressTicker(cfg, "read")
	if cfg.Entries > 0 {
		err = r.ReadRange(ctx, 0, lac, func(e Entry) error {
			if want := simpleTestPayload(res.LedgerID, e.ID, cfg.EntrySize); !bytes.Equal(e.Payload, want) {
				return fmt.Errorf("%w: entry %d: %d bytes read, %d written", ErrSimpleTestMismatch, e.ID, len(e.Payload), len(want))
			}
			res.Verified++
			progress.tick(res.Verified, false)
			return nil
		})
	}
	res.ReadTime = time.Since(start)
	progress.tick(res.Verified, true)
	return err
}

// LatencySummary summarises a set of latencies.
type LatencySummary struct {
	Count                     int
	Mean, P50, P99, P999, Max time.Duration
}

// SummarizeLatencies computes the summary of ds (nearest-rank
// percentiles); ds is not modified.
func SummarizeLatencies(ds []time.Duration) LatencySummary {
	if len(ds) == 0 {
		return LatencySummary{}
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	return LatencySummary{
		Count: len(sorted),
		Mean:  sum / time.Duration(len(sorted)),
		P50:   Percentile(sorted, 50),
		P99:   Percentile(sorted, 99),
		P999:  Percentile(sorted, 99.9),
		Max:   sorted[len(sorted)-1],
	}
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. sorted must be in ascending order and not empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	// ceil(p% of n); the epsilon keeps 99.9% of 1000 at 999, not 1000
	// (floating point makes it 999.0000000000001).
	rank := int(math.Ceil(p*float64(len(sorted))/100 - 1e-9))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}
