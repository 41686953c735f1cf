package partlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
	"github.com/strata-log/strata/recordbatch"
)

// Open takes the partition over (DESIGN §5) and returns when the log is
// ready to serve:
//
//  1. read the PartitionLog (absent: an empty one, created by the CAS);
//  2. every segment among the last two that is not closed: fence and
//     recover its ledger (ledger.Recover), read its entries to learn its
//     final numbers and replay its batches into the producer state (which
//     starts from the PartitionLog's snapshot), build its LedgerIndex; an
//     empty one is dropped from the list;
//  3. CAS the list once: recovered segments closed, owner_epoch and its
//     place in the leader epoch history (P10), producer snapshot; no ledger is created until the first append
//     (P8), so the log has no open segment yet. The recovered segments'
//     indexes and cfg.Claim are written in the same metad transaction;
//  4. delete the dropped empty ledgers.
//
// Errors: ErrConflict when the list changed meanwhile (another broker
// took over), ErrFenced when it records a newer owner epoch, or the
// store's / ledger's error. On error nothing is left open.
func Open(ctx context.Context, cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	began := time.Now()
	l := newLog(cfg)
	pl, version, err := readForTakeover(ctx, cfg)
	if err != nil {
		return nil, err
	}
	producers := newProducerTable(pl.GetProducers())
	rec, err := recoverOpenSegments(ctx, cfg, l.log, pl.GetSegments(), producers)
	if err != nil {
		return nil, err
	}
	with := rec.indexes
	if cfg.Claim != nil {
		with = append(with, *cfg.Claim)
	}
	next := max(pl.GetLogStartOffset(), TieredEnd(pl))
	if n := len(rec.segs); n > 0 {
		next = rec.segs[n-1].GetLastOffset() + 1
	}
	newPL := takeoverList(cfg, pl, rec.segs, producers, next)
	newVersion, written, err := casPartitionLogWith(ctx, cfg.Store, cfg.Topic, cfg.Partition, newPL, version, with)
	if err != nil {
		if !errors.Is(err, ErrConflict) {
			err = fmt.Errorf("%w: taking over %s/%d: %w", ErrUnknownOutcome, cfg.Topic, cfg.Partition, err)
		}
		return nil, err
	}
	for id, idx := range rec.indexByID {
		l.reads.putIndex(id, idx)
	}
	if cfg.Claim != nil {
		l.claimed = written[len(written)-1]
	}
	for _, id := range rec.empty {
		if err := ledger.Delete(ctx, cfg.Env, id); err != nil {
			l.log.Warn("deleting an empty recovered ledger", "ledger", id, "err", err)
		}
	}
	l.mu.pl, l.mu.version = newPL, newVersion
	l.mu.seg = openSegment{first: next}
	l.mu.next, l.mu.hw = next, next
	l.mu.producers = producers
	cfg.Metrics.TakeoverDuration.Observe(time.Since(began).Seconds())
	l.log.Debug("partition taken over", "epoch", cfg.Epoch, "next_offset", next,
		"segments", len(newPL.Segments), "producers", len(newPL.Producers), "took", time.Since(began))
	return l, nil
}

// readForTakeover reads the PartitionLog to take over (absent: an empty
// one at version 0, which the takeover's CAS creates), refusing one that
// records a newer owner epoch.
func readForTakeover(ctx context.Context, cfg Config) (*brokerpb.PartitionLog, int64, error) {
	pl, version, err := ReadPartitionLog(ctx, cfg.Store, cfg.Topic, cfg.Partition)
	switch {
	case errors.Is(err, metaclient.ErrNotFound):
		pl, version = &brokerpb.PartitionLog{}, 0
	case err != nil:
		return nil, 0, err
	}
	if pl.GetOwnerEpoch() > cfg.Epoch {
		return nil, 0, &EpochBehindError{Key: PartitionKey(cfg.Topic, cfg.Partition), Recorded: pl.GetOwnerEpoch(), Ours: cfg.Epoch}
	}
	return pl, version, nil
}

// recovered is what a takeover learnt from the segments it recovered.
type recovered struct {
	// segs: the list's segments, the recovered ones closed with their
	// final numbers, the empty ones dropped.
	segs []*brokerpb.LedgerSegment
	// empty: the dropped ledgers (deleted after the CAS).
	empty []uint64
	// indexes: the recovered segments' indexes as records for the CAS;
	// indexByID the same for the read path's cache.
	indexes   []Record
	indexByID map[uint64]*brokerpb.LedgerIndex
}

// recoverOpenSegments recovers every segment among the last two of segs
// that is not closed (recoverSegment), replaying their batches into
// producers. segs is not modified.
func recoverOpenSegments(ctx context.Context, cfg Config, log *slog.Logger, segs []*brokerpb.LedgerSegment,
	producers *producerTable) (recovered, error) {
	rec := recovered{segs: slices.Clone(segs), indexByID: map[uint64]*brokerpb.LedgerIndex{}}
	for i := max(0, len(rec.segs)-2); i < len(rec.segs); i++ {
		if rec.segs[i].GetClosed() {
			continue
		}
		seg, idx, err := recoverSegment(ctx, cfg, log, rec.segs[i], producers)
		if err != nil {
			return recovered{}, err
		}
		if seg == nil {
			rec.empty = append(rec.empty, rec.segs[i].GetLedgerId())
		} else {
			r, err := indexRecord(seg.GetLedgerId(), idx)
			if err != nil {
				return recovered{}, err
			}
			rec.indexes = append(rec.indexes, r)
			rec.indexByID[seg.GetLedgerId()] = idx
		}
		rec.segs[i] = seg
	}
	rec.segs = slices.DeleteFunc(rec.segs, func(s *brokerpb.LedgerSegment) bool { return s == nil })
	return rec, nil
}

// takeoverList is the list a takeover CASes: pl with segs, this owner's
// epoch and its place in the leader epoch history (P10), the producer
// snapshot; compaction's progress survives the takeover (P7). No ledger
// is created here (P8): an idle partition holds none until its first
// append (openLedger). The CAS still records owner_epoch, so a previous
// owner's later list changes fail.
func takeoverList(cfg Config, pl *brokerpb.PartitionLog, segs []*brokerpb.LedgerSegment, producers *producerTable,
	next int64) *brokerpb.PartitionLog {
	now := cfg.Now()
	producers.expire(now, cfg.ProducerExpiry)
	return &brokerpb.PartitionLog{
		OwnerEpoch: cfg.Epoch, LogStartOffset: pl.GetLogStartOffset(),
		Segments: segs, Producers: producers.snapshot(now, cfg.ProducerExpiry),
		Tiered: pl.GetTiered(), Garbage: pl.GetGarbage(),
		CleanedOffset: pl.GetCleanedOffset(), LastCompactionMs: pl.GetLastCompactionMs(),
		TombstoneHorizonMs: pl.GetTombstoneHorizonMs(),
		LeaderEpochs:       withLeaderEpoch(pl.GetLeaderEpochs(), cfg.Epoch, next, pl.GetLogStartOffset()),
	}
}

func newLog(cfg Config) *Log {
	l := &Log{
		cfg:       cfg,
		log:       Logger(cfg),
		metrics:   cfg.Metrics,
		appendSem: make(chan struct{}, 1),
		failed:    make(chan struct{}),
		stop:      make(chan struct{}),
	}
	l.rolls = roller{l: l, kick: make(chan struct{}, 1)}
	l.bgCtx, l.bgCancel = context.WithCancel(context.Background())
	l.reads.init(cfg)
	l.mu.levelWait = make(map[*pendingAppend]struct{})
	l.mu.limits = Limits{SegmentBytes: cfg.SegmentBytes, SegmentAge: cfg.SegmentAge, MaxBatchBytes: cfg.MaxBatchBytes,
		MaxCompressionRatio: cfg.MaxCompressionRatio, Ensemble: cfg.Ensemble, WriteQuorum: cfg.WriteQuorum, AckQuorum: cfg.AckQuorum}
	l.mu.policy = cfg.Policy
	l.mu.hwChanged = make(chan struct{})
	l.mu.producersChanged = make(chan struct{})
	l.mu.closed = make(chan struct{})
	return l
}

// recoverSegment fences and recovers a segment's ledger and returns the
// segment closed with its final numbers and its index (nil, nil when it
// holds no entry); its batches are applied to producers.
func recoverSegment(ctx context.Context, cfg Config, log *slog.Logger, seg *brokerpb.LedgerSegment,
	producers *producerTable) (*brokerpb.LedgerSegment, *brokerpb.LedgerIndex, error) {
	id := seg.GetLedgerId()
	var entries []entryInfo
	want := seg.GetFirstOffset()
	appended := replayClock{at: seg.GetCreatedAtMs(), now: cfg.Now().UnixMilli()}
	// Recovery hands over the entries it reads, so the ledger is read
	// once, not again to index it.
	_, err := ledger.RecoverVisit(ctx, cfg.Env, id, func(e ledger.Entry) error {
		h, err := recordbatch.ParseHeader(e.Payload)
		if err != nil {
			return fmt.Errorf("%w: ledger %d entry %d: %w", ErrCorruptBatch, id, e.ID, err)
		}
		if h.BaseOffset != want {
			return fmt.Errorf("%w: ledger %d entry %d has base offset %d, want %d", ErrCorruptBatch, id, e.ID, h.BaseOffset, want)
		}
		want = h.LastOffset() + 1
		entries = append(entries, newEntryInfo(h, len(e.Payload), entries))
		if h.ProducerID >= 0 {
			producers.apply(h, h.BaseOffset, nil, appended.next(h.MaxTimestamp))
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("partlog: %s/%d: recovering ledger %d: %w", cfg.Topic, cfg.Partition, id, err)
	}
	if len(entries) == 0 {
		return nil, nil, nil
	}
	closed := segmentProto(id, seg.GetFirstOffset(), seg.GetCreatedAtMs(), entries, true)
	log.Debug("recovered segment", "ledger", id, "first_offset", closed.FirstOffset, "last_offset", closed.LastOffset,
		"entries", len(entries))
	return proto.Clone(closed).(*brokerpb.LedgerSegment), buildIndex(entries, cfg.IndexIntervalBytes), nil
}

// DiscardLedger closes and deletes a ledger no list names (a lost CAS, a
// compaction output that was not swapped in).
func DiscardLedger(cfg Config, w *ledger.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.Close(ctx)
	if err := ledger.Delete(ctx, cfg.Env, w.ID()); err != nil {
		cfg.Logger.Warn("deleting an unlisted ledger", "ledger", w.ID(), "err", err)
	}
}

// Claimed returns Config.Claim as Open wrote it (its version and mod
// revision), or nil when the log was opened without one.
func (l *Log) Claimed() *metadpb.KeyValue { return l.claimed }

// replayClock estimates when each batch of a replayed segment was
// appended (the broker's append time is not stored): a batch's max
// timestamp, which its producer chose, kept between the estimate of the
// batch before it (append times only grow along a ledger; the first is
// bounded by the segment's creation) and the replay's own clock. The
// estimates therefore follow the order the batches were appended in, so a
// producer cannot rank itself as more recently active than producers
// that appended after it by writing timestamps in the future, and have
// them evicted in its place (producerTable.longestIdle).
type replayClock struct {
	at, now int64
}

func (c *replayClock) next(maxTimestamp int64) int64 {
	c.at = min(max(c.at, maxTimestamp), c.now)
	return c.at
}
