package partlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
	"github.com/strata-log/strata/tiering/segfile"
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
	// InputLedgers replaced by OutputLedgers, InputObjects by
	// OutputObjects; CleanedOffset is the new cleaned-up-to offset.
	InputLedgers, OutputLedgers int
	InputObjects, OutputObjects int
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
	// BufferBytes: phase 1 keeps the batches it reads, whole pieces from
	// the first up to this many bytes, and phase 2 rewrites those from
	// memory instead of reading them again. 0: every piece is read twice.
	BufferBytes int64
	// MaxBytesPerSec bounds what the pass reads (from bookies or the
	// object store), on average since it began, and the rewrite of what
	// it kept in memory to rewritePaceFactor times it; 0: unbounded.
	MaxBytesPerSec float64
}

// passBuffer holds the batches of the pieces a pass's index phase read,
// up to a byte budget, so that its rewrite phase does not read them
// again (from the bookies or the object store: the second read cost as
// much as the first). A piece is kept whole or not at all.
type passBuffer struct {
	room    int64
	batches map[string][][]byte // by compactPiece.String()
	pace    *ctxtime.Pacer      // the pass's reads, the buffer's included
	rate    float64             // pace's bytes per second; 0: unbounded
	// rewrite paces the batches held here that the rewrite decodes (at
	// rewritePaceFactor x rate), from the first one (paceRewrite).
	rewrite *ctxtime.Pacer
}

// rewritePaceFactor: the rewrite phase decodes the batches the buffer
// holds at this many times the pass's read rate. Unpaced, it rewrote 120
// MB in 75-112 ms, a whole core, and the produce p99 of the same broker
// peaked in those 100 ms of every pass ("compact-half-max" in `strata
// bench suite`). Paced, it takes about a sixth of a core for six times as
// long, and a pass that decodes everything still averages 6/7 of the
// rate over its two phases (55-56 MB/s measured at the default 64 MiB/s,
// where issue 11 asks for >= 50). The batches it drops from their header
// alone (compact.Survivors) cost nothing and are not paced: in that
// workload's sources, all but the last two of every pass's ~128.
const rewritePaceFactor = 6

func newPassBuffer(bytes int64, rate float64) *passBuffer {
	return &passBuffer{room: bytes, batches: map[string][][]byte{}, pace: ctxtime.NewPacer(rate, time.Now), rate: rate}
}

// bytes is the data size of a piece, as the budget counts it.
func (p compactPiece) bytes() int64 {
	if p.object != nil {
		return p.object.DataBytes
	}
	return p.ledger.Bytes
}

// fits reports whether p's batches fit in what is left, taking the room.
func (b *passBuffer) fits(p compactPiece) bool {
	if b == nil || p.bytes() > b.room {
		return false
	}
	b.room -= p.bytes()
	return true
}

// read calls fn with every batch of p, in order: from the buffer (kept;
// it forgets them), or read again (readPiece).
func (b *passBuffer) read(ctx context.Context, l *Log, readers *passReaders, p compactPiece,
	fn func(id int64, payload []byte, kept bool) error) error {
	kept, ok := b.batches[p.String()]
	if !ok {
		return l.readPiece(ctx, readers, b.pace, p, false, func(id int64, payload []byte) error { return fn(id, payload, false) })
	}
	delete(b.batches, p.String())
	for id, batch := range kept {
		if err := fn(int64(id), batch, true); err != nil {
			return err
		}
	}
	return nil
}

// paceRewrite waits until n more bytes of kept batches may be rewritten
// (at rewritePaceFactor times the read rate, from the first).
func (b *passBuffer) paceRewrite(ctx context.Context, n int) error {
	if b.rewrite == nil {
		b.rewrite = ctxtime.NewPacer(b.rate*rewritePaceFactor, time.Now)
	}
	return b.rewrite.Wait(ctx, n)
}

// passRewrite is what a pass's rewrite phase applies to each batch of
// its range, objects' and ledgers' alike.
type passRewrite struct {
	buf    *passBuffer
	m      *compact.OffsetMap
	surv   *compact.Survivors // filled by the index phase
	lastOf map[int64]int64    // producer id -> last offset of its last batch in the range
	last   int64              // the range's last offset: its batch stays (P7)
	opt    compact.Options
}

// batch returns the compacted form of batch id of p (compact.Rewrite):
// nil when it goes. kept: it comes from the pass buffer, the very bytes
// the index phase CRC-checked and indexed, so Rewrite need not check the
// CRC again and may drop it from its header alone (compact.Survivors);
// one it decodes is paced (paceRewrite). An object's batches were
// CRC-checked by readObject's segfile iterator, kept or read again.
func (r *passRewrite) batch(ctx context.Context, p compactPiece, id int64, batch []byte, kept bool) ([]byte, compact.Stats, error) {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		return nil, compact.Stats{}, fmt.Errorf("%w: %v batch %d: %w", ErrCorruptBatch, p, id, err)
	}
	opt := r.opt
	lastBatch, ok := r.lastOf[h.ProducerID]
	opt.KeepEmpty = (h.ProducerID >= 0 && ok && lastBatch == h.LastOffset()) || h.LastOffset() == r.last
	opt.CRCChecked = kept || p.object != nil
	if kept {
		opt.Survivors = r.surv
	}
	nb, st, err := compact.Rewrite(batch, r.m, opt)
	if err != nil {
		return nil, st, fmt.Errorf("partlog: compaction: %v batch %d (offset %d): %w", p, id, h.BaseOffset, err)
	}
	if kept && st.BatchesDroppedUnread == 0 {
		if err := r.buf.paceRewrite(ctx, len(batch)); err != nil {
			return nil, st, err
		}
	}
	return nb, st, nil
}

// compactionLogState is the per-log compaction state.
type compactionLogState struct {
	// running serializes Compact calls on one log (the broker's scheduler
	// runs one at a time anyway; tests may not).
	running sync.Mutex
}

// compactPiece is one part of the log compaction may rewrite: a segment object
// or a ledger no object covers (exactly one is set).
type compactPiece struct {
	object *brokerpb.TieredSegment
	ledger *brokerpb.LedgerSegment
}

func (p compactPiece) first() int64 {
	if p.object != nil {
		return p.object.BaseOffset
	}
	return p.ledger.FirstOffset
}

func (p compactPiece) last() int64 {
	if p.object != nil {
		return p.object.LastOffset
	}
	return p.ledger.LastOffset
}

func (p compactPiece) String() string {
	if p.object != nil {
		return "object " + p.object.ObjectKey
	}
	return fmt.Sprintf("ledger %d", p.ledger.LedgerId)
}

// compactCandidates is the part of the log compaction may touch (P7), in
// offset order, as SegmentSummaries for Decide: with objects (the log has
// a store to read and write them), every segment object, then the
// ledgers no object covers (the open one last, marked open so that Decide
// stops there). Ledgers an object covers are local copies, never
// candidates; without objects, the object part is left alone.
func compactCandidates(pl *brokerpb.PartitionLog, objects bool) ([]compactPiece, []compact.SegmentSummary) {
	end := tieredEnd(pl)
	var pieces []compactPiece
	var sums []compact.SegmentSummary
	if objects {
		for _, o := range pl.GetTiered() {
			pieces = append(pieces, compactPiece{object: o})
			sums = append(sums, compact.SegmentSummary{FirstOffset: o.BaseOffset, LastOffset: o.LastOffset,
				Bytes: o.DataBytes, MaxTimestampMs: o.MaxTimestampMs})
		}
	}
	for _, s := range pl.GetSegments() {
		if end >= 0 && s.FirstOffset < end {
			continue // a local copy of tiered data
		}
		pieces = append(pieces, compactPiece{ledger: s})
		sums = append(sums, compact.SegmentSummary{FirstOffset: s.FirstOffset, LastOffset: s.LastOffset,
			Bytes: s.Bytes, MaxTimestampMs: s.MaxTimestampMs, Open: !s.Closed})
	}
	return pieces, sums
}

// decideCompaction is the scheduling decision for pl (pure); objects as
// compactCandidates. The stored tombstone horizon makes a pass run with
// nothing dirty once a kept tombstone expires (P7).
func decideCompaction(pl *brokerpb.PartitionLog, nowMs int64, p compact.Policy, objects bool) ([]compactPiece, compact.Decision, int64) {
	pieces, sums := compactCandidates(pl, objects)
	cleaned := pl.GetCleanedOffset()
	if len(pieces) > 0 {
		cleaned = max(cleaned, pieces[0].first())
	}
	return pieces, compact.Decide(sums, cleaned, pl.GetTombstoneHorizonMs(), nowMs, p), cleaned
}

// DirtyRatio is the dirty ratio of the log's cleanable ledgers now, as
// min.cleanable.dirty.ratio compares it (0 when not compacted).
func (l *Log) DirtyRatio() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mu.policy.Compact {
		return 0
	}
	_, d, _ := decideCompaction(l.mu.pl, l.cfg.Now().UnixMilli(), l.mu.policy.Compaction, l.cfg.Tier != nil)
	return d.DirtyRatio
}

// Compact runs one compaction pass if the policy says so (P7): it indexes
// the dirty closed pieces (segment objects, then ledgers no object
// covers) into m (reset first), rewrites every compactPiece from the first one up
// to the indexed end (aligned down to a compactPiece boundary), objects into new
// objects and ledgers into new closed ledgers, and swaps them in by one
// CAS that also stores the cleaned offset and queues the replaced objects
// for deletion (T6). The replaced ledgers and objects are deleted after
// the CAS. If the log changed meanwhile, the outputs are deleted and
// ErrCompactionStale returned; a lost CAS fails the log (P3) like any
// other and deletes the outputs too (a CAS whose outcome is unknown leaves
// them to the orphan sweeps).
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
	pieces, d, cleaned := decideCompaction(pl, now.UnixMilli(), policy.Compaction, l.cfg.Tier != nil)
	res.Reason, res.DirtyRatio, res.DirtyBytes = d.Reason, d.DirtyRatio, d.DirtyBytes
	for _, p := range pieces[:d.Cleanable] {
		if p.last() >= cleaned {
			if p.object != nil {
				res.OldestDirtyMs = p.object.MaxTimestampMs
			} else {
				res.OldestDirtyMs = p.ledger.MaxTimestampMs
			}
			break
		}
	}
	if !d.Compact {
		return res, nil
	}
	cleanable := pieces[:d.Cleanable]

	// 1. Index the dirty range; note the producers' last batches and the
	// batch ends of the whole range (C5 and the end rule of P7).
	m.Reset()
	readers := newPassReaders(cleanable)
	indexedEnd := d.CleanableEnd
	// lastOfPiece[i]: producer id -> last offset of its last batch in
	// cleanable[i] (bounded by producers, not batches).
	lastOfPiece := make([]map[int64]int64, 0, len(cleanable))
	maxDecompressed := decompressedBound(l.Limits().MaxBatchBytes)
	buf := newPassBuffer(opts.BufferBytes, opts.MaxBytesPerSec)
	surv := compact.NewSurvivors(cleaned)
	for _, p := range cleanable {
		if p.first() >= indexedEnd {
			break
		}
		lasts := map[int64]int64{}
		lastOfPiece = append(lastOfPiece, lasts)
		var kept [][]byte
		keep := buf.fits(p)
		err := l.readPiece(ctx, readers, buf.pace, p, keep, func(id int64, payload []byte) error {
			if keep {
				kept = append(kept, payload)
			}
			h, err := recordbatch.ParseHeader(payload)
			if err != nil {
				return fmt.Errorf("%w: %v entry %d: %w", ErrCorruptBatch, p, id, err)
			}
			if h.ProducerID >= 0 {
				lasts[h.ProducerID] = h.LastOffset()
			}
			if h.LastOffset() < cleaned || h.BaseOffset >= indexedEnd {
				return nil
			}
			// segfile checked the CRC of an object's batches.
			popt := compact.Options{MaxDecompressedBytes: maxDecompressed, CRCChecked: p.object != nil, Survivors: surv}
			pr, err := compact.Plan(m, [][]byte{payload}, indexedEnd, popt)
			if err != nil {
				return fmt.Errorf("partlog: compaction: %v entry %d: %w", p, id, err)
			}
			indexedEnd = pr.IndexedEnd
			return nil
		})
		if err != nil {
			return res, err
		}
		if keep {
			buf.batches[p.String()] = kept
		}
	}
	surv.AddLatest(m, indexedEnd)
	// Keep pieces whole: the pass covers the leading cleanable pieces
	// that end below the indexed end. Keys indexed beyond it only name
	// records that exist later in the log, so dropping what they
	// supersede is still "latest wins". It covers the whole clean
	// section (where the tombstones it keeps, and the horizon it stores,
	// lie) and some of the dirty one if there is any: a pass for expired
	// tombstones alone (nothing dirty, Decide checked that the cleanable
	// pieces reach cleaned) indexes nothing and ends at cleaned.
	n := 0
	for n < len(cleanable) && cleanable[n].last() < indexedEnd {
		n++
	}
	if n == 0 || cleanable[n-1].last()+1 < cleaned || (d.DirtyBytes > 0 && cleanable[n-1].last() < cleaned) {
		return res, fmt.Errorf("%w: partlog: the %d keys it holds do not cover %v; raise the compaction map memory",
			compact.ErrMapTooSmall, m.Capacity(), cleanable[min(n, len(cleanable)-1)])
	}
	end := cleanable[n-1].last() + 1
	lastOf := map[int64]int64{}
	for _, lasts := range lastOfPiece[:n] {
		for id, last := range lasts {
			lastOf[id] = last
		}
	}
	var objectInputs []*brokerpb.TieredSegment
	var ledgerInputs []*brokerpb.LedgerSegment
	for _, p := range cleanable[:n] {
		if p.object != nil {
			objectInputs = append(objectInputs, p.object)
		} else {
			ledgerInputs = append(ledgerInputs, p.ledger)
		}
	}

	indexed := time.Now()

	// 2. Rewrite: objects into new objects, ledgers into new ledgers
	// (compacted output is written where the data lives).
	rw := &passRewrite{buf: buf, m: m, surv: surv, lastOf: lastOf, last: end - 1,
		opt: compact.Options{NowMs: now.UnixMilli(), DeleteRetentionMs: policy.DeleteRetentionMs, MaxDecompressedBytes: maxDecompressed}}
	objectOutputs, st, err := l.rewriteObjects(ctx, rw, objectInputs)
	if err != nil {
		return res, err
	}
	var outputs []*brokerpb.LedgerSegment
	if len(ledgerInputs) > 0 {
		var lst compact.Stats
		outputs, lst, err = l.rewriteSegments(ctx, rw, readers, ledgerInputs)
		st.Add(lst)
		if err != nil {
			l.deleteObjectOutputs(ctx, objectOutputs)
			return res, err
		}
	}
	res.Stats = st
	rewritten := time.Now()
	failpoint.Hit("compaction.before_cas")

	// 3. One CAS, re-validated against what changed meanwhile.
	casAttempted := false
	var copies []*brokerpb.LedgerSegment // local copies the swap unlinked
	err = l.casUnderSem(ctx, func(pl *brokerpb.PartitionLog) error {
		if opts.MaxDuration > 0 && time.Since(began) > opts.MaxDuration {
			return fmt.Errorf("%w: the pass took %v, more than %v: its outputs may have been swept", ErrCompactionStale,
				time.Since(began).Round(time.Millisecond), opts.MaxDuration)
		}
		if len(objectOutputs) > 0 && time.Since(began) > l.cfg.Tier.OrphanGrace/2 {
			return fmt.Errorf("%w: the pass took %v, more than half the orphan object grace %v: its objects may have been swept",
				ErrCompactionStale, time.Since(began).Round(time.Millisecond), l.cfg.Tier.OrphanGrace)
		}
		// A topic switched off compact meanwhile keeps every record from
		// the switch on (Kafka aborts the cleaning too).
		l.mu.Lock()
		compacting := l.mu.policy.Compact
		l.mu.Unlock()
		if !compacting {
			return fmt.Errorf("%w: cleanup.policy no longer contains compact", ErrCompactionStale)
		}
		var err error
		copies, err = swapCompacted(pl, compactionSwap{
			objectInputs: objectInputs, objectOutputs: objectOutputs, ledgerInputs: ledgerInputs, ledgerOutputs: outputs,
			end: end, nowMs: now.UnixMilli(), tombstoneHorizonMs: st.TombstoneHorizonMs,
		})
		casAttempted = err == nil
		return err
	})
	if err != nil {
		// Nothing names the outputs unless the CAS was sent and its
		// outcome is unknown: then the list decides, and the orphan
		// sweeps delete what it does not name.
		if !casAttempted || errors.Is(err, ErrConflict) {
			dctx, cancel := cleanupContext(ctx)
			l.deleteRemoved(dctx, outputs)
			l.deleteObjectOutputs(dctx, objectOutputs)
			cancel()
		}
		return res, err
	}
	failpoint.Hit("compaction.after_cas")
	l.deleteRemoved(ctx, slices.Concat(copies, ledgerInputs))
	if len(objectInputs) > 0 {
		// Queued by the CAS (T6): collected once Tier.DeleteDelay has
		// passed, now or by a later check.
		if err := l.collectGarbage(ctx); err != nil {
			l.log.Warn("compaction: deleting replaced objects; the garbage queue retries", "err", err)
		}
	}
	res.Ran, res.CleanedOffset = true, end
	res.InputLedgers, res.OutputLedgers = len(ledgerInputs), len(outputs)
	res.InputObjects, res.OutputObjects = len(objectInputs), len(objectOutputs)
	res.Took = time.Since(began)
	l.log.Info("compaction", "reason", d.Reason.String(), "dirty_ratio", d.DirtyRatio, "ledgers_in", len(ledgerInputs),
		"ledgers_out", len(outputs), "objects_in", len(objectInputs), "objects_out", len(objectOutputs), "cleaned_offset", end,
		"bytes_in", st.BytesIn, "bytes_out", st.BytesOut,
		"records_removed", st.RecordsRemoved, "tombstones_dropped", st.TombstonesDropped, "batches_dropped_unread", st.BatchesDroppedUnread,
		"tombstone_horizon_ms", st.TombstoneHorizonMs, "took", res.Took,
		"index_took", indexed.Sub(began), "rewrite_took", rewritten.Sub(indexed))
	return res, nil
}

// compactionSwap is what a pass replaces: leading segment objects by new
// objects, then ledgers by new ledgers, covering offsets up to end.
// tombstoneHorizonMs is the earliest delete horizon of the tombstones its
// outputs keep (0: none).
type compactionSwap struct {
	objectInputs, objectOutputs []*brokerpb.TieredSegment
	ledgerInputs, ledgerOutputs []*brokerpb.LedgerSegment
	end, nowMs                  int64
	tombstoneHorizonMs          int64
}

// swapCompacted applies a pass to pl (pure; the CAS's change): the
// inputs must still be listed, consecutive, and the ledger inputs closed
// and untiered, or ErrCompactionStale (retention or tiering moved
// meanwhile). Replaced objects are queued in pl's garbage list in the same
// change (T6); cleaned_offset moves to end and tombstone_horizon_ms
// becomes the pass's: a pass rewrites every piece below end, and end is
// at least the cleaned_offset it started from (Compact checks it; passes
// on a log are one at a time), beyond which no batch carries a horizon.
// The local copies of the
// replaced objects (ledgers kept for local.retention.ms) hold records the
// pass removed: they are unlinked too, so that fetches read the compacted
// objects, and returned for deletion.
func swapCompacted(pl *brokerpb.PartitionLog, sw compactionSwap) ([]*brokerpb.LedgerSegment, error) {
	oi, li := 0, 0
	if in := sw.objectInputs; len(in) > 0 {
		oi = slices.IndexFunc(pl.Tiered, func(t *brokerpb.TieredSegment) bool { return t.ObjectKey == in[0].ObjectKey })
		if oi < 0 || oi+len(in) > len(pl.Tiered) {
			return nil, fmt.Errorf("%w: object %s is no longer listed", ErrCompactionStale, in[0].ObjectKey)
		}
		for j, o := range in {
			if pl.Tiered[oi+j].ObjectKey != o.ObjectKey {
				return nil, fmt.Errorf("%w: object %s is no longer listed after %s", ErrCompactionStale, o.ObjectKey, in[0].ObjectKey)
			}
		}
	}
	if in := sw.ledgerInputs; len(in) > 0 {
		li = slices.IndexFunc(pl.Segments, func(s *brokerpb.LedgerSegment) bool { return s.LedgerId == in[0].LedgerId })
		if li < 0 || li+len(in) > len(pl.Segments) {
			return nil, fmt.Errorf("%w: ledger %d is no longer listed", ErrCompactionStale, in[0].LedgerId)
		}
		for j, s := range in {
			if cur := pl.Segments[li+j]; cur.LedgerId != s.LedgerId || !cur.Closed {
				return nil, fmt.Errorf("%w: ledger %d is no longer listed after ledger %d", ErrCompactionStale, s.LedgerId, in[0].LedgerId)
			}
		}
		if te := tieredEnd(pl); te > in[0].FirstOffset {
			return nil, fmt.Errorf("%w: offsets up to %d were tiered meanwhile", ErrCompactionStale, te-1)
		}
	}
	if in := sw.objectInputs; len(in) > 0 {
		for _, o := range in {
			pl.Garbage = append(pl.Garbage, &brokerpb.GarbageObject{ObjectKey: o.ObjectKey, SinceMs: sw.nowMs})
		}
		pl.Tiered = slices.Concat(pl.Tiered[:oi], sw.objectOutputs, pl.Tiered[oi+len(in):])
	}
	if in := sw.ledgerInputs; len(in) > 0 {
		pl.Segments = slices.Concat(pl.Segments[:li], sw.ledgerOutputs, pl.Segments[li+len(in):])
	}
	var copies []*brokerpb.LedgerSegment
	if in := sw.objectInputs; len(in) > 0 {
		te, last := tieredEnd(pl), in[len(in)-1].LastOffset
		n := 0
		for n < len(pl.Segments) && pl.Segments[n].FirstOffset < te && pl.Segments[n].LastOffset <= last {
			n++
		}
		copies = slices.Clone(pl.Segments[:n])
		pl.Segments = pl.Segments[n:]
	}
	pl.TombstoneHorizonMs = sw.tombstoneHorizonMs
	pl.CleanedOffset = max(pl.CleanedOffset, sw.end)
	pl.LastCompactionMs = sw.nowMs
	return copies, nil
}

// cleanupContext bounds the deletion of a failed pass's outputs, also
// when the pass's ctx ended (a broker closing): what it does not delete,
// the orphan sweeper does.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// readSegment calls fn with every entry of a closed segment, in order,
// through the pass's own readers (a pass must not evict what fetches read
// ahead).
func (l *Log) readSegment(ctx context.Context, readers *passReaders, s *brokerpb.LedgerSegment,
	fn func(id int64, payload []byte) error) error {
	if s.LastEntryId < 0 {
		return nil
	}
	r, err := readers.open(ctx, l.cfg.Env, s.LedgerId)
	if err != nil {
		return fmt.Errorf("partlog: compaction: opening ledger %d: %w", s.LedgerId, err)
	}
	r.AdvanceLAC(s.LastEntryId)
	err = r.ReadRange(ctx, 0, s.LastEntryId, func(e ledger.Entry) error { return fn(e.ID, e.Payload) })
	if err != nil {
		return fmt.Errorf("partlog: compaction: reading ledger %d: %w", s.LedgerId, err)
	}
	return nil
}

// readersAhead is how many ledgers' readers a pass opens at once.
const readersAhead = 16

// passReaders are a pass's ledger readers: both of its reads of a ledger
// share one. Opening a reader reads the ledger's metadata from metad, a
// linearizable read that costs a Raft barrier; one at a time, a pass
// paid one per ledger. A miss opens the ledger's reader together with
// those of the next readersAhead-1 ledgers the pass may read, whose
// concurrent reads share a barrier.
type passReaders struct {
	byID map[uint64]*ledger.Reader
	next []uint64 // ledgers the pass may read, in order, not opened yet
}

func newPassReaders(pieces []compactPiece) *passReaders {
	rs := &passReaders{byID: map[uint64]*ledger.Reader{}}
	for _, p := range pieces {
		if p.ledger != nil && p.ledger.LastEntryId >= 0 {
			rs.next = append(rs.next, p.ledger.LedgerId)
		}
	}
	return rs
}

// open returns ledger id's reader, opening it (and the next ones) on a
// miss. The next ones' failures are dropped: a pass that reaches one
// opens it again, alone, and fails then.
func (rs *passReaders) open(ctx context.Context, env ledger.Env, id uint64) (*ledger.Reader, error) {
	if r := rs.byID[id]; r != nil {
		return r, nil
	}
	ids := []uint64{id}
	if i := slices.Index(rs.next, id); i >= 0 {
		n := min(i+readersAhead, len(rs.next))
		ids = append(ids, rs.next[i+1:n]...)
		rs.next = slices.Delete(rs.next, i, n)
	}
	readers, errs := make([]*ledger.Reader, len(ids)), make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { readers[i], errs[i] = ledger.OpenReader(ctx, env, id) })
	}
	wg.Wait()
	for i, id := range ids {
		if errs[i] == nil {
			rs.byID[id] = readers[i]
		}
	}
	return readers[0], errs[0]
}

// readPiece calls fn with every batch of a closed compactPiece, in order: a
// ledger's entries (readSegment) or an object's batches (readObject).
//
// keeps: fn keeps the batches it is given (else their memory is reused
// once it returns). A failure to read a piece that is no longer listed
// (retention or tiering unlinked it while the pass read it) is
// ErrCompactionStale. pace holds the reads to the pass's rate.
func (l *Log) readPiece(ctx context.Context, readers *passReaders, pace *ctxtime.Pacer, p compactPiece, keeps bool,
	each func(id int64, payload []byte) error) error {
	fn := func(id int64, payload []byte) error {
		if err := pace.Wait(ctx, len(payload)); err != nil {
			return err
		}
		return each(id, payload)
	}
	var err error
	if p.object != nil {
		err = l.readObject(ctx, p.object, keeps, fn)
	} else {
		err = l.readSegment(ctx, readers, p.ledger, fn)
	}
	if err != nil && !l.listed(p) {
		return fmt.Errorf("%w: %v was unlisted while the pass read it: %w", ErrCompactionStale, p, err)
	}
	return err
}

// listed reports whether the log's list still names p.
func (l *Log) listed(p compactPiece) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.object != nil {
		return slices.ContainsFunc(l.mu.pl.GetTiered(), func(t *brokerpb.TieredSegment) bool { return t.ObjectKey == p.object.ObjectKey })
	}
	return slices.ContainsFunc(l.mu.pl.GetSegments(), func(s *brokerpb.LedgerSegment) bool { return s.LedgerId == p.ledger.LedgerId })
}

// compactReadBytes is the size of a pass's reads of an object (a
// variable for tests).
var compactReadBytes int64 = 8 << 20

// compactCarryBytes is the room kept before each read's bytes for the
// partial batch the previous read ended in, so that it is joined to the
// rest without copying the read (a larger one is copied).
const compactCarryBytes = 1 << 20

// readObject calls fn with every batch of a committed object, in order
// (id: the batch's number in it). It reads the store directly, not
// through the tier reader's chunk cache, for the reason readSegment has
// its own readers: a pass must not evict what consumers read; segfile
// checks every batch (CRC-32C, offsets, index) as a fetch does, and a
// missing or damaged object fails the pass (T10).
//
// The data section is read front to back in compactReadBytes ranges, the
// next one downloading while fn works on the current one. Unless fn keeps
// the batches, a range's memory goes to the next read once fn is done
// with it.
func (l *Log) readObject(ctx context.Context, seg *brokerpb.TieredSegment, keeps bool, fn func(id int64, payload []byte) error) error {
	rr := objectRange{l.cfg.Tier.Store, seg.ObjectKey, l.cfg.Tier.RequestTimeout}
	tail, err := segfile.ReadTail(ctx, rr, seg.IndexPos, seg.SizeBytes)
	if err != nil {
		return fmt.Errorf("partlog: compaction: reading object %s: %w", seg.ObjectKey, err)
	}
	end := tail.DataEnd()
	rctx, cancel := context.WithCancel(ctx)
	next := startRangeRead(rctx, rr, segfile.HeaderSize, end, !keeps)
	var prev *rangeRead // the range fn last worked on
	defer func() {
		cancel()
		if next != nil {
			<-next.done
		}
		if !keeps {
			prev.recycle()
			next.recycle()
		}
	}()
	var it *segfile.Iterator
	var carry []byte // the partial batch the last range ended in
	id := int64(0)
	for next != nil {
		cur := next
		if <-cur.done; cur.err != nil {
			next = nil
			return fmt.Errorf("partlog: compaction: reading object %s at %d: %w", seg.ObjectKey, cur.pos, cur.err)
		}
		next = startRangeRead(rctx, rr, cur.pos+int64(len(cur.data)), end, !keeps)
		l.metrics.TierReadBytes.Add(float64(len(cur.data)))
		buf := cur.join(carry) // carry copied: prev is no longer needed
		if !keeps {
			prev.recycle()
		}
		prev = cur
		if it == nil {
			it = tail.Batches(buf, segfile.HeaderSize)
		} else {
			it.Continue(buf)
		}
		for it.Next() {
			if err := fn(id, it.Batch().Bytes); err != nil {
				return err
			}
			id++
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("partlog: compaction: reading object %s: %w", seg.ObjectKey, err)
		}
		carry = buf[it.Pos()-(cur.pos-int64(len(carry))):]
	}
	if it == nil {
		return fmt.Errorf("%w: object %s: no data section", ErrCorruptBatch, seg.ObjectKey)
	}
	if !it.Done() {
		return fmt.Errorf("%w: object %s: the data section ends inside a batch at %d", ErrCorruptBatch, seg.ObjectKey, it.Pos())
	}
	return nil
}

// rangeRead is one compactReadBytes read of an object's data section,
// made in the background. data is read into space with carryRoom bytes
// before it (join).
type rangeRead struct {
	pos       int64
	space     []byte
	carryRoom int // bytes of space in front of data
	data      []byte
	err       error
	done      chan struct{}
}

// rangeBuffers holds the spaces (*[]byte, compactCarryBytes +
// compactReadBytes) of ranges whose batches nobody kept.
var rangeBuffers sync.Pool

// startRangeRead starts reading [pos, min(pos+compactReadBytes, end));
// nil when pos is end. pooled: its space comes from rangeBuffers.
func startRangeRead(ctx context.Context, rr objectRange, pos, end int64, pooled bool) *rangeRead {
	if pos >= end {
		return nil
	}
	r := &rangeRead{pos: pos, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		n := min(compactReadBytes, end-pos)
		rc, done, err := rr.open(ctx, pos, n)
		if err != nil {
			r.err = err
			return
		}
		defer done()
		// A pooled space has room in front for the carry of a batch
		// straddling the range before; a kept one (its batches stay in the
		// pass buffer, which counts data bytes only) is exactly the range:
		// a carry is joined to it by a copy.
		if pooled {
			r.carryRoom = compactCarryBytes
		}
		r.space = rangeSpace(int64(r.carryRoom)+n, pooled)
		if _, err := io.ReadFull(rc, r.space[r.carryRoom:]); err != nil {
			r.err = err
			return
		}
		r.data = r.space[r.carryRoom:]
	}()
	return r
}

// rangeSpace returns n bytes (not zeroed when pooled).
func rangeSpace(n int64, pooled bool) []byte {
	if !pooled {
		return make([]byte, n)
	}
	if b, ok := rangeBuffers.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		return (*b)[:n]
	}
	return make([]byte, n, compactCarryBytes+compactReadBytes)
}

// recycle gives the range's space to later reads; nothing may use the
// range's bytes after it.
func (r *rangeRead) recycle() {
	if r == nil || r.space == nil {
		return
	}
	<-r.done
	b := r.space
	r.space, r.data = nil, nil
	rangeBuffers.Put(&b)
}

// join returns carry followed by the range's bytes.
func (r *rangeRead) join(carry []byte) []byte {
	if len(carry) == 0 {
		return r.data
	}
	if len(carry) > r.carryRoom {
		return slices.Concat(carry, r.data)
	}
	buf := r.space[r.carryRoom-len(carry):]
	copy(buf, carry)
	return buf
}

// groupObjects splits consecutive objects into the groups a pass writes
// one output object for: as many as hold at most segmentBytes of data
// together, at least one (Kafka's groupSegmentsBySize). Grouping by input
// size bounds each output; outputs smaller than segmentBytes are merged
// by later passes.
func groupObjects(objects []*brokerpb.TieredSegment, segmentBytes int64) [][]*brokerpb.TieredSegment {
	var groups [][]*brokerpb.TieredSegment
	var bytes int64
	for i, o := range objects {
		if i == 0 || bytes+o.DataBytes > segmentBytes {
			groups = append(groups, nil)
			bytes = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], o)
		bytes += o.DataBytes
	}
	return groups
}

// rewriteObjects rewrites inputs (consecutive committed objects) into new
// objects, one per group (groupObjects), each verified as an upload is
// (putObject, T8) and covering its group's offsets exactly: batches keep
// their offsets, and an output whose last batch is gone ends with an
// empty one (compact.EndBatch), so the list stays contiguous (T3). last is
// the pass's last offset (its batch is kept, P7). On error the outputs
// made so far are deleted.
func (l *Log) rewriteObjects(ctx context.Context, rw *passRewrite, inputs []*brokerpb.TieredSegment) (
	outputs []*brokerpb.TieredSegment, total compact.Stats, err error) {
	if len(inputs) == 0 {
		return nil, total, nil
	}
	defer func() {
		if err != nil {
			l.deleteObjectOutputs(ctx, outputs)
			outputs = nil
		}
	}()
	for _, group := range groupObjects(inputs, l.cfg.Tier.SegmentBytes) {
		var sources []uint64
		for _, o := range group {
			sources = append(sources, o.SourceLedgers...)
		}
		var st compact.Stats
		seg, err := l.putObject(ctx, group[0].BaseOffset, group[len(group)-1].LastOffset, true, sources,
			func(ctx context.Context, out *objectOutput) error {
				for _, o := range group {
					// An output whose records all went still ends with
					// an empty batch stamped with its inputs' newest
					// time, like a compacted ledger's: its retention
					// clock is its records', not the pass's.
					out.maxTs = max(out.maxTs, o.MaxTimestampMs)
					p := compactPiece{object: o}
					err := rw.buf.read(ctx, l, nil, p, func(id int64, payload []byte, kept bool) error {
						nb, bst, err := rw.batch(ctx, p, id, payload, kept)
						st.Add(bst)
						if err != nil || nb == nil {
							return err
						}
						return out.append(nb)
					})
					if err != nil {
						return err
					}
				}
				return nil
			})
		total.Add(st) // putObject returned: its writer is done with st
		if err != nil {
			return outputs, total, fmt.Errorf("partlog: compaction: %w", err)
		}
		outputs = append(outputs, seg)
	}
	return outputs, total, nil
}

// deleteObjectOutputs deletes objects a pass wrote that no list names
// (also when ctx ended); what fails, the orphan sweep deletes.
func (l *Log) deleteObjectOutputs(ctx context.Context, outputs []*brokerpb.TieredSegment) {
	if len(outputs) == 0 {
		return
	}
	keys := make([]string, len(outputs))
	for i, o := range outputs {
		keys[i] = o.ObjectKey
	}
	dctx, cancel := cleanupContext(ctx)
	defer cancel()
	l.deleteObjects(dctx, keys)
}

// rewriteSegments rewrites inputs (consecutive closed segments) into new
// closed ledgers, one batch per entry, each with its index written. An
// output covers whole inputs: it is cut at an input boundary once it
// holds SegmentBytes. Each output keeps the offset range of its inputs
// (first of the first, last of the last), so the list stays contiguous
// over offsets whatever the batches inside. The range ends with a batch at
// its last offset (P7): its last batch, kept empty for a producer, or else
// compact.EndBatch, as a compacted object ends. That matters when the
// range's last records go and nothing is written after them (a pass that
// drops expired tombstones): a fetch in the hole must still find a batch
// below the high watermark. On error the outputs made so far are deleted.
func (l *Log) rewriteSegments(ctx context.Context, rw *passRewrite, readers *passReaders, inputs []*brokerpb.LedgerSegment) (
	outputs []*brokerpb.LedgerSegment, total compact.Stats, err error) {
	defer func() {
		if err != nil {
			// Also when ctx ended: nothing lists them.
			dctx, cancel := cleanupContext(ctx)
			l.deleteRemoved(dctx, outputs)
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
		p := compactPiece{ledger: s}
		err := rw.buf.read(ctx, l, readers, p, func(id int64, payload []byte, kept bool) error {
			nb, st, err := rw.batch(ctx, p, id, payload, kept)
			total.Add(st)
			if err != nil || nb == nil {
				return err
			}
			return out.append(ctx, nb)
		})
		if err != nil {
			out.discard(l)
			return outputs, total, err
		}
		if n := len(out.entries); i == len(inputs)-1 && (n == 0 || out.entries[n-1].last < end) {
			if err := out.append(ctx, compact.EndBatch(end, out.maxTs)); err != nil {
				out.discard(l)
				return outputs, total, err
			}
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
