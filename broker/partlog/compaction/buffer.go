package compaction

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
)

// passBuffer holds the batches of the pieces a pass's read stage read,
// up to a byte budget, so that its rewrite stage does not read them
// again (from the bookies or the object store: the second read cost as
// much as the first). A piece is kept whole or not at all.
type passBuffer struct {
	room    int64
	batches map[string][][]byte // by piece.String()
	pace    *ctxtime.Pacer      // the pass's reads, the buffer's included
	rate    float64             // pace's bytes per second; 0: unbounded
	// rewrite paces the batches held here that the rewrite decodes (at
	// rewritePaceFactor x rate), from the first one (paceRewrite).
	rewrite *ctxtime.Pacer
}

// rewritePaceFactor: the rewrite stage decodes the batches the buffer
// holds at this many times the pass's read rate. Unpaced, it rewrote 120
// MB in 75-112 ms, a whole core, and the produce p99 of the same broker
// peaked in those 100 ms of every pass ("compact-half-max" in `strata
// bench suite`). Paced, it takes about a sixth of a core for six times as
// long, and a pass that decodes everything still averages 6/7 of the
// rate over its two phases (55-56 MB/s measured at the default 64 MiB/s).
// The batches it drops from their header
// alone (compact.Survivors) cost nothing and are not paced: in that
// workload's sources, all but the last two of every pass's ~128.
const rewritePaceFactor = 6

func newPassBuffer(bytes int64, rate float64) *passBuffer {
	return &passBuffer{room: bytes, batches: map[string][][]byte{}, pace: ctxtime.NewPacer(rate, time.Now), rate: rate}
}

// fits reports whether p's batches fit in what is left, taking the room.
func (b *passBuffer) fits(p piece) bool {
	if b == nil || p.bytes() > b.room {
		return false
	}
	b.room -= p.bytes()
	return true
}

// read calls fn with every batch of p, in order: from the buffer (kept;
// it forgets them), or read again (readPiece).
func (b *passBuffer) read(ctx context.Context, p *pass, readers *passReaders, pc piece,
	fn func(id int64, payload []byte, kept bool) error) error {
	kept, ok := b.batches[pc.String()]
	if !ok {
		return p.readPiece(ctx, readers, b.pace, pc, false, func(id int64, payload []byte) error { return fn(id, payload, false) })
	}
	delete(b.batches, pc.String())
	for id, batch := range kept {
		if err := fn(int64(id), batch, true); err != nil {
			return err
		}
	}
	return nil
}

// paceRewrite waits until n more bytes of kept batches may be rewritten
// (at rewritePaceFactor times the read rate, from the first).
func (b *passBuffer) paceRewrite(ctx context.Context, n int) error {
	if b.rewrite == nil {
		b.rewrite = ctxtime.NewPacer(b.rate*rewritePaceFactor, time.Now)
	}
	return b.rewrite.Wait(ctx, n)
}

// passRewrite is what a pass's rewrite stage applies to each batch of
// its range, objects' and ledgers' alike.
type passRewrite struct {
	buf    *passBuffer
	m      *compact.OffsetMap
	surv   *compact.Survivors // filled by the read stage
	lastOf map[int64]int64    // producer id -> last offset of its last batch in the range
	last   int64              // the range's last offset: its batch stays (P7)
	opt    compact.Options
}

// batch returns the compacted form of batch id of p (compact.Rewrite):
// nil when it goes. kept: it comes from the pass buffer, the very bytes
// the read stage CRC-checked and indexed, so Rewrite need not check the
// CRC again and may drop it from its header alone (compact.Survivors);
// one it decodes is paced (paceRewrite). An object's batches were
// CRC-checked by readObject's segfile iterator, kept or read again.
func (r *passRewrite) batch(ctx context.Context, p piece, id int64, batch []byte, kept bool) ([]byte, compact.Stats, error) {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		return nil, compact.Stats{}, fmt.Errorf("%w: %v batch %d: %w", partlog.ErrCorruptBatch, p, id, err)
	}
	opt := r.opt
	lastBatch, ok := r.lastOf[h.ProducerID]
	opt.KeepEmpty = (h.ProducerID >= 0 && ok && lastBatch == h.LastOffset()) || h.LastOffset() == r.last
	opt.CRCChecked = kept || p.object != nil
	if kept {
		opt.Survivors = r.surv
	}
	nb, st, err := compact.Rewrite(batch, r.m, opt)
	if err != nil {
		return nil, st, fmt.Errorf("partlog: compaction: %v batch %d (offset %d): %w", p, id, h.BaseOffset, err)
	}
	if kept && st.BatchesDroppedUnread == 0 {
		if err := r.buf.paceRewrite(ctx, len(batch)); err != nil {
			return nil, st, err
		}
	}
	return nb, st, nil
}
