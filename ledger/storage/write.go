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
	verified  bool  // add: Options.Verify vouched for the entry (H2)
	fenced    bool  // delete: the ledger was fenced when it was admitted
	// payload is an add's bytes, kept until it is applied so that an
	// overwrite can be compared with the stored entry (Storage.conflict).
	payload []byte
	from    journal.Location
	start   time.Time
	// done is called once, by the applier, after the op is applied (err
	// nil) or failed: an add's caller's own callback, so that an add
	// allocates no closure.
	done func(err error)
	// applier gets the op once the journal is done with its record
	// (Journaled).
	applier *applier

	// Set by Journaled.
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

// Journaled is the journal's report on o's record (journal.Waiter): it
// hands o to the applier.
func (o *op) Journaled(loc journal.Location, err error) {
	o.loc, o.queueErr = loc, err
	o.applier.push(o)
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
	if err := s.begin(); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
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
	prevVerified := l.maxVerified
	switch o.kind {
	case opAdd:
		l.maxQueued = max(l.maxQueued, int64(o.entryID))
		if o.verified {
			l.maxVerified = max(l.maxVerified, int64(o.entryID))
		}
	case opDelete:
		l.maxQueued, l.maxVerified = -1, -1
	}
	if o.kind == opAdd || o.kind == opLAC {
		s.boundLACLocked(o, l)
		rec.LAC = o.lac
	}
	s.mu.Unlock()
	o.applier = s.applier
	if err := s.j.AppendWaiter(ctx, rec, o); err != nil {
		s.mu.Lock()
		o.settle(l)
		l.maxQueued, l.maxVerified = prevMax, prevVerified
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

// boundLACLocked lowers o's LAC to what this bookie may keep. A LAC says
// "every entry up to here is acknowledged"; whatever a writer claims, a
// bookie keeps it only up to the highest entry it holds or has journaled
// ahead of this record (H1), for an add only below the entry that carries
// it (a writer piggybacks LAC < entry), and only up to the highest entry
// whose digest Options.Verify vouched for (H2). The journal records the
// lowered value, so replay repeats it.
// REQUIRES: s.mu held, and the ledger's stripe; o is an add or a LAC whose
// entry, for an add, is already counted in l.
func (s *Storage) boundLACLocked(o *op, l *ledger) {
	held := l.maxQueued
	if o.kind == opAdd {
		held = min(held, int64(o.entryID)-1)
	}
	switch {
	case o.lac > held:
		s.metrics.lacClamped.Inc()
		s.logger.Debug("LAC lowered to the highest entry held", "ledger", o.ledgerID, "lac", o.lac, "held", held)
	case o.lac > l.maxVerified:
		s.metrics.lacUnverified.Inc()
		s.logger.Debug("LAC lowered to the highest entry verified", "ledger", o.ledgerID, "lac", o.lac,
			"verified", l.maxVerified)
	default:
		return
	}
	o.lac = max(min(held, l.maxVerified), -1)
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
// lowered below entryID, to the highest entry id held and to the highest
// one Options.Verify vouched for, this one included when it does (H1, H2).
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
	case s.disk.readOnly.Load() || !s.disk.spend(s.disk.addBytes(len(payload))):
		return ErrReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Checked before any lock is taken: the check may cost a digest of the
	// payload.
	verified := s.opts.Verify == nil || s.opts.Verify(ledgerID, entryID, payload)
	o := &op{
		kind: opAdd, ledgerID: ledgerID, entryID: entryID, lac: lac, start: start, payload: payload, verified: verified,
		size: int64(journal.RecordHeaderSize + len(payload)), done: done,
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
	o.done = func(err error) { ch <- result{o.state, err} }
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
// claim entries nobody can read here (H1); and to the highest one
// Options.Verify vouched for (H2), which reads entry lac back to vouch for
// it if it was not. Errors: ErrInvalid (lac < -1), ErrClosed, ErrFailed,
// ctx's.
func (s *Storage) WriteLAC(ctx context.Context, ledgerID uint64, lac int64) error {
	if lac < -1 {
		return fmt.Errorf("%w: LAC %d", ErrInvalid, lac)
	}
	s.verifyHeld(ledgerID, lac)
	_, err := s.record(ctx, &op{kind: opLAC, ledgerID: ledgerID, lac: lac},
		journal.Record{Type: journal.TypeLAC, LedgerID: ledgerID, LAC: lac})
	return err
}

// verifyHeld lets Options.Verify vouch for entry lac of the ledger, held
// here but not vouched for when it was added (its ledger's key was not
// known yet, or the bookie restarted since: H2), by reading it back, so
// that an explicit LAC naming it is kept. Explicit LACs are rare (an idle
// writer sends one), so the read costs little.
func (s *Storage) verifyHeld(ledgerID uint64, lac int64) {
	if s.opts.Verify == nil || lac < 0 {
		return
	}
	s.mu.Lock()
	l := s.mu.ledgers[ledgerID]
	unvouched := l != nil && lac > l.maxVerified && lac <= l.maxQueued
	s.mu.Unlock()
	if !unvouched {
		return
	}
	e, err := s.Read(ledgerID, uint64(lac))
	if err != nil || !s.opts.Verify(ledgerID, uint64(lac), e.Payload) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Still held: a delete since the read would have reset maxQueued.
	if l := s.mu.ledgers[ledgerID]; l != nil && lac <= l.maxQueued {
		l.maxVerified = max(l.maxVerified, lac)
	}
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
		case s.gc.kick <- struct{}{}:
		default:
		}
	}
	return err
}
