package partlog

import (
	"context"
	"errors"
	"fmt"
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

	pl, version, err := ReadPartitionLog(ctx, cfg.Store, cfg.Topic, cfg.Partition)
	switch {
	case errors.Is(err, metaclient.ErrNotFound):
		pl, version = &brokerpb.PartitionLog{}, 0
	case err != nil:
		return nil, err
	}
	if pl.GetOwnerEpoch() > cfg.Epoch {
		return nil, &EpochBehindError{Key: PartitionKey(cfg.Topic, cfg.Partition), Recorded: pl.GetOwnerEpoch(), Ours: cfg.Epoch}
	}
	producers := newProducerTable(pl.GetProducers())
	segs := slices.Clone(pl.GetSegments())
	var empty []uint64
	var with []Record // the recovered segments' indexes, then the claim
	indexes := map[uint64]*brokerpb.LedgerIndex{}
	for i := max(0, len(segs)-2); i < len(segs); i++ {
		if segs[i].GetClosed() {
			continue
		}
		seg, idx, err := l.recoverSegment(ctx, segs[i], producers)
		if err != nil {
			return nil, err
		}
		if seg == nil {
			empty = append(empty, segs[i].GetLedgerId())
		} else {
			r, err := indexRecord(seg.GetLedgerId(), idx)
			if err != nil {
				return nil, err
			}
			with = append(with, r)
			indexes[seg.GetLedgerId()] = idx
		}
		segs[i] = seg
	}
	if cfg.Claim != nil {
		with = append(with, *cfg.Claim)
	}
	segs = slices.DeleteFunc(segs, func(s *brokerpb.LedgerSegment) bool { return s == nil })
	next := max(pl.GetLogStartOffset(), TieredEnd(pl))
	if n := len(segs); n > 0 {
		next = segs[n-1].GetLastOffset() + 1
	}

	// No ledger is created here (P8): an idle partition holds none until
	// its first append (openLedger). The CAS still records owner_epoch,
	// so a previous owner's later list changes fail.
	now := cfg.Now()
	producers.expire(now, cfg.ProducerExpiry)
	newPL := &brokerpb.PartitionLog{
		OwnerEpoch: cfg.Epoch, LogStartOffset: pl.GetLogStartOffset(),
		Segments: segs, Producers: producers.snapshot(now, cfg.ProducerExpiry),
		Tiered: pl.GetTiered(), Garbage: pl.GetGarbage(),
		// Compaction's progress survives the takeover (P7).
		CleanedOffset: pl.GetCleanedOffset(), LastCompactionMs: pl.GetLastCompactionMs(),
		TombstoneHorizonMs: pl.GetTombstoneHorizonMs(),
		LeaderEpochs:       withLeaderEpoch(pl.GetLeaderEpochs(), cfg.Epoch, next, pl.GetLogStartOffset()),
	}
	newVersion, written, err := casPartitionLogWith(ctx, cfg.Store, cfg.Topic, cfg.Partition, newPL, version, with)
	if err != nil {
		if !errors.Is(err, ErrConflict) {
			err = fmt.Errorf("%w: taking over %s/%d: %w", ErrUnknownOutcome, cfg.Topic, cfg.Partition, err)
		}
		return nil, err
	}
	for id, idx := range indexes {
		l.reads.putIndex(id, idx)
	}
	if cfg.Claim != nil {
		l.claimed = written[len(written)-1]
	}
	for _, id := range empty {
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

func newLog(cfg Config) *Log {
	l := &Log{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "partlog", "topic", cfg.Topic, "partition", cfg.Partition),
		metrics:   cfg.Metrics,
		appendSem: make(chan struct{}, 1),
		failed:    make(chan struct{}),
		rollKick:  make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	l.bgCtx, l.bgCancel = context.WithCancel(context.Background())
	l.reads.init(cfg)
	l.mu.levelWait = make(map[*pendingAppend]struct{})
	l.mu.limits = Limits{SegmentBytes: cfg.SegmentBytes, SegmentAge: cfg.SegmentAge, MaxBatchBytes: cfg.MaxBatchBytes,
		Ensemble: cfg.Ensemble, WriteQuorum: cfg.WriteQuorum, AckQuorum: cfg.AckQuorum}
	l.mu.policy = cfg.Policy
	l.mu.hwChanged = make(chan struct{})
	l.mu.producersChanged = make(chan struct{})
	l.mu.closed = make(chan struct{})
	return l
}

// recoverSegment fences and recovers a segment's ledger and returns the
// segment closed with its final numbers and its index (nil, nil when it
// holds no entry); its batches are applied to producers.
func (l *Log) recoverSegment(ctx context.Context, seg *brokerpb.LedgerSegment, producers *producerTable) (*brokerpb.LedgerSegment, *brokerpb.LedgerIndex, error) {
	id := seg.GetLedgerId()
	var entries []entryInfo
	want := seg.GetFirstOffset()
	// Recovery hands over the entries it reads, so the ledger is read
	// once, not again to index it.
	_, err := ledger.RecoverVisit(ctx, l.cfg.Env, id, func(e ledger.Entry) error {
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
			producers.apply(h, h.BaseOffset, nil, max(seg.GetCreatedAtMs(), h.MaxTimestamp))
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("partlog: %s/%d: recovering ledger %d: %w", l.cfg.Topic, l.cfg.Partition, id, err)
	}
	if len(entries) == 0 {
		return nil, nil, nil
	}
	closed := segmentProto(id, seg.GetFirstOffset(), seg.GetCreatedAtMs(), entries, true)
	l.log.Debug("recovered segment", "ledger", id, "first_offset", closed.FirstOffset, "last_offset", closed.LastOffset,
		"entries", len(entries))
	return proto.Clone(closed).(*brokerpb.LedgerSegment), buildIndex(entries, l.cfg.IndexIntervalBytes), nil
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
