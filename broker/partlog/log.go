package partlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
	"github.com/strata-log/strata/recordbatch"
)

// Log is a partition's log on its owner. See the package doc for the
// invariants and the lock discipline.
type Log struct {
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	// claimed is cfg.Claim as Open wrote it (nil without one).
	claimed *metadpb.KeyValue

	// appendSem is a one-slot semaphore: held to hand an append to the
	// writer (offset order = entry order) and for a whole roll or Close.
	appendSem chan struct{}
	// failed is closed when the log fails (P3).
	failed chan struct{}
	// stop ends run; bgCtx bounds its I/O.
	stop     chan struct{}
	bgCtx    context.Context
	bgCancel context.CancelFunc
	wg       sync.WaitGroup
	// rolls: the goroutine that rolls the open segment (P4, P8).
	rolls roller

	reads readState
	// onSequenceGap, when set (by a test, before the log is used), is
	// called as an append begins waiting for the batches before it.
	onSequenceGap func()

	mu struct {
		// limits: the topic settings that may change while the log is
		// served (SetLimits).
		limits Limits
		// policy: retention and the timestamp bound (SetPolicy);
		// lastRetention: when retention last looked at the log.
		policy        Policy
		lastRetention time.Time
		// room: the stored list's room for one more segment (L1).
		room listRoom
		sync.Mutex
		// pl is the PartitionLog as stored at version (never modified:
		// replaced by a new one at each CAS).
		pl      *brokerpb.PartitionLog
		version int64
		writer  *ledger.Writer
		seg     openSegment
		// next is the offset the next batch gets.
		next int64
		// hw: the high watermark (P2).
		hw int64
		// pending: appends handed to the writer, not yet acknowledged at
		// the quorum, in entry order.
		pending []*pendingAppend
		// levelWait: acknowledged appends whose caller still waits for
		// AcksAll (or an AcksOne reply that has not come).
		levelWait map[*pendingAppend]struct{}
		producers *producerTable
		// producersChanged is closed (and replaced) when producers changes.
		producersChanged chan struct{}
		hwChanged        chan struct{}
		// err is terminal (P3); closing: Close was called.
		err error
		// failHooks run when err is set (AfterFail).
		failHooks []*func()
		closing   bool
		closed    chan struct{} // closed when Close finished
		closeErr  error
	}
}

// openSegment is the open segment's in-memory state: its entry index
// (for fetch) and live numbers.
type openSegment struct {
	ledgerID    uint64
	first       int64
	createdAtMs int64
	// entries: every entry handed to the writer; entries[:acked] are
	// acknowledged and never change.
	entries    []entryInfo
	acked      int
	bytes      int64 // of entries
	lastAppend time.Time
}

// pendingAppend is a batch handed to the writer.
type pendingAppend struct {
	entryID    int64
	ledgerID   uint64
	base, last int64
	records    int32
	batch      []byte
	acks       Acks
	start      time.Time
	// quorum is closed when the entry is acknowledged at the quorum or
	// fails (err set before).
	quorum chan struct{}
	// stalled is the writer's Stalled channel as the entry was handed to
	// it: Wait answers early once it closes (P9).
	stalled <-chan struct{}
	err     error
	// replied is closed when the caller's level is reached or failed
	// (replyErr set before).
	replied  chan struct{}
	replyErr error
	// undo reverts enqueue (REQUIRES: l.mu held).
	undo func()
	// producerBatch is the producer state's record of this batch.
	producerBatch *producerBatch
	// levelDone: the level callback ran (AcksOne can come before the
	// quorum).
	levelDone bool
}

// AppendResult is the outcome of an Append.
type AppendResult struct {
	BaseOffset, LastOffset, LogStartOffset int64
	// Duplicate: a retry of a batch already written; the offsets are the
	// original ones and nothing was appended.
	Duplicate bool
}

// Append verifies batch (exactly one v2 batch), deduplicates idempotent
// producers, stamps the base offset and the owner epoch in place (the
// caller gives up the slice) and appends it as one ledger entry. It
// returns when acks is reached; with AcksNone after the hand-off, with
// BaseOffset -1. See errors.go for the errors. It is Enqueue, then Wait.
func (l *Log) Append(ctx context.Context, batch []byte, acks Acks) (AppendResult, error) {
	a, err := l.Enqueue(ctx, batch, acks)
	if err != nil {
		return AppendResult{}, err
	}
	return a.Wait(ctx)
}

// Appending is an append that has its place in the log (Enqueue returned)
// and waits for its acknowledgement (Wait).
type Appending struct {
	l *Log
	// p: the batch handed to the writer; dup: or the original of a
	// retried batch (nil for AcksNone, which has nothing to wait for).
	p   *pendingAppend
	dup *producerBatch
}

// Enqueue is the first half of Append: it verifies the batch, gives it its
// offsets and hands it to the ledger writer, and returns once the batch's
// place in the log is fixed. Batches enqueued one after the other (the
// second Enqueue called after the first returned) get offsets in that
// order, whatever order their Waits run in: a protocol that answers a
// connection's requests in order enqueues them in order and waits for
// their acknowledgements concurrently.
func (l *Log) Enqueue(ctx context.Context, batch []byte, acks Acks) (*Appending, error) {
	start := l.cfg.Now()
	snap := l.Snapshot()
	h, err := verifyBatch(batch, snap.Limits, snap.Policy.MaxTimestampAheadMs, start)
	if err != nil {
		return nil, err
	}
	if acks < AcksQuorum || acks > AcksAll {
		return nil, fmt.Errorf("partlog: unknown acks %d", acks)
	}
	p, dup, err := l.place(ctx, h, batch, acks, start)
	if err != nil {
		return nil, err
	}
	return &Appending{l: l, p: p, dup: dup}, nil
}

// verifyBatch checks a batch before it is placed: size, CRC, timestamps
// (a newest record more than aheadMs after now: -1, no bound) and records,
// under the limits lim (a pure function).
func verifyBatch(batch []byte, lim Limits, aheadMs int64, now time.Time) (recordbatch.BatchHeader, error) {
	maxBytes := lim.MaxBatchBytes
	if len(batch) > maxBytes {
		return recordbatch.BatchHeader{}, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(batch), maxBytes)
	}
	h, err := recordbatch.Verify(batch)
	if err != nil {
		return recordbatch.BatchHeader{}, fmt.Errorf("%w: %w", ErrCorruptBatch, err)
	}
	// Every batch, LogAppendTime ones too: no broker stamps its own time
	// into a batch, so their MaxTimestamp is the producer's as well, and a
	// far-future one would pin time retention for everything after it.
	if err := checkTimestamp(h.MaxTimestamp, aheadMs, now); err != nil {
		return recordbatch.BatchHeader{}, err
	}
	// The decompressed records are bounded by a multiple of the batch's
	// size: see validate.go.
	if err := validateRecords(batch, h, lim.MaxCompressionRatio); err != nil {
		return recordbatch.BatchHeader{}, err
	}
	return h, nil
}

// place enqueues a verified batch and hands it to the writer, waiting up
// to SequenceGapWait for the batches before an idempotent producer's
// batch to arrive; or finds it a duplicate (dup set, p nil).
func (l *Log) place(ctx context.Context, h recordbatch.BatchHeader, batch []byte, acks Acks, start time.Time) (*pendingAppend, *producerBatch, error) {
	gapDeadline := time.Now().Add(l.cfg.SequenceGapWait)
	for {
		if err := l.acquireAppend(ctx); err != nil {
			return nil, nil, err
		}
		// Refusing an append the writer could not acknowledge
		// (ledger.Writer.CanAcknowledge), rather than queueing it behind
		// bookies that are down or full, keeps its outcome known: a
		// produce would otherwise wait for its timeout and be told
		// "unknown outcome" (P9). Before a roll for size: sealing waits
		// for the writer's entries, which wait for those bookies.
		if !l.canAcknowledge() {
			l.release()
			return nil, nil, ErrNotEnoughBookies
		}
		if err := l.rollIfFull(len(batch)); err != nil {
			l.release()
			return nil, nil, err
		}
		// The background context, as for a roll: the CAS that lists
		// the new ledger must not be cut short by one caller.
		if err := (rolling{l}).openLedger(l.bgCtx); err != nil {
			l.release()
			return nil, nil, err
		}
		p, dup, progress, err := l.enqueue(h, batch, acks, start)
		if err == nil {
			if dup != nil {
				l.release()
				return nil, dup, nil
			}
			err = l.handOff(ctx, p)
			l.release()
			return p, nil, err
		}
		l.release()
		if !errors.Is(err, errSequenceGap) || !time.Now().Before(gapDeadline) {
			return nil, nil, err
		}
		// Batches before this one are probably in other requests still
		// on their way: wait for the producer state to move, then retry.
		if l.onSequenceGap != nil {
			l.onSequenceGap()
		}
		timer := time.NewTimer(time.Until(gapDeadline))
		select {
		case <-progress:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

// Wait is the second half of Append: it returns when the batch reached
// its acks level (at once for AcksNone), or the original's offsets for a
// retried batch.
func (a *Appending) Wait(ctx context.Context) (AppendResult, error) {
	var stalled <-chan struct{}
	if a.p != nil { // nil for a retried batch (dup)
		stalled = a.p.stalled
	}
	return a.wait(ctx, stalled)
}

// WaitSettled is Wait for a caller that must learn the outcome instead of
// being told it is unknown: it does not answer when the writer stalls (P9)
// but waits until the batch reaches its acks level or the writer or the
// log fails it, or ctx ends (then the outcome is unknown).
func (a *Appending) WaitSettled(ctx context.Context) (AppendResult, error) {
	return a.wait(ctx, nil)
}

// wait waits for the batch's answer, giving up early when stalled closes
// (nil: never).
func (a *Appending) wait(ctx context.Context, stalled <-chan struct{}) (AppendResult, error) {
	l, p := a.l, a.p
	if a.dup != nil {
		return a.waitDuplicate(ctx)
	}
	if p.acks == AcksNone {
		return AppendResult{BaseOffset: -1, LastOffset: -1, LogStartOffset: l.LogStartOffset()}, nil
	}
	select {
	case <-p.replied:
	case <-stalled:
		select {
		case <-p.replied: // answered meanwhile: that answer stands
		default:
			// P9: the writer holds the entry until its bookies come
			// back, which may be long after the caller's deadline.
			return AppendResult{}, fmt.Errorf("%w: ledger %d holds the batch and writes it if they come back",
				ErrNotEnoughBookiesAfterAppend, p.ledgerID)
		}
	case <-ctx.Done():
		return AppendResult{}, fmt.Errorf("%w: waiting for the acknowledgement: %w", ErrUnknownOutcome, ctx.Err())
	}
	if p.replyErr != nil {
		return AppendResult{}, p.replyErr
	}
	l.metrics.AppendLatency.Observe(l.cfg.Now().Sub(p.start).Seconds())
	return AppendResult{BaseOffset: p.base, LastOffset: p.last, LogStartOffset: l.LogStartOffset()}, nil
}

// canAcknowledge reports whether the open ledger's writer, if there is
// one, can acknowledge an entry appended now (ledger.Writer.CanAcknowledge).
func (l *Log) canAcknowledge() bool {
	l.mu.Lock()
	w := l.mu.writer
	l.mu.Unlock()
	return w == nil || w.CanAcknowledge()
}

// acquireAppend is acquire for an append: it also gives up, with
// ErrNotEnoughBookies, when the open ledger's writer stalls while it
// waits, since whoever holds appendSem (a roll sealing the ledger) waits
// for that writer's entries (P9).
func (l *Log) acquireAppend(ctx context.Context) error {
	select {
	case l.appendSem <- struct{}{}:
		return nil
	default:
	}
	var stalled <-chan struct{} // nil: no writer, nothing to stall
	l.mu.Lock()
	if w := l.mu.writer; w != nil {
		stalled = w.Stalled()
	}
	l.mu.Unlock()
	select {
	case l.appendSem <- struct{}{}:
		return nil
	case <-stalled:
		return fmt.Errorf("%w: a roll waits for the open ledger's bookies", ErrNotEnoughBookies)
	case <-l.failed:
		return l.Err()
	case <-l.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// acquire takes appendSem, failing with the log's error, ErrClosed or
// ctx's error.
func (l *Log) acquire(ctx context.Context) error {
	select {
	case l.appendSem <- struct{}{}:
		return nil
	case <-l.failed:
		return l.Err()
	case <-l.stop:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Log) release() { <-l.appendSem }

// enqueue assigns the batch its offsets and entry and records it
// (producer state, index, pending), or finds it a duplicate.
// REQUIRES: appendSem held.
// On a sequence gap it returns the channel closed at the next change of the
// producer state.
func (l *Log) enqueue(h recordbatch.BatchHeader, batch []byte, acks Acks, start time.Time) (*pendingAppend, *producerBatch, <-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.acceptErrLocked(); err != nil {
		return nil, nil, nil, err
	}
	if h.ProducerID >= 0 {
		dup, err := l.mu.producers.check(h)
		if err != nil || dup != nil {
			return nil, dup, l.mu.producersChanged, err
		}
		// Wake the appends waiting for a sequence gap to close.
		defer func() {
			close(l.mu.producersChanged)
			l.mu.producersChanged = make(chan struct{})
		}()
	}
	seg := &l.mu.seg
	base := l.mu.next
	recordbatch.SetBaseOffset(batch, base)
	recordbatch.SetPartitionLeaderEpoch(batch, int32(l.cfg.Epoch))
	h.BaseOffset = base
	p := &pendingAppend{
		entryID: int64(len(seg.entries)), ledgerID: seg.ledgerID, base: base, last: h.LastOffset(),
		records: h.RecordCount, batch: batch, acks: acks, start: start,
		quorum: make(chan struct{}), replied: make(chan struct{}),
	}
	undoProducer := func() {}
	if h.ProducerID >= 0 {
		p.producerBatch, undoProducer = l.mu.producers.apply(h, base, p, start.UnixMilli())
	}
	lastAppend := seg.lastAppend
	seg.entries = append(seg.entries, newEntryInfo(h, len(batch), seg.entries))
	seg.bytes += int64(len(batch))
	seg.lastAppend = l.cfg.Now()
	if len(seg.entries) == 1 {
		l.rolls.poke() // run sets its deadlines from the segment's first entry
	}
	l.mu.next = p.last + 1
	l.mu.pending = append(l.mu.pending, p)
	// undo is for handOff when the writer never took the entry.
	p.undo = func() {
		undoProducer()
		seg.entries = seg.entries[:len(seg.entries)-1]
		seg.bytes -= int64(len(batch))
		seg.lastAppend = lastAppend
		l.mu.next = base
		l.mu.pending = l.mu.pending[:len(l.mu.pending)-1]
	}
	return p, nil, nil, nil
}

// acceptErrLocked is why an append must be refused, or nil.
// REQUIRES: l.mu held.
func (l *Log) acceptErrLocked() error {
	if l.mu.err != nil {
		return l.mu.err
	}
	if l.mu.closing {
		return ErrClosed
	}
	return nil
}

// handOff gives p to the writer. If the writer refuses it because ctx
// ended (back-pressure), p is undone; any other refusal fails the log.
// REQUIRES: appendSem held, p the last enqueued.
func (l *Log) handOff(ctx context.Context, p *pendingAppend) error {
	l.mu.Lock()
	w := l.mu.writer
	l.mu.Unlock()
	var levelCB func(int64, error)
	level := ledger.AckQuorum
	switch p.acks {
	case AcksOne:
		level, levelCB = ledger.AckOne, func(_ int64, err error) { l.onLevel(p, err) }
	case AcksAll:
		level, levelCB = ledger.AckAll, func(_ int64, err error) { l.onLevel(p, err) }
	}
	err := w.AppendAcks(ctx, p.batch, level, func(id int64, err error) { l.onQuorum(p, id, err) }, levelCB)
	if err == nil {
		p.stalled = w.Stalled() // read by Wait, which runs after Enqueue returned
		l.mu.Lock()
		full := l.mu.seg.bytes >= l.mu.limits.SegmentBytes
		l.mu.Unlock()
		if full {
			l.rolls.poke() // run rolls it
		}
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) && l.mu.err == nil {
		p.undo()
		return err
	}
	l.failLocked(writeError(err))
	return l.mu.err
}

// onQuorum is the writer's callback for p: acknowledged at the quorum, in
// entry order, or failed.
func (l *Log) onQuorum(p *pendingAppend, id int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failLocked(writeError(err))
		return
	}
	if l.mu.err != nil || len(l.mu.pending) == 0 || l.mu.pending[0] != p {
		return // failed for another reason: p was already answered
	}
	if id != p.entryID {
		l.failLocked(fmt.Errorf("%w: ledger %d acknowledged entry %d, expected %d", ErrUnknownOutcome, p.ledgerID, id, p.entryID))
		return
	}
	if l.cfg.Authority != nil && !l.cfg.Authority() {
		// A paused owner that resumes after its session expired must not
		// acknowledge: a successor may have recovered and deleted this
		// ledger (its fence with it), so the quorum is no proof.
		l.failLocked(fmt.Errorf("%w: %w: ledger %d entry %d", ErrUnknownOutcome, ErrAuthorityLost, p.ledgerID, id))
		return
	}
	l.mu.pending[0] = nil
	l.mu.pending = l.mu.pending[1:]
	if l.mu.seg.ledgerID == p.ledgerID {
		l.mu.seg.acked = int(p.entryID) + 1
	}
	l.mu.hw = p.last + 1
	close(p.quorum)
	if p.producerBatch != nil {
		p.producerBatch.pending = nil // a retry need not wait; drop the bytes
	}
	switch p.acks {
	case AcksQuorum, AcksNone:
		p.reply(nil)
	default:
		if !p.levelDone {
			l.mu.levelWait[p] = struct{}{}
		}
	}
	l.cfg.Cache.Add(p.ledgerID, p.entryID, p.batch)
	l.metrics.AppendedRecords.Add(float64(p.records))
	l.metrics.AppendedBytes.Add(float64(len(p.batch)))
	close(l.mu.hwChanged)
	l.mu.hwChanged = make(chan struct{})
}

// onLevel is the writer's level callback for AcksOne / AcksAll.
func (l *Log) onLevel(p *pendingAppend, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p.levelDone = true
	delete(l.mu.levelWait, p)
	switch {
	case err == nil:
		p.reply(nil)
	case errors.Is(err, ledger.ErrUnderReplicated):
		// Acknowledged at the quorum, but "all" can no longer be met.
		p.reply(fmt.Errorf("%w: %w", ErrUnknownOutcome, err))
	default:
		l.failLocked(writeError(err))
		p.reply(inFlightError(l.mu.err))
	}
}

// reply answers p's caller once.
// REQUIRES: the log's mu held.
func (p *pendingAppend) reply(err error) {
	select {
	case <-p.replied:
		return
	default:
	}
	p.replyErr = err
	close(p.replied)
}

// failLocked makes err terminal (P3): Failed closes, nothing more is
// accepted, and every unanswered append fails. Those appends were handed
// to the ledger, so whatever err is (fenced by a new owner, a lost CAS),
// they fail with ErrUnknownOutcome wrapping it: the new owner's recovery
// may keep any of them (a copy on one bookie is enough), so "nothing was
// written" would make a plain producer's retry a silent duplicate (M1).
// Appends refused later get err itself: they were never written.
// REQUIRES: l.mu held.
func (l *Log) failLocked(err error) {
	if l.mu.err != nil {
		return
	}
	l.mu.err = err
	close(l.failed)
	for _, f := range l.mu.failHooks {
		go (*f)()
	}
	l.mu.failHooks = nil
	l.metrics.Failures.Inc()
	l.log.Warn("partition log failed", "err", err, "hw", l.mu.hw, "pending", len(l.mu.pending))
	inflightErr := inFlightError(err)
	for _, p := range l.mu.pending {
		p.err = inflightErr
		close(p.quorum)
		p.reply(inflightErr)
	}
	l.mu.pending = nil
	for p := range l.mu.levelWait {
		p.reply(inflightErr)
	}
	clear(l.mu.levelWait)
	close(l.mu.hwChanged)
	l.mu.hwChanged = make(chan struct{})
}

// inFlightError is the error of an append handed to the ledger and not
// answered when the log failed with err: its outcome is unknown.
func inFlightError(err error) error {
	if errors.Is(err, ErrUnknownOutcome) {
		return err
	}
	return fmt.Errorf("%w: the append was in flight when the log failed: %w", ErrUnknownOutcome, err)
}

// fail is failLocked taking the lock.
func (l *Log) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failLocked(err)
}

// waitDuplicate answers a retried batch with the original's offsets, once
// the original is acknowledged.
func (a *Appending) waitDuplicate(ctx context.Context) (AppendResult, error) {
	l, b := a.l, a.dup
	l.mu.Lock()
	p := b.pending
	l.mu.Unlock()
	if p != nil {
		select {
		case <-p.quorum:
		case <-ctx.Done():
			return AppendResult{}, fmt.Errorf("%w: waiting for the original of a retried batch: %w", ErrUnknownOutcome, ctx.Err())
		}
		if p.err != nil {
			return AppendResult{}, p.err
		}
	}
	return AppendResult{BaseOffset: b.base, LastOffset: b.last, LogStartOffset: l.LogStartOffset(), Duplicate: true}, nil
}

// rollIfFull rolls the open segment before a batch of size bytes goes in
// when it would not fit (Kafka's rule), so a segment exceeds SegmentBytes
// only when one batch alone does, however fast batches arrive (retention
// and tiering work in whole segments), or when it holds MaxSegmentEntries.
// Appends wait meanwhile, as they would behind any roll.
// REQUIRES: appendSem held.
func (l *Log) rollIfFull(size int) error {
	l.mu.Lock()
	if err := l.acceptErrLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	n := len(l.mu.seg.entries)
	full := n > 0 && (l.mu.seg.bytes+int64(size) > l.mu.limits.SegmentBytes || n >= l.cfg.MaxSegmentEntries)
	if full && !l.mu.room.has(l, "size") {
		// L1: grow past segment.bytes, up to MaxSegmentEntries.
		full = false
		if n >= l.cfg.MaxSegmentEntries {
			l.mu.Unlock()
			return fmt.Errorf("%w: the open segment holds %d entries and the list cannot take another segment until retention shortens it",
				ErrListFull, n)
		}
	}
	w := l.mu.writer
	l.mu.Unlock()
	if !full {
		return nil
	}
	// The background context: a roll cut short by one caller's deadline
	// would fail the whole log.
	return rolling{l}.roll(l.bgCtx, w, "size")
}

// HighWatermark is one past the last offset consumers may read.
func (l *Log) HighWatermark() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.hw
}

// LogStartOffset is the first offset of the log.
func (l *Log) LogStartOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.pl.GetLogStartOffset()
}

// HWChanged returns a channel closed at the next high watermark advance
// (or failure). Take it, check HighWatermark, then wait: no advance is
// missed.
func (l *Log) HWChanged() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.hwChanged
}

// Failed is closed when the log fails (fenced, CAS lost, write error):
// the broker must drop the partition (and call Close to release it).
func (l *Log) Failed() <-chan struct{} { return l.failed }

// AfterFail arranges for f to run in its own goroutine when the log
// fails (at once when it has failed already). stop unregisters f and
// reports whether that kept f from running, as context.AfterFunc's does.
// It lets an owner wait for its log's failure without a goroutine of its
// own: parked for every served partition, those were 40% of what an idle
// partition cost the broker.
func (l *Log) AfterFail(f func()) (stop func() bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.err != nil {
		go f()
		return func() bool { return false }
	}
	hook := &f
	l.mu.failHooks = append(l.mu.failHooks, hook)
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		i := slices.Index(l.mu.failHooks, hook)
		if i < 0 {
			return false
		}
		l.mu.failHooks = slices.Delete(l.mu.failHooks, i, i+1)
		return true
	}
}

// Err is the log's terminal error, nil while it is healthy.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.err
}

// Describe returns the PartitionLog with the open segment's live numbers
// (acknowledged entries only).
func (l *Log) Describe() *brokerpb.PartitionLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	pl := proto.Clone(l.mu.pl).(*brokerpb.PartitionLog)
	if n := len(pl.Segments); n > 0 && !pl.Segments[n-1].Closed && pl.Segments[n-1].LedgerId == l.mu.seg.ledgerID {
		s := &l.mu.seg
		live := segmentProto(s.ledgerID, s.first, s.createdAtMs, s.entries[:s.acked], false)
		pl.Segments[n-1] = live
	}
	return pl
}

// Limits are the topic settings a served log follows and that may change
// while it is served: new values apply to the open segment's roll checks
// and to the next batches at once, and the replication settings to the
// next ledger (the open one keeps its ensemble).
type Limits struct {
	SegmentBytes                     int64
	SegmentAge                       time.Duration
	MaxBatchBytes                    int
	MaxCompressionRatio              int
	Ensemble, WriteQuorum, AckQuorum int
}

// Limits returns the settings in force.
func (l *Log) Limits() Limits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.limits
}

// SetLimits changes the settings (zero fields keep their value) and checks
// the roll conditions against them.
func (l *Log) SetLimits(n Limits) {
	l.mu.Lock()
	cur := &l.mu.limits
	if n.SegmentBytes > 0 {
		cur.SegmentBytes = n.SegmentBytes
	}
	if n.SegmentAge > 0 {
		cur.SegmentAge = n.SegmentAge
	}
	if n.MaxBatchBytes > 0 {
		cur.MaxBatchBytes = n.MaxBatchBytes
	}
	if n.MaxCompressionRatio > 0 {
		cur.MaxCompressionRatio = n.MaxCompressionRatio
	}
	if n.Ensemble > 0 && n.Ensemble >= n.WriteQuorum && n.WriteQuorum >= n.AckQuorum && n.AckQuorum > 0 {
		cur.Ensemble, cur.WriteQuorum, cur.AckQuorum = n.Ensemble, n.WriteQuorum, n.AckQuorum
	}
	l.mu.Unlock()
	l.rolls.poke()
}

// UnderReplicated reports whether the open ledger has entries with fewer
// than write-quorum copies (a bookie failed and no spare replaced it yet).
func (l *Log) UnderReplicated() bool {
	l.mu.Lock()
	w := l.mu.writer
	l.mu.Unlock()
	return w != nil && w.UnderReplicated()
}
