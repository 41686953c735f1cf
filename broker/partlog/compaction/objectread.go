package compaction

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/segfile"
)

// carryBytes is the room kept before each read's bytes for the
// partial batch the previous read ended in, so that it is joined to the
// rest without copying the read (a larger one is copied).
const carryBytes = 1 << 20

// readObject calls fn with every batch of a committed object, in order
// (id: the batch's number in it). It reads the store directly, not
// through the tier reader's chunk cache, for the reason readSegment has
// its own readers: a pass must not evict what consumers read; segfile
// checks every batch (CRC-32C, offsets, index) as a fetch does, a
// segfile.BlockChecker authenticates the bytes before any batch in them
// is walked (T11: a pass must not launder forged bytes into an object it
// authenticates), and a missing, damaged or forged object fails the pass
// (T10).
//
// The data section is read front to back in Options.ReadBytes ranges, the
// next one downloading while fn works on the current one. Unless fn keeps
// the batches, a range's memory goes to the next read once fn is done
// with it.
func (p *pass) readObject(ctx context.Context, seg *brokerpb.TieredSegment, keeps bool, fn func(id int64, payload []byte) error) error {
	rr := tierpass.ObjectRange{Store: p.cfg.Tier.Store, Key: seg.ObjectKey, Timeout: p.cfg.Tier.RequestTimeout}
	tail, err := segfile.ReadTail(ctx, rr, seg.IndexPos, seg.SizeBytes, p.cfg.Tier.Auth(seg))
	if err != nil {
		return fmt.Errorf("partlog: compaction: reading object %s: %w", seg.ObjectKey, err)
	}
	end := tail.DataEnd()
	blocks := tail.NewBlockChecker(segfile.HeaderSize)
	rctx, cancel := context.WithCancel(ctx)
	next := startRangeRead(rctx, rr, segfile.HeaderSize, end, p.opts.ReadBytes, !keeps)
	var prev *rangeRead // the range fn last worked on
	defer func() {
		cancel()
		if next != nil {
			<-next.done
		}
		if !keeps {
			prev.recycle()
			next.recycle()
		}
	}()
	var it *segfile.Iterator
	var carry []byte // the partial batch the last range ended in
	id := int64(0)
	for next != nil {
		cur := next
		if <-cur.done; cur.err != nil {
			next = nil
			return fmt.Errorf("partlog: compaction: reading object %s at %d: %w", seg.ObjectKey, cur.pos, cur.err)
		}
		next = startRangeRead(rctx, rr, cur.pos+int64(len(cur.data)), end, p.opts.ReadBytes, !keeps)
		p.cfg.Metrics.TierReadBytes.Add(float64(len(cur.data)))
		if err := blocks.Write(cur.data); err != nil {
			return fmt.Errorf("partlog: compaction: reading object %s: %w", seg.ObjectKey, err)
		}
		buf := cur.join(carry) // carry copied: prev is no longer needed
		if !keeps {
			prev.recycle()
		}
		prev = cur
		// Only the authenticated bytes are walked; the rest is carried
		// with the partial batch to the next range.
		_, verified := blocks.Verified()
		usable := buf[:max(verified-(cur.pos-int64(len(carry))), 0)]
		if it == nil {
			it = tail.Batches(usable, segfile.HeaderSize)
		} else {
			it.Continue(usable)
		}
		for it.Next() {
			if err := fn(id, it.Batch().Bytes); err != nil {
				return err
			}
			id++
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("partlog: compaction: reading object %s: %w", seg.ObjectKey, err)
		}
		carry = buf[it.Pos()-(cur.pos-int64(len(carry))):]
	}
	if it == nil {
		return fmt.Errorf("%w: object %s: no data section", partlog.ErrCorruptBatch, seg.ObjectKey)
	}
	if !it.Done() {
		return fmt.Errorf("%w: object %s: the data section ends inside a batch at %d", partlog.ErrCorruptBatch, seg.ObjectKey, it.Pos())
	}
	return nil
}

// rangeRead is one Options.ReadBytes read of an object's data section,
// made in the background. data is read into space with carryRoom bytes
// before it (join).
type rangeRead struct {
	pos       int64
	space     []byte
	carryRoom int // bytes of space in front of data
	data      []byte
	err       error
	done      chan struct{}
}

// rangeBuffers holds the spaces (*[]byte, carryBytes +
// the read size) of ranges whose batches nobody kept.
var rangeBuffers sync.Pool

// startRangeRead starts reading [pos, min(pos+readBytes, end));
// nil when pos is end. pooled: its space comes from rangeBuffers.
func startRangeRead(ctx context.Context, rr tierpass.ObjectRange, pos, end, readBytes int64, pooled bool) *rangeRead {
	if pos >= end {
		return nil
	}
	r := &rangeRead{pos: pos, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		n := min(readBytes, end-pos)
		rc, done, err := rr.Open(ctx, pos, n)
		if err != nil {
			r.err = err
			return
		}
		defer done()
		// A pooled space has room in front for the carry of a batch
		// straddling the range before; a kept one (its batches stay in the
		// pass buffer, which counts data bytes only) is exactly the range:
		// a carry is joined to it by a copy.
		if pooled {
			r.carryRoom = carryBytes
		}
		r.space = rangeSpace(int64(r.carryRoom)+n, carryBytes+readBytes, pooled)
		if _, err := io.ReadFull(rc, r.space[r.carryRoom:]); err != nil {
			r.err = err
			return
		}
		r.data = r.space[r.carryRoom:]
	}()
	return r
}

// rangeSpace returns n bytes (not zeroed when pooled), of capacity room
// when new and pooled.
func rangeSpace(n, room int64, pooled bool) []byte {
	if !pooled {
		return make([]byte, n)
	}
	if b, ok := rangeBuffers.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		return (*b)[:n]
	}
	return make([]byte, n, room)
}

// recycle gives the range's space to later reads; nothing may use the
// range's bytes after it.
func (r *rangeRead) recycle() {
	if r == nil || r.space == nil {
		return
	}
	<-r.done
	b := r.space
	r.space, r.data = nil, nil
	rangeBuffers.Put(&b)
}

// join returns carry followed by the range's bytes.
func (r *rangeRead) join(carry []byte) []byte {
	if len(carry) == 0 {
		return r.data
	}
	if len(carry) > r.carryRoom {
		return slices.Concat(carry, r.data)
	}
	buf := r.space[r.carryRoom-len(carry):]
	copy(buf, carry)
	return buf
}
