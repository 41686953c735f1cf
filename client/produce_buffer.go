package client

import (
	"context"
	"sync"
	"unsafe"

	"github.com/strata-log/strata/internal/bufpool"
)

// The producer's buffer: what counts against MaxBufferedBytes (a record's
// memory until its callback has run, its batch's encoding until the batch
// is answered), the memory reused from batch to batch, and the completion
// of batches, whose callbacks give their records' room back.

// recordBytes estimates r's encoded size.
func recordBytes(r *Record) int {
	n := len(r.Key) + len(r.Value) + recordOverheadBytes
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 10
	}
	return n
}

// recordMemory is what the producer holds for r, of encoded size size
// (recordBytes), until its callback has run: its bytes, the Record and
// its headers' array, and r's slot in its batch.
func recordMemory(r *Record, size int) int {
	return size + recordHeldBytes + len(r.Headers)*int(unsafe.Sizeof(Header{}))
}

// pendingRecords holds the record slices of batches whose callbacks ran,
// emptied, for new batches: a fresh slice grown record by record cost a
// few allocations per batch, as many as per record at moderate rates
// (batches of a few records).
var pendingRecords = sync.Pool{New: func() any { return new([]pendingRecord) }}

// recycleRecords gives b's record slice back to pendingRecords once its
// callbacks ran.
func recycleRecords(b *batch) {
	if b.recsBox == nil {
		return
	}
	clear(b.recs) // the records are the callers' again
	*b.recsBox = b.recs[:0]
	pendingRecords.Put(b.recsBox)
	b.recs, b.recsBox = nil, nil
}

// reserve waits for room for a record that holds held bytes and whose
// encoding takes encoded bytes (MaxBufferedBytes), and takes it.
func (p *Producer) reserve(ctx context.Context, held, encoded int64) error {
	waiting := false
	defer func() {
		if waiting {
			p.mu.Lock()
			p.mu.spaceWaiters--
			p.mu.Unlock()
		}
	}()
	for {
		p.mu.Lock()
		if err := p.usableLocked(); err != nil {
			p.mu.Unlock()
			return err
		}
		// Nothing buffered means no encoding either: a record larger
		// than the whole budget still goes, alone.
		if p.mu.buffered == 0 || p.mu.buffered+p.mu.encoded+held+encoded <= p.cfg.MaxBufferedBytes {
			p.mu.buffered += held
			p.mu.encoded += encoded
			p.mu.Unlock()
			return nil
		}
		if !waiting {
			waiting = true
			p.mu.spaceWaiters++
		}
		freed := p.mu.spaceFreed
		p.mu.Unlock()
		// Records waiting for linger hold space; make them go.
		p.signal()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// spaceFreedLocked wakes the Produce calls waiting for room. Making a
// channel for every release cost an allocation per batch, twice.
// REQUIRES: p.mu held.
func (p *Producer) spaceFreedLocked() {
	if p.mu.spaceWaiters == 0 {
		return
	}
	close(p.mu.spaceFreed)
	p.mu.spaceFreed = make(chan struct{})
}

// encodings holds encoded batches' memory for reuse: a producer encodes
// every byte it sends once more, and fresh memory for each batch cost a
// producer at half of its maximum rate a quarter of its CPU in the
// garbage collector, the runtime's scavenger and page faults. Classes
// from 256 bytes to 16 MiB, a quarter of a doubling apart (a batch's
// buffer is at most 25% larger than its encoding): a buffer counts
// against MaxBufferedBytes at its capacity, and with 4 KiB the smallest,
// a batch of one small record counted many times its size.
var encodings bufferPool = bufpool.New(bufpool.Steps(256, 16<<20, 4)...)

// bufferPool is encodings' type (a variable for tests).
type bufferPool interface {
	Get(n int) *[]byte
	Put(b *[]byte)
}

// encodingBytes is what b's encoding counts in p.mu.encoded: its buffer
// once encoded, the room reserved for it until then.
func (b *batch) encodingBytes() int64 {
	if b.encoded != nil {
		return int64(cap(b.encoded))
	}
	return int64(b.bytes)
}

// dropEncodingLocked forgets b's encoding: it is encoded again if sent
// again, and the room for that stays reserved.
// REQUIRES: p.mu held, b not in flight.
func (p *Producer) dropEncodingLocked(b *batch) {
	if b.encoded == nil {
		return
	}
	p.mu.encoded -= b.encodingBytes()
	b.encoded = nil
	p.mu.encoded += b.encodingBytes()
	p.spaceFreedLocked()
}

// recycleEncodingLocked gives back what a finished batch's encoding
// counts, and its memory to encodings when no send of it can still be
// reading it: when its one and only send was answered with success. The
// broker answers after it received the whole request, so gRPC has
// written it; an earlier send that failed (a timeout, a broken
// connection) may still be queued in its transport, so a retried batch's
// memory is left to the collector.
// REQUIRES: p.mu held, b done.
func (p *Producer) recycleEncodingLocked(b *batch) {
	p.mu.encoded -= b.encodingBytes()
	p.spaceFreedLocked()
	enc := b.encoded
	b.encoded = nil
	if enc != nil && b.err == nil && b.attempts == 0 {
		encodings.Put(&enc)
	}
}

// completeLocked moves ps's finished batches, in order, to the callback
// queue. A finished batch behind an unfinished one waits, so callbacks
// keep the partition's order.
// REQUIRES: p.mu held.
func (p *Producer) completeLocked(ps *partState) {
	n := 0
	for _, b := range ps.batches {
		if !b.done {
			break
		}
		n++
		for i := range b.recs {
			r := b.recs[i].rec
			r.Partition = b.tp.Partition
			r.Offset = -1
			if b.err == nil && b.base >= 0 {
				r.Offset = b.base + int64(i)
			}
		}
		p.recycleEncodingLocked(b)
		// The records' bytes stay counted until their callbacks ran
		// (callbacks): with slow callbacks, finished records would
		// otherwise pile up without bound while Produce accepts more.
		p.mu.completed = append(p.mu.completed, b)
	}
	if n == 0 {
		return
	}
	// Moved down rather than resliced, so that the array is reused: its
	// part before the slice's start would keep finished batches (their
	// records and encoding) reachable until the next append reallocated
	// it, which doubled the client's memory under load.
	m := copy(ps.batches, ps.batches[n:])
	clear(ps.batches[m:])
	ps.batches = ps.batches[:m]
	p.mu.topics[ps.tp.Topic].sealed -= n
	select {
	case p.cbWake <- struct{}{}:
	default:
	}
}

// releaseStepBytes: callbacks gives buffer space back at least every this
// many bytes of records whose callbacks ran.
const releaseStepBytes = 64 << 10

// callbacks runs completion callbacks in queue order; a record's bytes
// count against MaxBufferedBytes until its callback has run.
func (p *Producer) callbacks() {
	defer close(p.cbDone)
	var spare []*batch // the queue's other array, swapped in each round
	for {
		stop := false
		select {
		case <-p.cbWake:
		case <-p.cbStop:
			stop = true
		}
		p.mu.Lock()
		todo := p.mu.completed
		p.mu.completed = spare
		p.mu.Unlock()
		var held, records int64
		for i, b := range todo {
			if b.err != nil {
				p.stats.failed.Add(int64(len(b.recs)))
			} else {
				p.stats.delivered.Add(int64(len(b.recs)))
			}
			for _, r := range b.recs {
				if r.cb != nil {
					r.cb(r.rec, b.err)
				}
			}
			// Release as callbacks run, in steps, so a blocked Produce
			// goes on while a long queue of callbacks runs.
			held += b.held
			records += int64(len(b.recs))
			recycleRecords(b)
			if held >= releaseStepBytes || i == len(todo)-1 {
				p.releaseCallbacksRan(held, records)
				held, records = 0, 0
			}
		}
		clear(todo)
		spare = todo[:0]
		if stop {
			return
		}
	}
}

// releaseCallbacksRan gives back what records whose callbacks ran held.
func (p *Producer) releaseCallbacksRan(held, records int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.buffered -= held
	p.mu.records -= records
	if p.mu.records == 0 && p.mu.idle != nil {
		close(p.mu.idle)
		p.mu.idle = nil
	}
	p.spaceFreedLocked()
}
