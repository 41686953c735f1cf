package compaction

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
)

// indexed is what the read stage learnt.
type indexed struct {
	// end: the indexed end (the map holds every key below it, from
	// cleaned on).
	end int64
	// lastOfPiece[i]: producer id -> last offset of its last batch in
	// cleanable[i] (bounded by producers, not batches), for the pieces
	// read.
	lastOfPiece []map[int64]int64
	surv        *compact.Survivors
	buf         *passBuffer
	readers     *passReaders
}

// index is the read stage: it reads the cleanable pieces up to the
// indexed end, indexes the dirty range into the map (reset first), notes
// the producers' last batches (C5 and the end rule of P7) and keeps what
// fits of the batches read in the pass buffer.
func (p *pass) index(ctx context.Context, pl passPlan) (indexed, error) {
	m := p.opts.Map
	m.Reset()
	ix := indexed{
		end:     pl.decision.CleanableEnd,
		surv:    compact.NewSurvivors(pl.cleaned),
		buf:     newPassBuffer(p.opts.BufferBytes, p.opts.MaxBytesPerSec),
		readers: newPassReaders(pl.cleanable),
	}
	ix.lastOfPiece = make([]map[int64]int64, 0, len(pl.cleanable))
	for _, pc := range pl.cleanable {
		if pc.first() >= ix.end {
			break
		}
		if err := p.indexPiece(ctx, &ix, pl.cleaned, pc); err != nil {
			return ix, err
		}
	}
	ix.surv.AddLatest(m, ix.end)
	return ix, nil
}

// indexPiece reads one piece for the read stage.
func (p *pass) indexPiece(ctx context.Context, ix *indexed, cleaned int64, pc piece) error {
	lasts := map[int64]int64{}
	ix.lastOfPiece = append(ix.lastOfPiece, lasts)
	var kept [][]byte
	keep := ix.buf.fits(pc)
	err := p.readPiece(ctx, ix.readers, ix.buf.pace, pc, keep, func(id int64, payload []byte) error {
		if keep {
			kept = append(kept, payload)
		}
		h, err := recordbatch.ParseHeader(payload)
		if err != nil {
			return fmt.Errorf("%w: %v entry %d: %w", partlog.ErrCorruptBatch, pc, id, err)
		}
		if h.ProducerID >= 0 {
			lasts[h.ProducerID] = h.LastOffset()
		}
		if h.LastOffset() < cleaned || h.BaseOffset >= ix.end {
			return nil
		}
		// segfile checked the CRC of an object's batches.
		popt := compact.Options{MaxDecompressedBytes: p.maxDecompressed, CRCChecked: pc.object != nil, Survivors: ix.surv}
		pr, err := compact.Plan(p.opts.Map, [][]byte{payload}, ix.end, popt)
		if err != nil {
			return fmt.Errorf("partlog: compaction: %v entry %d: %w", pc, id, err)
		}
		ix.end = pr.IndexedEnd
		return nil
	})
	if err != nil {
		return err
	}
	if keep {
		ix.buf.batches[pc.String()] = kept
	}
	return nil
}

// readPiece calls fn with every batch of a closed piece, in order: a
// ledger's entries (readSegment) or an object's batches (readObject).
//
// keeps: fn keeps the batches it is given (else their memory is reused
// once it returns). A failure to read a piece that is no longer listed
// (retention or tiering unlinked it while the pass read it) is ErrStale.
// pace holds the reads to the pass's rate.
func (p *pass) readPiece(ctx context.Context, readers *passReaders, pace *ctxtime.Pacer, pc piece, keeps bool,
	each func(id int64, payload []byte) error) error {
	fn := func(id int64, payload []byte) error {
		if err := pace.Wait(ctx, len(payload)); err != nil {
			return err
		}
		return each(id, payload)
	}
	var err error
	if pc.object != nil {
		err = p.readObject(ctx, pc.object, keeps, fn)
	} else {
		err = p.readSegment(ctx, readers, pc.ledger, fn)
	}
	if err != nil && !listed(p.l.Snapshot().List, pc) {
		return fmt.Errorf("%w: %v was unlisted while the pass read it: %w", ErrStale, pc, err)
	}
	return err
}

// listed reports whether pl names pc.
func listed(pl *brokerpb.PartitionLog, pc piece) bool {
	if pc.object != nil {
		return slices.ContainsFunc(pl.GetTiered(), func(t *brokerpb.TieredSegment) bool { return t.ObjectKey == pc.object.ObjectKey })
	}
	return slices.ContainsFunc(pl.GetSegments(), func(s *brokerpb.LedgerSegment) bool { return s.LedgerId == pc.ledger.LedgerId })
}

// readSegment calls fn with every entry of a closed segment, in order,
// through the pass's own readers (a pass must not evict what fetches read
// ahead).
func (p *pass) readSegment(ctx context.Context, readers *passReaders, s *brokerpb.LedgerSegment,
	fn func(id int64, payload []byte) error) error {
	if s.LastEntryId < 0 {
		return nil
	}
	r, err := readers.open(ctx, p.cfg.Env, s.LedgerId)
	if err != nil {
		return fmt.Errorf("partlog: compaction: opening ledger %d: %w", s.LedgerId, err)
	}
	r.AdvanceLAC(s.LastEntryId)
	err = r.ReadRange(ctx, 0, s.LastEntryId, func(e ledger.Entry) error { return fn(e.ID, e.Payload) })
	if err != nil {
		return fmt.Errorf("partlog: compaction: reading ledger %d: %w", s.LedgerId, err)
	}
	return nil
}

// readersAhead is how many ledgers' readers a pass opens at once.
const readersAhead = 16

// passReaders are a pass's ledger readers: both of its reads of a ledger
// share one. Opening a reader reads the ledger's metadata from metad, a
// linearizable read that costs a Raft barrier; one at a time, a pass
// paid one per ledger. A miss opens the ledger's reader together with
// those of the next readersAhead-1 ledgers the pass may read, whose
// concurrent reads share a barrier.
type passReaders struct {
	byID map[uint64]*ledger.Reader
	next []uint64 // ledgers the pass may read, in order, not opened yet
}

func newPassReaders(pieces []piece) *passReaders {
	rs := &passReaders{byID: map[uint64]*ledger.Reader{}}
	for _, p := range pieces {
		if p.ledger != nil && p.ledger.LastEntryId >= 0 {
			rs.next = append(rs.next, p.ledger.LedgerId)
		}
	}
	return rs
}

// open returns ledger id's reader, opening it (and the next ones) on a
// miss. The next ones' failures are dropped: a pass that reaches one
// opens it again, alone, and fails then.
func (rs *passReaders) open(ctx context.Context, env ledger.Env, id uint64) (*ledger.Reader, error) {
	if r := rs.byID[id]; r != nil {
		return r, nil
	}
	ids := []uint64{id}
	if i := slices.Index(rs.next, id); i >= 0 {
		n := min(i+readersAhead, len(rs.next))
		ids = append(ids, rs.next[i+1:n]...)
		rs.next = slices.Delete(rs.next, i, n)
	}
	readers, errs := make([]*ledger.Reader, len(ids)), make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { readers[i], errs[i] = ledger.OpenReader(ctx, env, id) })
	}
	wg.Wait()
	for i, id := range ids {
		if errs[i] == nil {
			rs.byID[id] = readers[i]
		}
	}
	return readers[0], errs[0]
}
