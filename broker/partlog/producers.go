package partlog

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// producerTable is the idempotent-producer state of one partition (P5): a
// pure state machine over batch headers, no I/O.
type producerTable struct {
	m map[int64]*producerEntry
	// applied counts the batches applied; each entry keeps the count at
	// its last batch, so producers whose times are equal are ranked by
	// the order they appended in.
	applied uint64
}

type producerEntry struct {
	epoch int32
	// batches: the last producerBatches batches, oldest first.
	batches         []*producerBatch
	lastTimestampMs int64
	// lastApplied is producerTable.applied at its last batch (0 for a
	// producer restored from a snapshot).
	lastApplied uint64
}

type producerBatch struct {
	firstSeq, lastSeq int32
	base, last        int64
	// pending is the append that wrote it while it is not acknowledged
	// (a retry of it waits for its outcome); nil once acknowledged or when
	// restored from the log.
	pending *pendingAppend
}

// maxSequenceGap bounds how far ahead of the expected sequence a batch may
// be and still wait for the ones before it.
const maxSequenceGap = 1 << 20

// errSequenceGap marks an out-of-order batch that may become in order once
// batches in flight before it arrive.
var errSequenceGap = errors.New("sequence gap")

func newProducerTable(snapshot []*brokerpb.ProducerState) *producerTable {
	t := &producerTable{m: make(map[int64]*producerEntry)}
	for _, s := range snapshot {
		e := &producerEntry{epoch: s.GetEpoch(), lastTimestampMs: s.GetLastTimestampMs()}
		for _, b := range s.GetBatches() {
			e.batches = append(e.batches, &producerBatch{firstSeq: b.GetFirstSequence(), lastSeq: b.GetLastSequence(),
				base: b.GetBaseOffset(), last: b.GetLastOffset()})
		}
		t.m[s.GetProducerId()] = e
	}
	return t
}

// lastSequence is the sequence of a batch's last record (sequences wrap
// from MaxInt32 to 0, as Kafka's).
func lastSequence(h recordbatch.BatchHeader) int32 {
	return recordbatch.AddSequence(h.BaseSequence, int(h.LastOffsetDelta))
}

func nextSequence(seq int32) int32 { return recordbatch.AddSequence(seq, 1) }

// check decides about an idempotent batch (ProducerID >= 0): nil, nil to
// append it; the original batch for a duplicate of one of the last
// batches; or ErrProducerFenced / ErrOutOfOrderSequence.
//
// A batch that is ahead of the expected sequence by at most
// producerBatches batches' worth gets errSequenceGap (with
// ErrOutOfOrderSequence), and one that does not start at 0 for an unknown
// producer gets errSequenceGap with ErrUnknownProducer: the batches before
// it are most likely in flight in other requests (a client pipelines up
// to five), so Append waits briefly for them before deciding.
func (t *producerTable) check(h recordbatch.BatchHeader) (*producerBatch, error) {
	e := t.m[h.ProducerID]
	if e == nil {
		if h.BaseSequence == 0 {
			return nil, nil // a new producer
		}
		return nil, fmt.Errorf("%w: %w: producer %d is unknown here and its batch starts at sequence %d",
			ErrUnknownProducer, errSequenceGap, h.ProducerID, h.BaseSequence)
	}
	epoch := int32(h.ProducerEpoch)
	switch {
	case epoch < e.epoch:
		return nil, fmt.Errorf("%w: producer %d epoch %d, current epoch %d", ErrProducerFenced, h.ProducerID, epoch, e.epoch)
	case epoch > e.epoch:
		if h.BaseSequence != 0 {
			return nil, fmt.Errorf("%w: producer %d new epoch %d must start at sequence 0, got %d",
				ErrOutOfOrderSequence, h.ProducerID, epoch, h.BaseSequence)
		}
		return nil, nil
	}
	last := lastSequence(h)
	for _, b := range e.batches {
		if b.firstSeq == h.BaseSequence && b.lastSeq == last {
			return b, nil
		}
	}
	if len(e.batches) == 0 {
		return nil, nil
	}
	if want := nextSequence(e.batches[len(e.batches)-1].lastSeq); h.BaseSequence != want {
		err := fmt.Errorf("%w: producer %d epoch %d: sequence %d, expected %d",
			ErrOutOfOrderSequence, h.ProducerID, epoch, h.BaseSequence, want)
		if ahead := h.BaseSequence - want; ahead > 0 && ahead < maxSequenceGap {
			err = fmt.Errorf("%w: %w", errSequenceGap, err)
		}
		return nil, err
	}
	return nil, nil
}

// apply records an appended batch and returns its record and a function
// undoing it. p may be nil (a batch restored from the log). A new producer
// beyond maxProducers evicts the longest idle one.
//
// appendMs is when the batch was appended by the broker's clock: now for a
// live append; for a batch replayed from the log, replayClock's estimate
// (the append time is not stored). Expiry and eviction compare it with the
// broker's clock, so producer clocks matter only on replay, and there
// only within the order the batches were appended in.
func (t *producerTable) apply(h recordbatch.BatchHeader, base int64, p *pendingAppend, appendMs int64) (*producerBatch, func()) {
	old, had := t.m[h.ProducerID]
	var saved producerEntry
	if had {
		saved = *old
		saved.batches = slices.Clone(old.batches)
	}
	var evictedID int64
	var evicted *producerEntry
	if !had && len(t.m) >= maxProducers {
		evictedID, evicted = t.longestIdle()
		delete(t.m, evictedID)
	}
	e := old
	epoch := int32(h.ProducerEpoch)
	if !had || epoch != e.epoch {
		e = &producerEntry{epoch: epoch}
		t.m[h.ProducerID] = e
	}
	b := &producerBatch{firstSeq: h.BaseSequence, lastSeq: lastSequence(h),
		base: base, last: base + int64(h.LastOffsetDelta), pending: p}
	e.batches = append(e.batches, b)
	if n := len(e.batches); n > producerBatches {
		e.batches = slices.Delete(e.batches, 0, n-producerBatches)
	}
	e.lastTimestampMs = max(e.lastTimestampMs, appendMs)
	t.applied++
	e.lastApplied = t.applied
	return b, func() {
		if had {
			*old = saved
			t.m[h.ProducerID] = old
		} else {
			delete(t.m, h.ProducerID)
		}
		if evicted != nil {
			t.m[evictedID] = evicted
		}
	}
}

// longestIdle is the producer with the oldest lastTimestampMs; among
// equals the one whose last batch was applied first, then the lowest id
// (map order must not decide). t.m must not be empty.
func (t *producerTable) longestIdle() (int64, *producerEntry) {
	var id int64
	var oldest *producerEntry
	for pid, e := range t.m {
		if oldest == nil || idleLonger(e, pid, oldest, id) {
			id, oldest = pid, e
		}
	}
	return id, oldest
}

func idleLonger(a *producerEntry, aID int64, b *producerEntry, bID int64) bool {
	if a.lastTimestampMs != b.lastTimestampMs {
		return a.lastTimestampMs < b.lastTimestampMs
	}
	if a.lastApplied != b.lastApplied {
		return a.lastApplied < b.lastApplied
	}
	return aID < bID
}

// snapshot returns the state as stored in a PartitionLog, without the
// producers idle for longer than expiry at now, in producer id order.
func (t *producerTable) snapshot(now time.Time, expiry time.Duration) []*brokerpb.ProducerState {
	horizon := now.Add(-expiry).UnixMilli()
	var out []*brokerpb.ProducerState
	for _, id := range slices.Sorted(maps.Keys(t.m)) {
		e := t.m[id]
		if e.lastTimestampMs < horizon {
			continue
		}
		s := &brokerpb.ProducerState{ProducerId: id, Epoch: e.epoch, LastTimestampMs: e.lastTimestampMs}
		for _, b := range e.batches {
			s.Batches = append(s.Batches, &brokerpb.ProducerBatch{FirstSequence: b.firstSeq, LastSequence: b.lastSeq,
				BaseOffset: b.base, LastOffset: b.last})
		}
		out = append(out, s)
	}
	return out
}

// expire drops producers idle longer than expiry at now.
func (t *producerTable) expire(now time.Time, expiry time.Duration) {
	horizon := now.Add(-expiry).UnixMilli()
	for id, e := range t.m {
		if e.lastTimestampMs < horizon {
			delete(t.m, id)
		}
	}
}
