package storage

import (
	"fmt"
	"sync"

	"github.com/strata-log/strata/ledger/index"
	"github.com/strata-log/strata/ledger/journal"
)

// maxApplyBatch bounds the records of one index batch.
const maxApplyBatch = 4096

// applier is the second half of the write path: the journal's done
// callbacks queue durable records here (push), and one goroutine (run)
// applies them to the index in journal order, in batches, updates the
// in-memory ledger states, then acknowledges them.
type applier struct {
	s *Storage
	// mu guards the queue, in journal order; bounded by Storage.budget.
	// A leaf: nothing else is taken while it is held.
	mu struct {
		sync.Mutex
		queue         []*op
		journalClosed bool
	}
	wake chan struct{}
	done chan struct{} // closed when run returns
	// applied is apply's list of the ops in its batch, kept between
	// calls (only the applier goroutine uses it).
	applied []*op
}

func newApplier(s *Storage) *applier {
	return &applier{s: s, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// push is the journal's done callback: it hands o to the applier.
// It never blocks (the queue is bounded by budget).
func (a *applier) push(o *op) {
	a.mu.Lock()
	a.mu.queue = append(a.mu.queue, o)
	a.mu.Unlock()
	a.wakeUp()
}

func (a *applier) wakeUp() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// journalClosed tells the applier that the journal is closed (nothing more
// will be pushed) and waits until it has applied everything and returned.
func (a *applier) journalClosed() {
	a.mu.Lock()
	a.mu.journalClosed = true
	a.mu.Unlock()
	a.wakeUp()
	<-a.done
}

// run is the applier goroutine: it applies durable records to the index
// in journal order, in batches, then acknowledges them. It exits once the
// journal is closed and everything is applied.
func (a *applier) run() {
	defer close(a.done)
	var spare []*op
	for {
		a.mu.Lock()
		for len(a.mu.queue) == 0 && !a.mu.journalClosed {
			a.mu.Unlock()
			<-a.wake
			a.mu.Lock()
		}
		ops := a.mu.queue
		a.mu.queue = spare
		a.mu.Unlock()
		if len(ops) == 0 {
			return // the journal is closed and everything is applied
		}
		for rest := ops; len(rest) > 0; {
			n := min(len(rest), maxApplyBatch)
			a.apply(rest[:n])
			rest = rest[n:]
		}
		clear(ops) // drop payload references
		spare = ops[:0]
	}
}

// apply applies ops (in journal order) in one index batch and completes
// them. A record the journal failed fails its op; an index error is fatal.
func (a *applier) apply(ops []*op) {
	s := a.s
	applied := a.applied[:0]
	var b *index.Batch
	flush := func() {
		if b == nil {
			return
		}
		err := b.Commit(false)
		b = nil
		if err != nil {
			s.fatal(fmt.Errorf("writing the index: %w", err))
			a.fail(applied, s.failure())
		} else {
			a.complete(applied)
		}
		clear(applied) // drop payload references
		applied = applied[:0]
	}
	for _, o := range ops {
		if o.queueErr != nil {
			flush()
			a.fail([]*op{o}, translate(o.queueErr))
			continue
		}
		if err := s.failure(); err != nil {
			flush()
			a.fail([]*op{o}, err)
			continue
		}
		if b == nil {
			var err error
			if b, err = s.ix.NewBatch(); err != nil {
				s.fatal(fmt.Errorf("writing the index: %w", err))
				a.fail([]*op{o}, s.failure())
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
			applied = append(applied, o)
			a.fail(applied, s.failure())
			clear(applied)
			applied = applied[:0]
			continue
		}
		applied = append(applied, o)
	}
	flush()
	a.applied = applied[:0]
}

// complete updates the in-memory ledgers after ops were committed to
// the index, wakes long polls, and acknowledges the ops in order.
func (a *applier) complete(ops []*op) {
	s := a.s
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
		if o.kind == opAdd && o.refused == nil {
			s.metrics.addLatency.Observe(s.now().Sub(o.start).Seconds())
		}
		o.done(o.refused)
	}
}

// fail completes ops with err without applying them.
func (a *applier) fail(ops []*op, err error) {
	s := a.s
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
		o.done(err)
	}
}
