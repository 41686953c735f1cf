package partlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strata-log/strata/client/recordbatch"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/compact"
)

// CompactResult is what one Compact call did.
type CompactResult struct {
	// Ran: a pass was swapped in. Reason is Decide's reason either way.
	Ran    bool
	Reason compact.Reason
	// DirtyRatio of the cleanable ledgers before the pass; DirtyBytes
	// their dirty bytes; OldestDirtyMs the newest record time of the
	// oldest dirty cleanable ledger (-1: none), for the cleaner lag.
	DirtyRatio    float64
	DirtyBytes    int64
	OldestDirtyMs int64
	// InputLedgers replaced by OutputLedgers; CleanedOffset is the new
	// cleaned-up-to offset.
	InputLedgers, OutputLedgers int
	CleanedOffset               int64
	Stats                       compact.Stats
	Took                        time.Duration
}

// CompactOptions parameterize one Compact call.
type CompactOptions struct {
	// Map is the key map (reset by the pass); its capacity bounds the
	// dirty range one pass covers.
	Map *compact.OffsetMap
	// MaxDuration: a pass that has run longer than this at its CAS is
	// abandoned (ErrCompactionStale), because the controller's orphan
	// sweeper deletes unlisted partition ledgers older than its grace and
	// may have taken them. 0: no bound.
	MaxDuration time.Duration
}

// compactionLogState is the per-log compaction state.
type compactionLogState struct {
	// running serializes Compact calls on one log (the broker's scheduler
	// runs one at a time anyway; tests may not).
	running sync.Mutex
}

// compactCandidates is the part of the log compaction may touch (P7): the
// ledgers that no segment object covers, as SegmentSummaries for Decide
// (the open one last, marked open so that Decide stops there).
func compactCandidates(pl *brokerpb.PartitionLog) ([]*brokerpb.LedgerSegment, []compact.SegmentSummary) {
	end := tieredEnd(pl)
	var segs []*brokerpb.LedgerSegment
	var sums []compact.SegmentSummary
	for _, s := range pl.GetSegments() {
		if end >= 0 && s.FirstOffset < end {
			continue // a local copy of tiered data: the object part is not compacted
		}
		segs = append(segs, s)
		sums = append(sums, compact.SegmentSummary{FirstOffset: s.FirstOffset, LastOffset: s.LastOffset,
			Bytes: s.Bytes, MaxTimestampMs: s.MaxTimestampMs, Open: !s.Closed})
	}
	return segs, sums
}

// decideCompaction is the scheduling decision for pl (pure).
func decideCompaction(pl *brokerpb.PartitionLog, nowMs int64, p compact.Policy) ([]*brokerpb.LedgerSegment, compact.Decision, int64) {
	segs, sums := compactCandidates(pl)
	cleaned := pl.GetCleanedOffset()
	if len(segs) > 0 {
		cleaned = max(cleaned, segs[0].FirstOffset)
	}
	return segs, compact.Decide(sums, cleaned, nowMs, p), cleaned
}

// DirtyRatio is the dirty ratio of the log's cleanable ledgers now, as
// min.cleanable.dirty.ratio compares it (0 when not compacted).
func (l *Log) DirtyRatio() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mu.policy.Compact {
		return 0
	}
	_, d, _ := decideCompaction(l.mu.pl, l.cfg.Now().UnixMilli(), l.mu.policy.Compaction)
	return d.DirtyRatio
}

// Compact runs one compaction pass if the policy says so (P7): it indexes
// the dirty closed ledgers into m (reset first), rewrites every closed
// ledger from the first one no object covers up to the indexed end
// (aligned down to a ledger boundary) into new closed ledgers, and swaps
// them in by one CAS that also stores the cleaned offset. The replaced
// ledgers are deleted after the CAS. If the log changed meanwhile, the
// outputs are deleted and ErrCompactionStale returned; a lost CAS fails
// the log (P3) like any other and deletes the outputs too (a CAS whose
// outcome is unknown leaves them to the orphan sweeper).
func (l *Log) Compact(ctx context.Context, opts CompactOptions) (CompactResult, error) {
	m := opts.Map
	l.compaction.running.Lock()
	defer l.compaction.running.Unlock()
	began := time.Now()
	l.mu.Lock()
	if err := l.readErrLocked(); err != nil {
		l.mu.Unlock()
		return CompactResult{}, err
	}
	policy, pl, now := l.mu.policy, l.mu.pl, l.cfg.Now()
	l.mu.Unlock()
	res := CompactResult{OldestDirtyMs: -1}
	if !policy.Compact {
		return res, nil
	}
	segs, d, cleaned := decideCompaction(pl, now.UnixMilli(), policy.Compaction)
	res.Reason, res.DirtyRatio, res.DirtyBytes = d.Reason, d.DirtyRatio, d.DirtyBytes
	for _, s := range segs[:d.Cleanable] {
		if s.LastOffset >= cleaned {
			res.OldestDirtyMs = s.MaxTimestampMs
			break
		}
	}
	if !d.Compact {
		return res, nil
	}
	cleanable := segs[:d.Cleanable]

	// 1. Index the dirty range; note the producers' last batches and the
	// batch ends of the whole range (C5 and the end rule of P7).
	m.Reset()
	readers := map[uint64]*ledger.Reader{} // both reads of a ledger share one
	indexedEnd := d.CleanableEnd
	// lastOfSegment[i]: producer id -> last offset of its last batch in
	// cleanable[i] (bounded by producers, not batches).
	lastOfSegment := make([]map[int64]int64, 0, len(cleanable))
	maxDecompressed := decompressedBound(l.Limits().MaxBatchBytes)
	for _, s := range cleanable {
		if s.FirstOffset >= indexedEnd {
			break
		}
		lasts := map[int64]int64{}
		lastOfSegment = append(lastOfSegment, lasts)
		err := l.readSegment(ctx, readers, s, func(id int64, payload []byte) error {
			h, err := recordbatch.ParseHeader(payload)
			if err != nil {
				return fmt.Errorf("%w: ledger %d entry %d: %w", ErrCorruptBatch, s.LedgerId, id, err)
			}
			if h.ProducerID >= 0 {
				lasts[h.ProducerID] = h.LastOffset()
			}
			if h.LastOffset() < cleaned || h.BaseOffset >= indexedEnd {
				return nil
			}
			pr, err := compact.Plan(m, [][]byte{payload}, indexedEnd, maxDecompressed)
			if err != nil {
				return fmt.Errorf("partlog: compaction: ledger %d entry %d: %w", s.LedgerId, id, err)
			}
			indexedEnd = pr.IndexedEnd
			return nil
		})
		if err != nil {
			return res, err
		}
	}
	// Keep ledgers whole: the pass covers the leading cleanable ledgers
	// that end below the indexed end. Keys indexed beyond it only name
	// records that exist later in the log, so dropping what they
	// supersede is still "latest wins".
	n := 0
	for n < len(cleanable) && cleanable[n].LastOffset < indexedEnd {
		n++
	}
	if n == 0 || cleanable[n-1].LastOffset < cleaned {
		return res, fmt.Errorf("%w: partlog: the %d keys it holds do not cover ledger %d; raise the compaction map memory",
			compact.ErrMapTooSmall, m.Capacity(), cleanable[min(n, len(cleanable)-1)].LedgerId)
	}
	inputs := cleanable[:n]
	end := inputs[n-1].LastOffset + 1
	lastOf := map[int64]int64{}
	for _, lasts := range lastOfSegment[:n] {
		for id, last := range lasts {
			lastOf[id] = last
		}
	}

	// 2. Rewrite into new closed ledgers.
	outputs, st, err := l.rewriteSegments(ctx, readers, inputs, m, lastOf, compact.Options{
		NowMs: now.UnixMilli(), DeleteRetentionMs: policy.DeleteRetentionMs, MaxDecompressedBytes: maxDecompressed,
	})
	if err != nil {
		return res, err
	}
	res.Stats = st
	failpoint.Hit("compaction.before_cas")

	// 3. One CAS, re-validated against what changed meanwhile.
	casAttempted := false
	err = l.casUnderSem(ctx, func(pl *brokerpb.PartitionLog) error {
		i := 0
		for i < len(pl.Segments) && pl.Segments[i].LedgerId != inputs[0].LedgerId {
			i++
		}
		if i+len(inputs) > len(pl.Segments) {
			return fmt.Errorf("%w: ledger %d is no longer listed", ErrCompactionStale, inputs[0].LedgerId)
		}
		for j, s := range inputs {
			if cur := pl.Segments[i+j]; cur.LedgerId != s.LedgerId || !cur.Closed {
				return fmt.Errorf("%w: ledger %d is no longer listed after ledger %d", ErrCompactionStale, s.LedgerId, inputs[0].LedgerId)
			}
		}
		if opts.MaxDuration > 0 && time.Since(began) > opts.MaxDuration {
			return fmt.Errorf("%w: the pass took %v, more than %v: its outputs may have been swept", ErrCompactionStale,
				time.Since(began).Round(time.Millisecond), opts.MaxDuration)
		}
		if te := tieredEnd(pl); te > inputs[0].FirstOffset {
			return fmt.Errorf("%w: offsets up to %d were tiered meanwhile", ErrCompactionStale, te-1)
		}
		segs := append([]*brokerpb.LedgerSegment{}, pl.Segments[:i]...)
		segs = append(segs, outputs...)
		pl.Segments = append(segs, pl.Segments[i+len(inputs):]...)
		pl.CleanedOffset = max(pl.CleanedOffset, end)
		pl.LastCompactionMs = now.UnixMilli()
		casAttempted = true
		return nil
	})
	if err != nil {
		// Nothing names the outputs unless the CAS was sent and its
		// outcome is unknown: then the list decides, and the orphan
		// sweeper deletes what it does not name.
		if !casAttempted || errors.Is(err, ErrConflict) {
			dctx, cancel := cleanupContext(ctx)
			l.deleteSegments(dctx, outputs)
			cancel()
		}
		return res, err
	}
	failpoint.Hit("compaction.after_cas")
	l.deleteSegments(ctx, inputs)
	res.Ran, res.InputLedgers, res.OutputLedgers, res.CleanedOffset = true, len(inputs), len(outputs), end
	res.Took = time.Since(began)
	l.log.Info("compaction", "reason", d.Reason, "dirty_ratio", d.DirtyRatio, "ledgers_in", len(inputs),
		"ledgers_out", len(outputs), "cleaned_offset", end, "bytes_in", st.BytesIn, "bytes_out", st.BytesOut,
		"records_removed", st.RecordsRemoved, "tombstones_dropped", st.TombstonesDropped, "took", res.Took)
	return res, nil
}

// cleanupContext bounds the deletion of a failed pass's outputs, also
// when the pass's ctx ended (a broker closing): what it does not delete,
// the orphan sweeper does.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// deleteSegments deletes unlisted segments (deleteSegment), a few at a
// time: a pass over small ledgers replaces many.
func (l *Log) deleteSegments(ctx context.Context, segs []*brokerpb.LedgerSegment) {
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, s := range segs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			l.deleteSegment(ctx, s)
		}()
	}
	wg.Wait()
}

// readSegment calls fn with every entry of a closed segment, in order,
// through the pass's own readers (a pass must not evict what fetches read
// ahead).
func (l *Log) readSegment(ctx context.Context, readers map[uint64]*ledger.Reader, s *brokerpb.LedgerSegment,
	fn func(id int64, payload []byte) error) error {
	if s.LastEntryId < 0 {
		return nil
	}
	r := readers[s.LedgerId]
	if r == nil {
		var err error
		if r, err = ledger.OpenReader(ctx, l.cfg.Env, s.LedgerId); err != nil {
			return fmt.Errorf("partlog: compaction: opening ledger %d: %w", s.LedgerId, err)
		}
		readers[s.LedgerId] = r
	}
	r.AdvanceLAC(s.LastEntryId)
	err := r.ReadRange(ctx, 0, s.LastEntryId, func(e ledger.Entry) error { return fn(e.ID, e.Payload) })
	if err != nil {
		return fmt.Errorf("partlog: compaction: reading ledger %d: %w", s.LedgerId, err)
	}
	return nil
}

// rewriteSegments rewrites inputs (consecutive closed segments) into new
// closed ledgers, one batch per entry, each with its index written. An
// output covers whole inputs: it is cut at an input boundary once it
// holds SegmentBytes. Each output keeps the offset range of its inputs
// (first of the first, last of the last), so the list stays contiguous
// over offsets whatever the batches inside. The last batch of the range is
// kept, empty if nothing survives (P7). On error the outputs made so far
// are deleted.
func (l *Log) rewriteSegments(ctx context.Context, readers map[uint64]*ledger.Reader, inputs []*brokerpb.LedgerSegment, m *compact.OffsetMap,
	lastOf map[int64]int64, opt compact.Options) (outputs []*brokerpb.LedgerSegment, total compact.Stats, err error) {
	defer func() {
		if err != nil {
			// Also when ctx ended: nothing lists them.
			dctx, cancel := cleanupContext(ctx)
			l.deleteSegments(dctx, outputs)
			cancel()
			outputs = nil
		}
	}()
	end := inputs[len(inputs)-1].LastOffset
	segBytes := l.Limits().SegmentBytes
	var out *compactOutput
	for i, s := range inputs {
		if out == nil {
			w, err := ledger.Create(ctx, l.cfg.Env, l.createOptions())
			if err != nil {
				return outputs, total, fmt.Errorf("partlog: compaction: creating a ledger: %w", err)
			}
			out = &compactOutput{w: w, first: s.FirstOffset, createdAtMs: s.CreatedAtMs, maxTs: -1}
		}
		out.maxTs = max(out.maxTs, s.MaxTimestampMs)
		out.createdAtMs = max(out.createdAtMs, s.CreatedAtMs)
		err := l.readSegment(ctx, readers, s, func(id int64, payload []byte) error {
			h, err := recordbatch.ParseHeader(payload)
			if err != nil {
				return fmt.Errorf("%w: ledger %d entry %d: %w", ErrCorruptBatch, s.LedgerId, id, err)
			}
			o := opt
			last, ok := lastOf[h.ProducerID]
			o.KeepEmpty = (h.ProducerID >= 0 && ok && last == h.LastOffset()) || h.LastOffset() == end
			nb, st, err := compact.Rewrite(payload, m, o)
			if err != nil {
				return fmt.Errorf("partlog: compaction: ledger %d entry %d (offset %d): %w", s.LedgerId, id, h.BaseOffset, err)
			}
			total.Add(st)
			if nb == nil {
				return nil
			}
			return out.append(ctx, nb)
		})
		if err != nil {
			out.discard(l)
			return outputs, total, err
		}
		if out.bytes >= segBytes || i == len(inputs)-1 {
			seg, err := out.finish(ctx, l, s.LastOffset)
			if err != nil {
				out.discard(l)
				return outputs, total, err
			}
			outputs = append(outputs, seg)
			out = nil
		}
	}
	return outputs, total, nil
}

// compactOutput is one output ledger being written.
type compactOutput struct {
	w           *ledger.Writer
	first       int64
	createdAtMs int64
	maxTs       int64
	entries     []entryInfo
	bytes       int64
	mu          sync.Mutex
	err         error // first append failure
}

func (o *compactOutput) append(ctx context.Context, batch []byte) error {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		return err
	}
	o.entries = append(o.entries, newEntryInfo(h, len(batch), o.entries))
	o.bytes += int64(len(batch))
	// Appends are pipelined; Close waits for them all.
	return o.w.Append(ctx, batch, func(_ int64, err error) {
		if err != nil {
			o.mu.Lock()
			o.err = errors.Join(o.err, err)
			o.mu.Unlock()
		}
	})
}

// finish closes the ledger, checks that every entry made it, writes the
// index and returns the segment covering [first, last].
func (o *compactOutput) finish(ctx context.Context, l *Log, last int64) (*brokerpb.LedgerSegment, error) {
	if err := o.w.Close(ctx); err != nil {
		return nil, fmt.Errorf("partlog: compaction: closing ledger %d: %w", o.w.ID(), err)
	}
	o.mu.Lock()
	err := o.err
	o.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("partlog: compaction: writing ledger %d: %w", o.w.ID(), err)
	}
	if got := o.w.LastAddConfirmed(); got != int64(len(o.entries))-1 {
		return nil, fmt.Errorf("partlog: compaction: ledger %d closed at entry %d, wrote %d entries", o.w.ID(), got, len(o.entries))
	}
	seg := segmentProto(o.w.ID(), o.first, o.createdAtMs, o.entries, true)
	seg.LastOffset = last
	seg.MaxTimestampMs = max(seg.MaxTimestampMs, o.maxTs)
	if err := writeIndex(ctx, l.cfg.Store, o.w.ID(), buildIndex(o.entries, l.cfg.IndexIntervalBytes)); err != nil {
		return nil, err
	}
	return seg, nil
}

// discard closes and deletes an output no list names.
func (o *compactOutput) discard(l *Log) {
	if o == nil {
		return
	}
	discardLedger(l.cfg, o.w)
	if err := l.cfg.Store.Delete(context.Background(), IndexKey(o.w.ID())); err != nil {
		l.log.Warn("compaction: deleting an unlisted index", "ledger", o.w.ID(), "err", err)
	}
}
