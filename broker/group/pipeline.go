package group

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// This file is the coordinator's write path: how a change reaches the
// OffsetsLog without c.mu held across the append (doc.go, "Writes", W1-W6).
//
// Every group has a lane: at most one append of the group's records is in
// flight; writes that arrive meanwhile queue, and go together in the next
// append (a group commit). A batch is formed under c.mu: each queued write is
// prepared against the group's state as of then (every earlier write of the
// group applied or failed), and the group's metadata is added when memory
// is ahead of the log. The append runs without c.mu; its outcome is applied
// under c.mu, in lane order, before any of its writes is answered. Lanes of
// different groups run in parallel: their records commute on replay. A
// heartbeat's change of a group's metadata does not wait behind the
// group's batch in flight when that batch holds offsets only: it is
// appended at once in a side batch of its own (W6).
//
// No goroutine is started: a request whose write finds its lane busy waits,
// and is woken either with its outcome or to lead the next batch itself
// (leader hand-off), so the lane's writer is always a request that is
// waiting anyway, or Tick.

// writer is the coordinator's write path. It shares the coordinator's
// mutex (c.mu): its …Locked methods need it held, wait, runLane and
// runSide take it themselves, and appendBatch runs without it.
type writer struct{ c *Coordinator }

// writeState is where a write is in its lane.
type writeState int

const (
	writeQueued   writeState = iota // waiting for the lane
	writeLeading                    // woken to form and append the next batch
	writeInFlight                   // in the batch being appended
	writeDone                       // answered: err is the outcome
	writeSide                       // to append the group's metadata next to the lane's batch (W6)
)

// prepared is a write made concrete when its batch is formed.
type prepared struct {
	records []recordbatch.Record
	// apply changes memory once the records are durable (nil: nothing
	// to apply).
	apply func()
	// refusal: the write is answered with it once the batch is durable
	// (the batch may still carry the group's metadata the refusal was
	// decided on).
	refusal error
	// metadata: records holds a tombstone of the group's metadata.
	metadata bool
}

// write is one request's change of one group.
type write struct {
	g *group
	// prepare runs under c.mu when the write's batch is formed; it must
	// not change the group (apply does, later). It may run more than once
	// (a write that does not fit in a batch waits for the next).
	prepare func() prepared
	// flushOf: a write with nothing of its own, waiting for the group's
	// metadata as of version flushOf to be durable (a heartbeat's change).
	flushOf int64

	// Guarded by c.mu.
	state writeState
	p     prepared
	err   error
	wake  chan struct{} // buffered; signalled on writeLeading and writeDone
}

// lane serializes the appends of one group (W2).
type lane struct {
	busy  bool     // a batch of the group is being formed or appended
	queue []*write // in arrival order; non-empty only while busy
	// inFlight: the lane's batch is formed and being appended (busy alone
	// also covers a leader chosen but not yet forming its batch, which
	// will take the metadata as memory has it then). metadata: the batch
	// in flight carries a record of the group's metadata. Unless it does,
	// a heartbeat's change of the metadata is appended at once in a batch
	// of its own (side) next to it: the two batches share no key, and the
	// one in flight was decided on metadata the log already holds (W6).
	// A side batch is never started before the lane's batch is formed:
	// that batch would carry the metadata too, and two metadata records
	// of a group in flight at once could land in either order (W2).
	// mainDone: the lane's batch completed while the side batch was in
	// flight, whose completion then releases the lane.
	inFlight, metadata, side, mainDone bool
	// held: the side batch's write, completed (with heldErr) while the
	// lane's batch was still in flight; answered once that batch is
	// applied (W6).
	held    *write
	heldErr error
}

func newWrite(g *group, prepare func() prepared) *write {
	return &write{g: g, prepare: prepare, wake: make(chan struct{}, 1)}
}

// flushLocked returns a write that waits until the group's metadata, as in
// memory now, is durable; nil when it already is.
// REQUIRES: c.mu held.
func (wr *writer) flushLocked(g *group) *write {
	wr.changedLocked(g)
	if g.version == g.persisted {
		return nil
	}
	w := newWrite(g, func() prepared { return prepared{} })
	w.flushOf = g.version
	if l := &g.lane; l.busy && l.inFlight && !l.metadata && !l.side {
		l.side = true
		w.state = writeSide
		return w
	}
	wr.enqueueLocked(w)
	return w
}

// flushAnsweredLocked gives each call g's classic machine answered with a
// result since the last call its flush: a write that waits until the
// group's metadata, as in memory now, is durable (nil when it is).
// REQUIRES: c.mu held.
func (wr *writer) flushAnsweredLocked(g *group) {
	if g.classic == nil || len(g.classic.toFlush) == 0 {
		return
	}
	for _, p := range g.classic.toFlush {
		p.setFlush(wr.flushLocked(g))
	}
	g.classic.toFlush = nil
}

// runSide appends g's metadata in a batch of its own while the lane's batch
// (which holds no metadata) is in flight, and answers w (W6).
func (wr *writer) runSide(w *write) {
	g := w.g
	wr.c.mu.Lock()
	b := newBatch()
	w.state = writeInFlight
	stateErr := wr.c.checkStateLocked()
	if stateErr == nil {
		wr.addMetadataLocked(b, g)
	}
	wr.c.mu.Unlock()
	err := wr.appendBatch(b)
	wr.c.mu.Lock()
	defer wr.c.mu.Unlock()
	loaded := wr.c.mu.state == stateLoaded
	if err == nil {
		err = stateErr
	}
	wr.metadataOutcomeLocked(b, g, err, loaded)
	l := &g.lane
	l.side = false
	if l.inFlight && err == nil {
		// The lane's batch, appended before this one, is not applied
		// yet: w is answered once it is (completeLocked), so that a
		// member told of this metadata (an assignment) reads offsets
		// holding every commit of that batch (W6). A failure reveals
		// nothing: it is answered now.
		l.held, l.heldErr = w, err
		return
	}
	finishLocked(w, err)
	if l.mainDone {
		l.mainDone = false
		wr.releaseLaneLocked(g)
	}
}

// enqueueLocked puts w in its group's lane. The caller must then release
// c.mu and call wait.
// REQUIRES: c.mu held.
func (wr *writer) enqueueLocked(w *write) {
	l := &w.g.lane
	l.queue = append(l.queue, w)
	if l.busy {
		w.state = writeQueued
		return
	}
	l.busy = true
	w.state = writeLeading
}

func signal(w *write) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// REQUIRES: c.mu held.
func finishLocked(w *write, err error) {
	w.state, w.err = writeDone, err
	signal(w)
}

// wait returns w's outcome, leading its lane's next batch when woken to.
// If ctx ends while w is still queued, w leaves the lane and nothing of it
// is written; if it ends while w's batch is in flight, the outcome is
// unknown.
func (wr *writer) wait(ctx context.Context, w *write) error {
	for {
		wr.c.mu.Lock()
		switch w.state {
		case writeDone:
			wr.c.mu.Unlock()
			return w.err
		case writeLeading:
			wr.c.mu.Unlock()
			wr.runLane(w.g)
			continue
		case writeSide:
			wr.c.mu.Unlock()
			wr.runSide(w)
			continue
		}
		wr.c.mu.Unlock()
		select {
		case <-w.wake:
		case <-ctx.Done():
			wr.c.mu.Lock()
			switch w.state {
			case writeQueued:
				l := &w.g.lane
				for i, q := range l.queue {
					if q == w {
						l.queue = append(l.queue[:i], l.queue[i+1:]...)
						break
					}
				}
				wr.c.mu.Unlock()
				return fmt.Errorf("group: waiting to write group %q: %w", w.g.id, ctx.Err())
			case writeInFlight:
				wr.c.mu.Unlock()
				return fmt.Errorf("group: writing group %q: outcome unknown: %w", w.g.id, ctx.Err())
			}
			wr.c.mu.Unlock() // leading or done: the loop takes it
		}
	}
}

// batch is one append: the writes and metadata of the groups whose lanes
// it holds.
type batch struct {
	groups  []*group
	writes  map[*group][]*write
	meta    map[*group]metadataSnapshot
	records []recordbatch.Record
	bytes   int // of records, as the log's batch bound counts them
}

type metadataSnapshot struct {
	version int64
	value   *brokerpb.GroupMetadataValue
	counts  map[string]int32 // the partition counts value's targets were computed with
}

func newBatch() *batch {
	return &batch{writes: map[*group][]*write{}, meta: map[*group]metadataSnapshot{}, bytes: batchHeaderBytes}
}

// runLane forms the next batch of g's lane, appends it and applies it. The
// caller leads the lane (it holds g.lane.busy).
func (wr *writer) runLane(g *group) {
	wr.c.mu.Lock()
	b := newBatch()
	wr.addGroupLocked(b, g, nil) // nothing once closed: the release fails the queue
	wr.c.mu.Unlock()
	err := wr.appendBatch(b)
	wr.c.mu.Lock()
	wr.completeLocked(b, err)
	wr.c.mu.Unlock()
}

// addGroupLocked adds g's metadata (when memory is ahead of the log) and
// then its queued writes, in order, while they fit in the batch's bound
// (into an empty batch anything goes), plus extra (Tick's own write, not
// queued). A write that does not fit stays first in the queue.
// REQUIRES: c.mu held, g's lane held by the caller.
func (wr *writer) addGroupLocked(b *batch, g *group, extra *write) {
	b.groups = append(b.groups, g)
	if wr.c.mu.state != stateLoaded {
		return
	}
	wr.addMetadataLocked(b, g)
	_, g.lane.metadata = b.meta[g]
	g.lane.inFlight = true
	maxBytes := wr.maxBatchBytes()
	take := func(w *write) bool {
		p := w.prepare()
		size := 0
		for _, r := range p.records {
			size += recordBytes(r)
		}
		if len(p.records) > 0 && len(b.records) > 0 && b.bytes+size > maxBytes {
			return false
		}
		w.p, w.state = p, writeInFlight
		g.lane.metadata = g.lane.metadata || p.metadata
		b.records = append(b.records, p.records...)
		b.bytes += size
		b.writes[g] = append(b.writes[g], w)
		return true
	}
	l := &g.lane
	for len(l.queue) > 0 && take(l.queue[0]) {
		l.queue[0] = nil
		l.queue = l.queue[1:]
	}
	if extra != nil && !take(extra) {
		extra.state = writeDone // Tick tries again at its next run
	}
}

// addMetadataLocked adds g's metadata to b when memory is ahead of the log.
// REQUIRES: c.mu held.
func (wr *writer) addMetadataLocked(b *batch, g *group) {
	wr.changedLocked(g)
	if g.version == g.persisted {
		return
	}
	v := g.metadata()
	r, err := metadataRecord(g.id, v, wr.c.cfg.Now().UnixMilli())
	if err != nil { // cannot happen: a proto message of ours
		wr.c.log.Error("encoding group metadata failed", "group", g.id, "err", err)
		return
	}
	b.records = append(b.records, r)
	b.bytes += recordBytes(r)
	b.meta[g] = metadataSnapshot{g.version, v, maps.Clone(g.consumer.partitionCounts)}
}

// The size of a batch as the OffsetsLog's bound counts it, at most: the
// batch header, and per record its key, value and at most 32 bytes of
// lengths, deltas and attributes.
const batchHeaderBytes = 61

func recordBytes(r recordbatch.Record) int { return len(r.Key) + len(r.Value) + 32 }

// appendBatch appends b's records, if any. The append serves every write
// of the batch, so it is not tied to the leader's cancellation: it runs
// until its outcome is known or the coordinator closes (W4).
func (wr *writer) appendBatch(b *batch) error {
	if len(b.records) == 0 {
		return nil
	}
	if err := wr.c.cfg.Log.Append(wr.c.life, b.records); err != nil {
		return fmt.Errorf("group: write to %s partition %d: %w", OffsetsTopic, wr.c.cfg.Partition, err)
	}
	return nil
}

// metadataOutcomeLocked applies the outcome of b's append to g's metadata
// record in it, if b held one: durable, or reverted to what the log holds
// (W4).
// REQUIRES: c.mu held.
func (wr *writer) metadataOutcomeLocked(b *batch, g *group, err error, loaded bool) {
	snap, wroteMeta := b.meta[g]
	switch {
	case err == nil && wroteMeta:
		if snap.version >= g.persisted { // one metadata batch in flight (W2): always
			g.persisted, g.durable, g.durableCounts = snap.version, snap.value, snap.counts
		}
		wr.finishFlushedLocked(g)
	case err != nil && wroteMeta && loaded:
		wr.revertLocked(g, err)
	}
}

// completeLocked applies b's outcome, answers its writes and releases its
// lanes: on success the metadata written becomes the durable one and each
// write is applied, in lane order (W3); on failure nothing is applied, and
// a group whose metadata was in the batch reverts to its durable metadata,
// failing every heartbeat waiting on what is undone (W4).
// REQUIRES: c.mu held.
func (wr *writer) completeLocked(b *batch, err error) {
	loaded := wr.c.mu.state == stateLoaded
	for _, g := range b.groups {
		l := &g.lane
		l.inFlight, l.metadata = false, false
		wr.metadataOutcomeLocked(b, g, err, loaded)
		for _, w := range b.writes[g] {
			switch {
			case err != nil:
				finishLocked(w, err)
			case w.p.refusal != nil:
				finishLocked(w, w.p.refusal)
			default:
				if w.p.apply != nil && loaded {
					w.p.apply()
				}
				finishLocked(w, nil)
			}
		}
		if l.held != nil {
			// The side batch completed first: its write, and the
			// heartbeats it made durable, are answered now (W6).
			finishLocked(l.held, l.heldErr)
			l.held, l.heldErr = nil, nil
			wr.finishFlushedLocked(g)
		}
		if l.side {
			l.mainDone = true // the side batch releases the lane
			continue
		}
		wr.releaseLaneLocked(g)
	}
}

// finishFlushedLocked answers the queued heartbeats whose change is now
// durable: they need no turn of their own. While the lane's batch is in
// flight (a side batch completed first) they wait for it (W6).
// REQUIRES: c.mu held.
func (wr *writer) finishFlushedLocked(g *group) {
	if g.lane.inFlight {
		return
	}
	kept := g.lane.queue[:0]
	for _, w := range g.lane.queue {
		if w.flushOf > 0 && w.flushOf <= g.persisted && w.state == writeQueued {
			finishLocked(w, nil)
			continue
		}
		kept = append(kept, w)
	}
	clear(g.lane.queue[len(kept):])
	g.lane.queue = kept
}

// releaseLaneLocked hands g's lane to its first queued write, or frees it
// (and forgets g if nothing is left of it).
// REQUIRES: c.mu held, g's lane held by the caller.
func (wr *writer) releaseLaneLocked(g *group) {
	l := &g.lane
	if wr.c.mu.state != stateLoaded {
		for _, w := range l.queue {
			finishLocked(w, wr.c.checkStateLocked())
		}
		l.queue = nil
	}
	if len(l.queue) > 0 {
		l.queue[0].state = writeLeading
		signal(l.queue[0])
		return
	}
	l.busy = false
	wr.dropIfEmptyLocked(g)
}

// revertLocked puts g's metadata back to the durable one after a failed
// write, and fails the heartbeats waiting for what is undone (W4). The
// failed record may still be in the log (a log may report a failure whose
// records landed), so the reverted metadata is a new version, ahead of
// the log: the group's next batch (a heartbeat's, or Tick's) writes it
// after whatever of the failed one lands, and the log ends as memory is.
// It runs when the lane's batch or its side batch completes, while no
// write of the lane is leading (one is chosen only once both are done), so
// every waiting heartbeat is queued.
// REQUIRES: c.mu held.
func (wr *writer) revertLocked(g *group, err error) {
	g.revert(err, wr.c.cfg.Now(), wr.c.lim)
	g.version++
	kept := g.lane.queue[:0]
	for _, w := range g.lane.queue {
		if w.flushOf > 0 && w.state == writeQueued {
			finishLocked(w, err)
			continue
		}
		kept = append(kept, w)
	}
	clear(g.lane.queue[len(kept):])
	g.lane.queue = kept
	wr.c.reportLocked(g)
	wr.c.log.Warn("group metadata write failed: reverted to the last durable metadata", "group", g.id, "err", err)
}

// changedLocked turns the state machine's dirty flag into a new version of
// the group's metadata (W1).
// REQUIRES: c.mu held.
func (wr *writer) changedLocked(g *group) {
	if g.takeDirty() {
		g.version++
	}
}

// dropIfEmptyLocked forgets a group that holds nothing a replay would keep
// (no member, no offset, epoch 0) once its lane is idle.
// REQUIRES: c.mu held.
func (wr *writer) dropIfEmptyLocked(g *group) {
	if g.lane.busy || !g.blank() || wr.c.mu.groups[g.id] != g {
		return
	}
	wr.dropGroupLocked(g)
}

// dropGroupLocked forgets g.
// REQUIRES: c.mu held.
func (wr *writer) dropGroupLocked(g *group) {
	delete(wr.c.mu.groups, g.id)
	wr.c.cfg.Metrics.groups.add(-1)
	wr.c.cfg.Metrics.members.DeleteLabelValues(g.id)
	wr.c.cfg.Metrics.rebalances.DeleteLabelValues(g.id)
}

// writeGroups writes the groups ids (Tick's: those whose metadata changed
// or whose offsets expire), as many to a batch as the OffsetsLog's bound
// allows (each group's records in one batch). A group whose lane is busy
// is left to its lane's next batch or to the next Tick.
func (wr *writer) writeGroups(ids []string, now time.Time) error {
	c := wr.c
	var firstErr error
	for len(ids) > 0 {
		c.mu.Lock()
		if err := c.checkStateLocked(); err != nil {
			c.mu.Unlock()
			return err
		}
		b := newBatch()
		for len(ids) > 0 {
			g := c.mu.groups[ids[0]]
			if g == nil || g.lane.busy {
				ids = ids[1:]
				continue
			}
			if len(b.records) > 0 && b.bytes+wr.groupWriteBytesLocked(g, now) > wr.maxBatchBytes() {
				break // the next batch
			}
			ids = ids[1:]
			g.lane.busy = true
			wr.addGroupLocked(b, g, wr.expireOffsetsWrite(g, now))
		}
		c.mu.Unlock()
		err := wr.appendBatch(b)
		c.mu.Lock()
		wr.completeLocked(b, err)
		c.mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}
