package storage

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/strata-log/strata/ledger/index"
	"github.com/strata-log/strata/ledger/journal"
)

// budgetBytes bounds the bytes of records queued and not yet applied:
// twice the journal's own queue bound, so the journal's back-pressure
// normally acts first and this one only catches a slow applier.
func budgetBytes(maxEntryBytes int) int64 {
	return 2*journal.DefaultMaxQueueBytes + int64(maxEntryBytes)
}

type opKind uint8

const (
	opAdd opKind = iota + 1
	opFence
	opLAC
	opDelete
	opCopy // compaction's copy of a live entry
)

// op is one record on its way: queued in the journal, then applied to the
// index by the applier, then acknowledged.
type op struct {
	kind      opKind
	ledgerID  uint64
	entryID   uint64
	lac       int64
	size      int64 // budget bytes
	overwrite bool  // add: may replace an existing entry
	fenced    bool  // delete: the ledger was fenced when it was admitted
	// payload is an add's bytes, kept until it is applied so that an
	// overwrite can be compared with the stored entry (Storage.conflict).
	payload []byte
	from    journal.Location
	start   time.Time
	// finish is called once, by the applier, after the op is applied (err
	// nil) or failed.
	finish func(o *op, err error)

	// Set by the journal's done callback.
	loc      journal.Location
	queueErr error
	// Set by the applier.
	state index.LedgerState
	moved bool // opCopy: the index now points at the copy
	// refused: an add the applier did not apply (a different entry is
	// stored, or the stored one could not be read to compare); it
	// completes in journal order with this error.
	refused error
}

// admit updates the ledger's queued bookkeeping for o, or refuses it.
// REQUIRES: s.mu held, and the ledger's stripe.
func (o *op) admit(l *ledger, recovery bool) error {
	switch o.kind {
	case opAdd:
		if l.fenced && !recovery {
			return fmt.Errorf("%w: ledger %d", ErrFenced, o.ledgerID)
		}
		if int64(o.entryID) <= l.maxQueued {
			o.overwrite = true
			l.overwrites++
		}
	case opFence:
		l.fenced = true
	case opDelete:
		// The fence outlives the delete (F1 in doc.go): a writer fenced
		// out stays out, whatever happens to the ledger's data.
		o.fenced = l.fenced
		l.deletes++
	}
	l.queued++
	return nil
}

// settle undoes admit's counters once o is applied or has failed.
// REQUIRES: s.mu held.
func (o *op) settle(l *ledger) {
	l.queued--
	if o.overwrite {
		l.overwrites--
	}
	if o.kind == opDelete {
		l.deletes--
	}
}

// enqueue admits o for its ledger and appends rec to the journal, as one
// step with respect to the ledger's other records (the stripe lock): an add
// admitted before a fence is journaled before it, an add after is refused.
func (s *Storage) enqueue(ctx context.Context, o *op, rec journal.Record, recovery bool) error {
	release, err := s.begin()
	if err != nil {
		return err
	}
	defer release()
	if err := s.budget.Acquire(ctx, o.size); err != nil {
		return err
	}
	stripe := &s.stripes[o.ledgerID%ledgerStripes]
	stripe.Lock()
	defer stripe.Unlock()
	s.mu.Lock()
	l := s.ledgerLocked(o.ledgerID)
	prevMax, prevFenced := l.maxQueued, l.fenced
	if err := o.admit(l, recovery); err != nil {
		s.dropIdleLocked(o.ledgerID, l)
		s.mu.Unlock()
		s.budget.Release(o.size)
		return err
	}
	switch o.kind {
	case opAdd:
		l.maxQueued = max(l.maxQueued, int64(o.entryID))
	case opDelete:
		l.maxQueued = -1
	}
	if (o.kind == opAdd || o.kind == opLAC) && o.lac > l.maxQueued {
		// H1: a LAC says "every entry up to here is acknowledged"; this
		// bookie accepts it only up to the highest entry it holds or has
		// journaled ahead of this record, whatever a writer claims. The
		// journal records the lowered value, so replay repeats it.
		s.metrics.lacClamped.Inc()
		s.logger.Debug("LAC lowered to the highest entry held", "ledger", o.ledgerID, "lac", o.lac,
			"held", l.maxQueued)
		o.lac = max(l.maxQueued, -1)
		rec.LAC = o.lac
	}
	s.mu.Unlock()
	err = s.j.Append(ctx, rec, func(loc journal.Location, err error) {
		o.loc, o.queueErr = loc, err
		s.pushApplied(o)
	})
	if err != nil {
		s.mu.Lock()
		o.settle(l)
		l.maxQueued = prevMax
		if o.kind != opFence { // a fence stays in force: refusing adds is safe
			l.fenced = prevFenced
		}
		s.dropIdleLocked(o.ledgerID, l)
		s.mu.Unlock()
		s.budget.Release(o.size)
		return translate(err)
	}
	return nil
}

// Add stores an entry. It returns at once with ErrInvalid (payload over
// MaxEntryBytes, entry id above 2^63-1, LAC below -1, nil done), ErrFenced
// (the ledger is fenced and this is not a recovery add), ErrReadOnly,
// ErrClosed, ErrFailed or ctx's error, and then never calls done.
// Otherwise done is called exactly once, in journal order, with nil once
// the entry is durable (fdatasync) and indexed — a Read after done sees it
// — or with an error wrapping ErrFailed (outcome unknown). done must not
// block. payload must not change until done is called.
//
// Adding an entry this bookie already holds succeeds only with the same
// bytes (a recovery or a writer's retry rewrites what it wrote); with other
// bytes done gets ErrEntryConflict and the stored entry stays. If the
// stored copy cannot be read for the comparison because it is corrupt or
// its journal file is gone, the add replaces it (a repair); any other read
// error fails the add with that error and keeps the stored entry. lac is
// lowered to the highest entry id held, this one included.
func (s *Storage) Add(ctx context.Context, ledgerID, entryID uint64, lac int64, payload []byte, recovery bool, done func(error)) error {
	start := s.now()
	switch {
	case done == nil:
		return fmt.Errorf("%w: nil done callback", ErrInvalid)
	case entryID > math.MaxInt64:
		return fmt.Errorf("%w: entry id %d", ErrInvalid, entryID)
	case lac < -1:
		return fmt.Errorf("%w: LAC %d", ErrInvalid, lac)
	case len(payload) > s.opts.MaxEntryBytes:
		return fmt.Errorf("%w: entry of %d bytes, max %d", ErrInvalid, len(payload), s.opts.MaxEntryBytes)
	case s.readOnly.Load() || !s.spendDisk(s.diskBytes(len(payload))):
		return ErrReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &op{
		kind: opAdd, ledgerID: ledgerID, entryID: entryID, lac: lac, start: start, payload: payload,
		size: int64(journal.RecordHeaderSize + len(payload)),
		finish: func(o *op, err error) {
			if err == nil {
				s.metrics.addLatency.Observe(s.now().Sub(o.start).Seconds())
			}
			done(err)
		},
	}
	rec := journal.Record{Type: journal.TypeAdd, LedgerID: ledgerID, EntryID: entryID, LAC: lac, Payload: payload, Recovery: recovery}
	return s.enqueue(ctx, o, rec, recovery)
}

// record queues a fence, LAC or delete record and waits until it is
// durable and applied. A ctx error means the outcome is unknown.
func (s *Storage) record(ctx context.Context, o *op, rec journal.Record) (index.LedgerState, error) {
	if err := ctx.Err(); err != nil {
		return index.LedgerState{}, err
	}
	type result struct {
		state index.LedgerState
		err   error
	}
	ch := make(chan result, 1)
	o.size = journal.RecordHeaderSize
	o.finish = func(o *op, err error) { ch <- result{o.state, err} }
	if err := s.enqueue(ctx, o, rec, false); err != nil {
		return index.LedgerState{}, err
	}
	select {
	case r := <-ch:
		return r.state, r.err
	case <-ctx.Done():
		return index.LedgerState{}, ctx.Err()
	}
}

// Fence fences the ledger: from the moment Fence is called, non-recovery
// adds are refused (ErrFenced); it journals a fence record and returns once
// that is durable, with the ledger's state then, which includes every add
// journaled before the fence. Fencing a ledger this bookie has never seen
// records it fenced. Errors: ErrClosed, ErrFailed, ctx's (unknown outcome;
// the ledger stays fenced in memory either way).
func (s *Storage) Fence(ctx context.Context, ledgerID uint64) (LedgerState, error) {
	st, err := s.record(ctx, &op{kind: opFence, ledgerID: ledgerID},
		journal.Record{Type: journal.TypeFence, LedgerID: ledgerID})
	if err != nil {
		return LedgerState{}, err
	}
	return LedgerState{LAC: st.LAC, LastEntryID: st.LastEntryID, Fenced: true}, nil
}

// WriteLAC journals an explicit LAC for the ledger (the LAC only rises) and
// returns once it is durable. lac is first lowered to the highest entry id
// this bookie holds for the ledger (-1 when none): a LAC above it would
// claim entries nobody can read here (H1). Errors: ErrInvalid (lac < -1),
// ErrClosed, ErrFailed, ctx's.
func (s *Storage) WriteLAC(ctx context.Context, ledgerID uint64, lac int64) error {
	if lac < -1 {
		return fmt.Errorf("%w: LAC %d", ErrInvalid, lac)
	}
	_, err := s.record(ctx, &op{kind: opLAC, ledgerID: ledgerID, lac: lac},
		journal.Record{Type: journal.TypeLAC, LedgerID: ledgerID, LAC: lac})
	return err
}

// Delete journals a delete record for the ledger (so replay does not bring
// it back), waits until it is durable, and removes the ledger from the index
// with one range delete. A fenced ledger leaves a fenced tombstone (F1 in
// doc.go): non-recovery adds stay refused. Journal files left with no live
// entry are removed by the next GC. Errors: ErrClosed, ErrFailed, ctx's.
func (s *Storage) Delete(ctx context.Context, ledgerID uint64) error {
	_, err := s.record(ctx, &op{kind: opDelete, ledgerID: ledgerID},
		journal.Record{Type: journal.TypeDelete, LedgerID: ledgerID})
	if err == nil {
		select {
		case s.gcKick <- struct{}{}:
		default:
		}
	}
	return err
}

// pushApplied is the journal's done callback: it hands o to the applier.
// It never blocks (the queue is bounded by budget).
func (s *Storage) pushApplied(o *op) {
	s.apply.Lock()
	s.apply.queue = append(s.apply.queue, o)
	s.apply.Unlock()
	s.wakeApplier()
}

func (s *Storage) wakeApplier() {
	select {
	case s.applyWake <- struct{}{}:
	default:
	}
}

// maxApplyBatch bounds the records of one index batch.
const maxApplyBatch = 4096

// runApplier is the applier goroutine: it applies durable records to the
// index in journal order, in batches, then acknowledges them. It exits once
// the journal is closed and everything is applied.
func (s *Storage) runApplier() {
	defer close(s.applierDone)
	var spare []*op
	for {
		s.apply.Lock()
		for len(s.apply.queue) == 0 && !s.apply.journalClosed {
			s.apply.Unlock()
			<-s.applyWake
			s.apply.Lock()
		}
		ops := s.apply.queue
		s.apply.queue = spare
		s.apply.Unlock()
		if len(ops) == 0 {
			return // the journal is closed and everything is applied
		}
		for rest := ops; len(rest) > 0; {
			n := min(len(rest), maxApplyBatch)
			s.applyOps(rest[:n])
			rest = rest[n:]
		}
		clear(ops) // drop payload references
		spare = ops[:0]
	}
}

// applyOps applies ops (in journal order) in one index batch and completes
// them. A record the journal failed fails its op; an index error is fatal.
func (s *Storage) applyOps(ops []*op) {
	var applied []*op
	var b *index.Batch
	flush := func() {
		if b == nil {
			return
		}
		err := b.Commit(false)
		b = nil
		if err != nil {
			s.fatal(fmt.Errorf("writing the index: %w", err))
			s.failOps(applied, s.failure())
		} else {
			s.completeOps(applied)
		}
		applied = applied[:0]
	}
	for _, o := range ops {
		if o.queueErr != nil {
			flush()
			s.failOps([]*op{o}, translate(o.queueErr))
			continue
		}
		if err := s.failure(); err != nil {
			flush()
			s.failOps([]*op{o}, err)
			continue
		}
		if b == nil {
			var err error
			if b, err = s.ix.NewBatch(); err != nil {
				s.fatal(fmt.Errorf("writing the index: %w", err))
				s.failOps([]*op{o}, s.failure())
				continue
			}
		}
		var err error
		switch o.kind {
		case opAdd:
			o.refused, err = s.conflict(b, o.ledgerID, o.entryID, o.payload, o.loc, true)
			if err == nil && o.refused == nil {
				o.state, err = b.Add(o.ledgerID, o.entryID, o.lac, o.loc)
			}
		case opFence:
			o.state, err = b.Fence(o.ledgerID)
		case opLAC:
			o.state, err = b.SetLAC(o.ledgerID, o.lac)
		case opDelete:
			if o.fenced {
				// Fenced in memory, perhaps without a fence record in the
				// journal (its append failed; the fence stays in force):
				// the index tombstones it all the same.
				_, err = b.Fence(o.ledgerID)
			}
			if err == nil {
				o.state, err = b.Delete(o.ledgerID, s.now().UnixMilli())
			}
		case opCopy:
			o.moved, err = b.Relocate(o.ledgerID, o.entryID, o.from, o.loc)
		}
		if err != nil {
			b.Close()
			b = nil
			s.fatal(fmt.Errorf("writing the index: %w", err))
			s.failOps(append(applied, o), s.failure())
			applied = applied[:0]
			continue
		}
		applied = append(applied, o)
	}
	flush()
}

// completeOps updates the in-memory ledgers after ops were committed to
// the index, wakes long polls, and acknowledges the ops in order.
func (s *Storage) completeOps(ops []*op) {
	var size int64
	s.mu.Lock()
	for _, o := range ops {
		size += o.size
		l := s.ledgerLocked(o.ledgerID)
		o.settle(l)
		switch {
		case o.refused != nil:
		case o.kind == opAdd, o.kind == opFence, o.kind == opLAC:
			rose := o.state.LAC > l.st.LAC
			l.st, l.exists = o.state, true
			if rose && l.lacAdvanced != nil {
				close(l.lacAdvanced)
				l.lacAdvanced = nil
			}
		case o.kind == opDelete:
			l.st, l.exists = o.state, o.state.Tombstone // l.fenced stays as it is
		}
		s.dropIdleLocked(o.ledgerID, l)
	}
	last := ops[len(ops)-1].loc
	s.mu.applied = journal.Position{File: last.File, Offset: last.Offset + int64(last.Length)}
	s.mu.Unlock()
	s.budget.Release(size)
	for _, o := range ops {
		o.finish(o, o.refused)
	}
}

// failOps completes ops with err without applying them.
func (s *Storage) failOps(ops []*op, err error) {
	var size int64
	s.mu.Lock()
	for _, o := range ops {
		size += o.size
		l := s.ledgerLocked(o.ledgerID)
		o.settle(l)
		s.dropIdleLocked(o.ledgerID, l)
	}
	s.mu.Unlock()
	s.budget.Release(size)
	for _, o := range ops {
		o.finish(o, err)
	}
}

// diskBytes bounds the journal bytes an add of payloadBytes takes: its
// record and, in the journal's aligned format, the pad of a group of its
// own. Charging the bound keeps the disk budget an overestimate, so the
// journal cannot run out of space between two disk checks.
func (s *Storage) diskBytes(payloadBytes int) int64 {
	n := int64(journal.RecordHeaderSize + payloadBytes)
	if !s.opts.JournalBufferedWrites {
		n += journal.MaxPadBytes
	}
	return n
}
