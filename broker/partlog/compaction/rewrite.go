package compaction

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
)

// outputs are what the rewrite stage wrote, listed nowhere yet.
type outputs struct {
	objects []*brokerpb.TieredSegment
	ledgers []*brokerpb.LedgerSegment
	stats   compact.Stats
}

// rewrite is the rewrite stage: objects into new objects, ledgers into
// new ledgers (compacted output is written where the data lives). On
// error, what it wrote is deleted.
func (p *pass) rewrite(ctx context.Context, pl passPlan, ix indexed, in inputs) (outputs, error) {
	rw := &passRewrite{buf: ix.buf, m: p.opts.Map, surv: ix.surv, lastOf: in.lastOf, last: in.end - 1,
		opt: compact.Options{NowMs: pl.nowMs, DeleteRetentionMs: pl.policy.DeleteRetentionMs, MaxDecompressedBytes: p.maxDecompressed}}
	var out outputs
	var err error
	out.objects, out.stats, err = p.rewriteObjects(ctx, rw, in.objects)
	if err != nil {
		return outputs{}, err
	}
	if len(in.ledgers) > 0 {
		var st compact.Stats
		out.ledgers, st, err = p.rewriteSegments(ctx, rw, ix.readers, in.ledgers)
		out.stats.Add(st)
		if err != nil {
			p.deleteObjectOutputs(ctx, out.objects)
			return outputs{}, err
		}
	}
	return out, nil
}

// groupObjects splits consecutive objects into the groups a pass writes
// one output object for: as many as hold at most segmentBytes of data
// together, at least one (Kafka's groupSegmentsBySize). Grouping by input
// size bounds each output; outputs smaller than segmentBytes are merged
// by later passes.
func groupObjects(objects []*brokerpb.TieredSegment, segmentBytes int64) [][]*brokerpb.TieredSegment {
	var groups [][]*brokerpb.TieredSegment
	var bytes int64
	for i, o := range objects {
		if i == 0 || bytes+o.DataBytes > segmentBytes {
			groups = append(groups, nil)
			bytes = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], o)
		bytes += o.DataBytes
	}
	return groups
}

// rewriteObjects rewrites inputs (consecutive committed objects) into new
// objects, one per group (groupObjects), each verified as an upload is
// (tierpass.Objects.Put, T8) and covering its group's offsets exactly:
// batches keep their offsets, and an output whose last batch is gone
// ends with an empty one (compact.EndBatch), so the list stays contiguous
// (T3). On error the outputs made so far are deleted.
func (p *pass) rewriteObjects(ctx context.Context, rw *passRewrite, inputs []*brokerpb.TieredSegment) (
	outputs []*brokerpb.TieredSegment, total compact.Stats, err error) {
	if len(inputs) == 0 {
		return nil, total, nil
	}
	defer func() {
		if err != nil {
			p.deleteObjectOutputs(ctx, outputs)
			outputs = nil
		}
	}()
	for _, group := range groupObjects(inputs, p.cfg.Tier.SegmentBytes) {
		var sources []uint64
		for _, o := range group {
			sources = append(sources, o.SourceLedgers...)
		}
		var st compact.Stats
		seg, err := p.objects.Put(ctx, group[0].BaseOffset, group[len(group)-1].LastOffset, true, sources,
			func(ctx context.Context, out *tierpass.ObjectOutput) error {
				return p.rewriteGroup(ctx, rw, group, out, &st)
			})
		total.Add(st) // Put returned: its writer is done with st
		if err != nil {
			return outputs, total, fmt.Errorf("partlog: compaction: %w", err)
		}
		outputs = append(outputs, seg)
	}
	return outputs, total, nil
}

// rewriteGroup appends the compacted batches of a group of objects to
// out, adding their stats to st.
func (p *pass) rewriteGroup(ctx context.Context, rw *passRewrite, group []*brokerpb.TieredSegment, out *tierpass.ObjectOutput,
	st *compact.Stats) error {
	for _, o := range group {
		// An output whose records all went still ends with an empty batch
		// stamped with its inputs' newest time, like a compacted ledger's:
		// its retention clock is its records', not the pass's.
		out.RaiseMaxTimestamp(o.MaxTimestampMs)
		pc := piece{object: o}
		err := rw.buf.read(ctx, p, nil, pc, func(id int64, payload []byte, kept bool) error {
			nb, bst, err := rw.batch(ctx, pc, id, payload, kept)
			st.Add(bst)
			if err != nil || nb == nil {
				return err
			}
			return out.Append(nb)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// deleteObjectOutputs deletes objects a pass wrote that no list names
// (also when ctx ended); what fails, the orphan sweep deletes.
func (p *pass) deleteObjectOutputs(ctx context.Context, outputs []*brokerpb.TieredSegment) {
	if len(outputs) == 0 {
		return
	}
	keys := make([]string, len(outputs))
	for i, o := range outputs {
		keys[i] = o.ObjectKey
	}
	dctx, cancel := cleanupContext(ctx)
	defer cancel()
	p.objects.Delete(dctx, keys)
}

// rewriteSegments rewrites inputs (consecutive closed segments) into new
// closed ledgers, one batch per entry, each with its index written. An
// output covers whole inputs: it is cut at an input boundary once it
// holds SegmentBytes. Each output keeps the offset range of its inputs
// (first of the first, last of the last), so the list stays contiguous
// over offsets whatever the batches inside. The range ends with a batch at
// its last offset (P7): its last batch, kept empty for a producer, or else
// compact.EndBatch, as a compacted object ends. That matters when the
// range's last records go and nothing is written after them (a pass that
// drops expired tombstones): a fetch in the hole must still find a batch
// below the high watermark. On error the outputs made so far are deleted.
func (p *pass) rewriteSegments(ctx context.Context, rw *passRewrite, readers *passReaders, inputs []*brokerpb.LedgerSegment) (
	outputs []*brokerpb.LedgerSegment, total compact.Stats, err error) {
	defer func() {
		if err != nil {
			// Also when ctx ended: nothing lists them.
			dctx, cancel := cleanupContext(ctx)
			p.l.DeleteUnlisted(dctx, outputs)
			cancel()
			outputs = nil
		}
	}()
	end := inputs[len(inputs)-1].LastOffset
	var out *ledgerOutput
	for i, s := range inputs {
		if out == nil {
			if out, err = p.newLedgerOutput(ctx, s); err != nil {
				return outputs, total, err
			}
		}
		last := i == len(inputs)-1
		if err := p.rewriteSegment(ctx, rw, readers, s, out, &total, last, end); err != nil {
			out.discard(p)
			return outputs, total, err
		}
		if out.entries.Bytes() >= p.segmentBytes || last {
			seg, err := out.finish(ctx, p, s.LastOffset)
			if err != nil {
				out.discard(p)
				return outputs, total, err
			}
			outputs = append(outputs, seg)
			out = nil
		}
	}
	return outputs, total, nil
}

// rewriteSegment appends the compacted batches of input s to out, adding
// their stats to total; last: s is the range's last input, which ends
// with a batch at end.
func (p *pass) rewriteSegment(ctx context.Context, rw *passRewrite, readers *passReaders, s *brokerpb.LedgerSegment,
	out *ledgerOutput, total *compact.Stats, last bool, end int64) error {
	out.maxTs = max(out.maxTs, s.MaxTimestampMs)
	out.createdAtMs = max(out.createdAtMs, s.CreatedAtMs)
	pc := piece{ledger: s}
	err := rw.buf.read(ctx, p, readers, pc, func(id int64, payload []byte, kept bool) error {
		nb, st, err := rw.batch(ctx, pc, id, payload, kept)
		total.Add(st)
		if err != nil || nb == nil {
			return err
		}
		return out.append(ctx, nb)
	})
	if err != nil {
		return err
	}
	if last && (out.entries.Len() == 0 || out.entries.LastOffset() < end) {
		return out.append(ctx, compact.EndBatch(end, out.maxTs))
	}
	return nil
}

// ledgerOutput is one output ledger being written.
type ledgerOutput struct {
	w           *ledger.Writer
	first       int64
	createdAtMs int64
	maxTs       int64
	entries     partlog.SegmentEntries
	mu          sync.Mutex
	err         error // first append failure
}

// newLedgerOutput creates the output ledger whose first input is s.
func (p *pass) newLedgerOutput(ctx context.Context, s *brokerpb.LedgerSegment) (*ledgerOutput, error) {
	w, err := ledger.Create(ctx, p.cfg.Env, p.ledgerOptions)
	if err != nil {
		return nil, fmt.Errorf("partlog: compaction: creating a ledger: %w", err)
	}
	return &ledgerOutput{w: w, first: s.FirstOffset, createdAtMs: s.CreatedAtMs, maxTs: -1}, nil
}

func (o *ledgerOutput) append(ctx context.Context, batch []byte) error {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		return err
	}
	o.entries.Add(h, len(batch))
	// Appends are pipelined; Close waits for them all.
	return o.w.Append(ctx, batch, func(_ int64, err error) {
		if err != nil {
			o.mu.Lock()
			o.err = errors.Join(o.err, err)
			o.mu.Unlock()
		}
	})
}

// finish closes the ledger, checks that every entry made it, writes the
// index and returns the segment covering [first, last].
func (o *ledgerOutput) finish(ctx context.Context, p *pass, last int64) (*brokerpb.LedgerSegment, error) {
	if err := o.w.Close(ctx); err != nil {
		return nil, fmt.Errorf("partlog: compaction: closing ledger %d: %w", o.w.ID(), err)
	}
	o.mu.Lock()
	err := o.err
	o.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("partlog: compaction: writing ledger %d: %w", o.w.ID(), err)
	}
	if got := o.w.LastAddConfirmed(); got != int64(o.entries.Len())-1 {
		return nil, fmt.Errorf("partlog: compaction: ledger %d closed at entry %d, wrote %d entries", o.w.ID(), got, o.entries.Len())
	}
	seg, err := o.entries.Seal(ctx, p.cfg.Store, o.w.ID(), o.first, o.createdAtMs, p.cfg.IndexIntervalBytes)
	if err != nil {
		return nil, err
	}
	seg.LastOffset = last
	seg.MaxTimestampMs = max(seg.MaxTimestampMs, o.maxTs)
	return seg, nil
}

// discard closes and deletes an output no list names.
func (o *ledgerOutput) discard(p *pass) {
	if o == nil {
		return
	}
	partlog.DiscardLedger(p.cfg, o.w)
	if err := p.cfg.Store.Delete(context.Background(), partlog.IndexKey(o.w.ID())); err != nil {
		p.log.Warn("compaction: deleting an unlisted index", "ledger", o.w.ID(), "err", err)
	}
}
