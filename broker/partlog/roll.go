package partlog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
)

// roller is the log's goroutine while a segment is open (run): it rolls
// the open segment when it is due (size at once, through kick; age, idle
// and compaction lag on one timer set to the nearest of their deadlines),
// and closes the writer once the log failed. It exists only while the log
// has an open segment (openLedger starts it at the append that opens
// one): an idle log, written or not, costs no goroutine of its own (P8).
// Retention and tiering are not its work: the owner runs those passes over
// all its logs (Log.RunPass).
type roller struct {
	l *Log
	// kick asks run to check the roll conditions now.
	kick chan struct{}
	// running: run was started (start; guarded by appendSem).
	running bool
}

// start starts run unless it runs.
// REQUIRES: appendSem held.
func (r *roller) start() {
	if r.running {
		return
	}
	r.running = true
	r.l.wg.Add(1)
	go r.run()
}

// poke makes run check the roll conditions (and whether it still has a
// segment to watch) now, not at its next deadline.
func (r *roller) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run returns once no segment is open (an idle or age roll seals without
// opening the next), the log stops, or it failed.
func (r *roller) run() {
	l := rolling{r.l}
	defer l.wg.Done()
	t := time.NewTimer(r.nextCheck(false))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.failed:
			l.closeFailedWriter()
			return
		case <-r.kick:
		case <-t.C:
		}
		deferred, err := l.checkRoll(l.bgCtx)
		if err != nil {
			l.log.Warn("roll failed", "err", err)
		}
		if r.stopIfIdle() {
			return
		}
		t.Reset(r.nextCheck(deferred || err != nil))
	}
}

// nextCheck is nextRollCheck over the log's state now.
func (r *roller) nextCheck(retry bool) time.Duration {
	l := r.l
	l.mu.Lock()
	defer l.mu.Unlock()
	return nextRollCheck(&l.mu.seg, l.mu.limits, l.mu.policy, l.cfg, retry, l.cfg.Now())
}

// nextRollCheck is how long run waits before it checks the roll conditions
// again: until the nearest of the open segment's age, idle and compaction
// lag deadlines (a deadline that passed since the last check: at once), or
// RollCheckInterval while nothing is appended yet or when a due roll did
// not happen (retry: it failed, or a full list deferred it, L1). A pure
// function.
func nextRollCheck(s *openSegment, lim Limits, policy Policy, cfg Config, retry bool, now time.Time) time.Duration {
	if retry || len(s.entries) == 0 {
		return cfg.RollCheckInterval
	}
	created := time.UnixMilli(s.createdAtMs)
	due := created.Add(lim.SegmentAge)
	if idle := s.lastAppend.Add(cfg.IdleRoll); idle.Before(due) {
		due = idle
	}
	if lag := policy.Compaction.MaxCompactionLagMs; policy.Compact && lag > 0 {
		if c := created.Add(time.Duration(lag) * time.Millisecond); c.Before(due) {
			due = c
		}
	}
	// +1 ms: createdAtMs is truncated to the millisecond.
	return max(due.Sub(now), 0) + time.Millisecond
}

// stopIfIdle reports whether run's turn is over: no segment is open. It
// clears running under appendSem, so the append that opens the next
// segment starts run again (start).
func (r *roller) stopIfIdle() bool {
	l := r.l
	select {
	case l.appendSem <- struct{}{}:
	case <-l.stop:
		return true
	case <-l.failed:
		return false // run closes the writer
	}
	defer l.release()
	l.mu.Lock()
	idle := l.mu.writer == nil && l.mu.err == nil
	l.mu.Unlock()
	if idle {
		r.running = false
	}
	return idle
}

// rolling is the part of a Log that ends one segment and begins the
// next: sealing and listing ledgers, handing a segment's entries over at
// Close, closing a failed writer. Its methods run under appendSem or on
// the roller's goroutine.
type rolling struct{ *Log }

// closeFailedWriter releases the writer of a failed log (its Close is
// idempotent; a fenced writer does not touch the metadata).
func (l rolling) closeFailedWriter() {
	l.mu.Lock()
	w := l.mu.writer
	l.mu.Unlock()
	if w == nil {
		return
	}
	ctx, cancel := context.WithTimeout(l.bgCtx, 10*time.Second)
	defer cancel()
	_ = w.Close(ctx)
}

// rollReason says why the open segment s should roll at now, or "" (a
// pure function).
func rollReason(s *openSegment, lim Limits, policy Policy, idleRoll time.Duration, now time.Time) string {
	if len(s.entries) == 0 {
		return ""
	}
	age := now.Sub(time.UnixMilli(s.createdAtMs))
	switch {
	case s.bytes >= lim.SegmentBytes:
		return "size"
	case age >= lim.SegmentAge:
		return "age"
	case now.Sub(s.lastAppend) >= idleRoll:
		return "idle"
	case policy.Compact && age.Milliseconds() >= policy.Compaction.MaxCompactionLagMs &&
		policy.Compaction.MaxCompactionLagMs > 0:
		// The open ledger is never compacted (C9): it must close for
		// its records to become eligible within max.compaction.lag.ms
		// (Kafka rolls at min(segment.ms, max.compaction.lag.ms)).
		return "max-compaction-lag"
	}
	return ""
}

// checkRoll rolls the open segment if it is due (P4). Appends wait
// meanwhile (appendSem). deferred reports a due roll that a full list
// held back (L1).
func (l rolling) checkRoll(ctx context.Context) (deferred bool, err error) {
	select {
	case l.appendSem <- struct{}{}:
	case <-l.stop:
		return false, nil
	case <-l.failed:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer l.release()
	l.mu.Lock()
	if l.acceptErrLocked() != nil {
		l.mu.Unlock()
		return false, nil
	}
	reason := rollReason(&l.mu.seg, l.mu.limits, l.mu.policy, l.cfg.IdleRoll, l.cfg.Now())
	if reason != "" && !l.mu.room.has(l.Log, reason) {
		reason, deferred = "", true
	}
	w := l.mu.writer
	l.mu.Unlock()
	if reason != "" && w != nil && !w.CanAcknowledge() {
		// Sealing waits for the writer's entries, which wait for its
		// bookies; holding appendSem meanwhile would hold every append
		// to its deadline instead of refusing it at once (P9).
		reason, deferred = "", true
	}
	if reason == "" {
		return deferred, nil
	}
	return false, l.roll(ctx, w, reason)
}

// L1: a roll adds a segment to the PartitionLog, one metad value of at
// most metadValueBytes; a list that outgrew it could be neither rolled,
// closed nor taken over (segment.ms of one second reaches that in hours).
// So a roll happens only while the list, with its producer table at its
// bound (maxProducers) and listSlackBytes to spare, still fits: about
// 12,000 to 17,000 segments (33 to 46 bytes each). Past that the open segment grows beyond segment.bytes
// and segment.ms until retention or tiering shortens the list; at
// MaxSegmentEntries appends fail with ErrListFull (rollIfFull).

// maxProducerTableBytes is the most a producer table at maxProducers
// adds to a PartitionLog: every field at its longest encoding.
var maxProducerTableBytes = func() int {
	worst := &brokerpb.ProducerState{ProducerId: -1, Epoch: -1, LastTimestampMs: -1}
	for range producerBatches {
		worst.Batches = append(worst.Batches, &brokerpb.ProducerBatch{FirstSequence: -1, LastSequence: -1, BaseOffset: -1, LastOffset: -1})
	}
	return maxProducers * proto.Size(&brokerpb.PartitionLog{Producers: []*brokerpb.ProducerState{worst}})
}()

// listRoom is what the log knows of its stored list's size (L1). Guarded
// by Log.mu.
type listRoom struct {
	// sized: the stored list last sized; bytes its size without its
	// producer table.
	sized *brokerpb.PartitionLog
	bytes int
	// fullLogged: when a roll deferred by a full list was last logged.
	fullLogged time.Time
}

// has reports whether l's list may take one more segment (L1). When not,
// it counts and (at most once a minute) logs the roll deferred for reason.
// REQUIRES: l.mu held.
func (r *listRoom) has(l *Log, reason string) bool {
	pl := l.mu.pl
	if r.sized != pl {
		// Sized once per stored list (pl is replaced at every CAS): a
		// full list is asked before every append past segment.bytes.
		size := proto.Size(pl)
		for _, p := range pl.GetProducers() {
			size -= protowire.SizeTag(4) + protowire.SizeBytes(proto.Size(p))
		}
		r.sized, r.bytes = pl, size
	}
	if r.bytes+maxProducerTableBytes+listSlackBytes <= metadValueBytes {
		return true
	}
	l.metrics.RollsDeferred.Inc()
	if now := l.cfg.Now(); now.Sub(r.fullLogged) >= time.Minute {
		r.fullLogged = now
		l.log.Warn("segment due to roll, but the partition's segment list is full; the open segment grows until retention shortens the list",
			"reason", reason, "segments", len(pl.GetSegments()), "tiered", len(pl.GetTiered()), "list_bytes", r.bytes,
			"open_segment_entries", len(l.mu.seg.entries), "max_segment_entries", l.cfg.MaxSegmentEntries)
	}
	return false
}

// roll seals the open segment (P4): close the ledger, write its index,
// then ONE CAS. A roll for size (an append is waiting) also creates the
// next ledger and lists it open in that CAS; any other roll (age, idle,
// compaction lag: the partition may stay idle) leaves the log without an
// open segment until the next append opens one (P8). Any failure fails
// the log.
// REQUIRES: appendSem held.
func (l rolling) roll(ctx context.Context, w *ledger.Writer, reason string) error {
	sealed, err := l.seal(ctx, w)
	if err != nil {
		return err
	}
	var nw *ledger.Writer
	if reason == "size" {
		if nw, err = ledger.Create(ctx, l.cfg.Env, l.cfg.LedgerOptions(l.Limits())); err != nil {
			err = fmt.Errorf("%w: creating the next ledger: %w", ErrUnknownOutcome, err)
			l.fail(err)
			return err
		}
	}
	l.mu.Lock()
	pl := proto.Clone(l.mu.pl).(*brokerpb.PartitionLog)
	pl.Segments[len(pl.Segments)-1] = sealed
	l.mu.Unlock()
	if err := l.listNewLedger(ctx, pl, nw, sealed.LastOffset+1); err != nil {
		return err
	}
	l.metrics.Rolls.Inc()
	next := "none until the next append"
	if nw != nil {
		next = strconv.FormatUint(nw.ID(), 10)
	} else {
		l.rolls.poke() // nothing left for run to watch: it ends
	}
	l.log.Info("segment rolled", "reason", reason, "closed_ledger", sealed.LedgerId, "first_offset", sealed.FirstOffset,
		"last_offset", sealed.LastOffset, "bytes", sealed.Bytes, "ledger", next)
	return nil
}

// openLedger gives a log without an open segment (just taken over, or
// rolled while idle) its ledger before an append (P8): create it, then
// one CAS that lists it open. When no ledger can be created (not enough
// writable bookies) the append fails with ErrNoLedger and the log stays
// healthy: nothing was written. A failed CAS fails the log, like a roll's.
// REQUIRES: appendSem held.
func (l rolling) openLedger(ctx context.Context) error {
	l.mu.Lock()
	if err := l.acceptErrLocked(); err != nil || l.mu.writer != nil {
		l.mu.Unlock()
		return err
	}
	pl := proto.Clone(l.mu.pl).(*brokerpb.PartitionLog)
	next := l.mu.next
	l.mu.Unlock()
	nw, err := ledger.Create(ctx, l.cfg.Env, l.cfg.LedgerOptions(l.Limits()))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoLedger, err)
	}
	if err := l.listNewLedger(ctx, pl, nw, next); err != nil {
		return err
	}
	l.log.Debug("opened a ledger", "ledger", nw.ID(), "first_offset", next)
	return nil
}

// listNewLedger CASes pl (the stored list with any sealing applied), with
// nw listed open from offset next when it is not nil, and the producer
// snapshot, and makes it the log's state: nw its writer, or no open
// segment. A failed CAS fails the log; nw is deleted when no list can name
// it (a conflict) and kept for the next owner when the CAS may have
// applied.
// REQUIRES: appendSem held.
func (l rolling) listNewLedger(ctx context.Context, pl *brokerpb.PartitionLog, nw *ledger.Writer, next int64) error {
	l.mu.Lock()
	now := l.cfg.Now()
	open := openSegment{first: next}
	if nw != nil {
		open = openSegment{ledgerID: nw.ID(), first: next, createdAtMs: now.UnixMilli(), lastAppend: now}
		pl.Segments = append(pl.Segments, &brokerpb.LedgerSegment{LedgerId: nw.ID(), FirstOffset: next, LastOffset: next - 1,
			LastEntryId: -1, MaxTimestampMs: -1, CreatedAtMs: open.createdAtMs})
	}
	l.mu.producers.expire(now, l.cfg.ProducerExpiry)
	pl.Producers = l.mu.producers.snapshot(now, l.cfg.ProducerExpiry)
	version := l.mu.version
	l.mu.Unlock()

	v, err := casPartitionLog(ctx, l.cfg.Store, l.cfg.Topic, l.cfg.Partition, pl, version)
	if err != nil {
		switch {
		case nw == nil:
		case errors.Is(err, ErrConflict):
			DiscardLedger(l.cfg, nw) // no list names it
		default:
			// The CAS may have applied: keep the ledger for the next owner.
			_ = nw.Close(ctx)
		}
		if !errors.Is(err, ErrConflict) {
			err = fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		l.fail(err)
		return err
	}
	l.mu.Lock()
	l.mu.pl, l.mu.version, l.mu.writer, l.mu.seg = pl, v, nw, open
	l.mu.Unlock()
	l.rolls.start()
	return nil
}

// seal closes the open segment's ledger (waiting for its in-flight
// entries) and writes its index; it returns the segment closed with its
// final numbers. Failures fail the log.
// REQUIRES: appendSem held.
func (l rolling) seal(ctx context.Context, w *ledger.Writer) (*brokerpb.LedgerSegment, error) {
	if err := w.Close(ctx); err != nil {
		l.fail(writeError(err))
		return nil, l.Err()
	}
	l.mu.Lock()
	if err := l.mu.err; err != nil {
		l.mu.Unlock()
		return nil, err
	}
	s := l.mu.seg
	if s.acked != len(s.entries) {
		l.mu.Unlock()
		err := fmt.Errorf("%w: ledger %d closed with %d of %d entries acknowledged", ErrUnknownOutcome, s.ledgerID, s.acked, len(s.entries))
		l.fail(err)
		return nil, err
	}
	sealed := segmentProto(s.ledgerID, s.first, s.createdAtMs, s.entries, true)
	l.mu.Unlock()
	if len(s.entries) > 0 {
		idx := buildIndex(s.entries, l.cfg.IndexIntervalBytes)
		if err := writeIndex(ctx, l.cfg.Store, s.ledgerID, idx); err != nil {
			l.fail(fmt.Errorf("%w: %w", ErrUnknownOutcome, err))
			return nil, err
		}
		l.reads.putIndex(s.ledgerID, idx)
	}
	return sealed, nil
}

// Close hands the partition off cleanly: appends fail with ErrClosed from
// now on, in-flight ones are waited for (bounded by ctx), the ledger is
// closed, its index written, and the list CAS'd with the segment closed
// (an empty segment is dropped and its ledger deleted). No new ledger is
// created; Ownership is not touched. On a failed log it only releases
// resources and returns the log's error. Close is idempotent.
func (l *Log) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.mu.closing {
		closed := l.mu.closed
		l.mu.Unlock()
		select {
		case <-closed:
		case <-ctx.Done():
			return ctx.Err()
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.mu.closeErr
	}
	l.mu.closing = true
	l.mu.Unlock()

	err := rolling{l}.handOffSegment(ctx)
	close(l.stop)
	l.wg.Wait()
	l.bgCancel()
	l.mu.Lock()
	l.mu.closeErr = err
	close(l.mu.closed)
	close(l.mu.hwChanged) // long-polls return (with ErrClosed)
	l.mu.hwChanged = make(chan struct{})
	l.mu.Unlock()
	if err == nil {
		l.log.Info("partition log closed")
	}
	return err
}

// handOffSegment is Close's work.
func (l rolling) handOffSegment(ctx context.Context) error {
	select {
	case l.appendSem <- struct{}{}:
	case <-ctx.Done():
		// A roll is stuck: abort it (it fails the log).
		l.bgCancel()
		return fmt.Errorf("partlog: closing: %w", ctx.Err())
	}
	defer l.release()
	l.mu.Lock()
	err, w := l.mu.err, l.mu.writer
	l.mu.Unlock()
	if err != nil {
		l.closeFailedWriter()
		return err
	}
	if w == nil {
		return nil // no open segment (P8): the list is as stored
	}
	sealed, err := l.seal(ctx, w)
	if err != nil {
		return err
	}
	l.mu.Lock()
	now := l.cfg.Now()
	pl := proto.Clone(l.mu.pl).(*brokerpb.PartitionLog)
	empty := sealed.LastEntryId < 0
	if empty {
		pl.Segments = pl.Segments[:len(pl.Segments)-1]
	} else {
		pl.Segments[len(pl.Segments)-1] = sealed
	}
	l.mu.producers.expire(now, l.cfg.ProducerExpiry)
	pl.Producers = l.mu.producers.snapshot(now, l.cfg.ProducerExpiry)
	version := l.mu.version
	l.mu.Unlock()
	v, err := casPartitionLog(ctx, l.cfg.Store, l.cfg.Topic, l.cfg.Partition, pl, version)
	if err != nil {
		l.fail(err)
		return err
	}
	l.mu.Lock()
	l.mu.pl, l.mu.version = pl, v
	l.mu.Unlock()
	if empty {
		if err := ledger.Delete(ctx, l.cfg.Env, sealed.LedgerId); err != nil {
			l.log.Warn("deleting the empty last ledger", "ledger", sealed.LedgerId, "err", err)
		}
	}
	return nil
}
