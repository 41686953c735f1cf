package tierpass

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/tieringpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/segfile"
)

// Objects writes and deletes a partition's segment objects (T2, T8). The
// uploader and compaction share it, so a compaction output is checked
// exactly as an upload is.
type Objects struct {
	cfg     partlog.Config
	tier    *partlog.Tier
	log     *slog.Logger
	metrics *partlog.Metrics
}

// NewObjects is the object writer of a log whose Config has a Tier.
func NewObjects(cfg partlog.Config) *Objects {
	return &Objects{cfg: cfg, tier: cfg.Tier, log: partlog.Logger(cfg), metrics: cfg.Metrics}
}

// Put writes a new segment object covering [base, last] under a new key
// (T2), filled by fill, verifies it (T8) and returns its entry for the
// list, or deletes it and fails. compacted allows holes
// (segfile.Options.Compacted); such an object whose batches end before
// last gets an empty batch at last (compact.EndBatch), so that it covers
// [base, last] like its inputs.
func (o *Objects) Put(ctx context.Context, base, last int64, compacted bool, sources []uint64,
	fill func(context.Context, *ObjectOutput) error) (*brokerpb.TieredSegment, error) {
	key := fmt.Sprintf("%s%020d-%020d-%016x.seg", o.tier.KeyPrefix, base, last, rand.Uint64())
	uctx, cancel := context.WithTimeout(ctx, o.tier.UploadTimeout)
	sum, err := o.write(uctx, key, base, last, compacted, sources, fill)
	cancel()
	if err != nil {
		o.Delete(ctx, []string{key})
		return nil, fmt.Errorf("partlog: uploading offsets %d-%d: %w", base, last, err)
	}
	if sum.BaseOffset != base || sum.LastOffset != last {
		o.Delete(ctx, []string{key})
		return nil, fmt.Errorf("partlog: object %s covers %d-%d, want %d-%d", key, sum.BaseOffset, sum.LastOffset, base, last)
	}
	// Read it back before anything depends on it (T8, T11).
	got, err := o.readBack(ctx, key, sum)
	if err != nil || got != sum {
		o.Delete(ctx, []string{key})
		return nil, fmt.Errorf("partlog: verifying %s: %w (read back %+v, wrote %+v)", key, err, got, sum)
	}
	failpoint.Hit("tier.after_upload")
	o.metrics.TierUploadedBytes.Add(float64(sum.Size))
	o.metrics.TierUploadedObjects.Inc()
	return &brokerpb.TieredSegment{
		ObjectKey: key, BaseOffset: sum.BaseOffset, LastOffset: sum.LastOffset, SizeBytes: sum.Size,
		IndexPos: sum.IndexPos, DataBytes: sum.DataBytes, Records: sum.Records,
		MinTimestampMs: sum.MinTimestampMs, MaxTimestampMs: sum.MaxTimestampMs, CommittedAtMs: o.cfg.Now().UnixMilli(),
		SourceLedgers: sources, Authenticated: sum.Authenticated,
	}, nil
}

// readBack reads a new object back as Tier.VerifyFull says: all of it, or
// its tail (with its MAC, when written with one), and returns the summary
// it states.
func (o *Objects) readBack(ctx context.Context, key string, wrote segfile.Summary) (segfile.Summary, error) {
	rr := ObjectRange{o.tier.Store, key, o.tier.RequestTimeout}
	auth := segfile.Auth{Key: o.tier.Key, Name: key, Required: wrote.Authenticated}
	if o.tier.VerifyFull {
		return segfile.Verify(ctx, rr, wrote.Size, auth)
	}
	tail, err := segfile.ReadTail(ctx, rr, wrote.IndexPos, wrote.Size, auth)
	if err != nil {
		return segfile.Summary{}, err
	}
	return tail.Summary(), nil
}

// ObjectOutput is the segment object being written: fill appends batches
// in offset order.
type ObjectOutput struct {
	sw    *segfile.Writer
	last  int64 // last offset of the last batch appended, -1: none
	maxTs int64
}

// Append appends batch (after the previous one).
func (o *ObjectOutput) Append(batch []byte) error {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		return fmt.Errorf("%w: %w", partlog.ErrCorruptBatch, err)
	}
	if err := o.sw.Append(batch); err != nil {
		return err
	}
	o.last, o.maxTs = h.LastOffset(), max(o.maxTs, h.MaxTimestamp)
	return nil
}

// RaiseMaxTimestamp makes the end batch of an object whose batches end
// before its last offset carry at least ts (compaction: an output whose
// records all went keeps its inputs' newest time).
func (o *ObjectOutput) RaiseMaxTimestamp(ts int64) { o.maxTs = max(o.maxTs, ts) }

// write streams a new object under key: fill's batches, checked by
// segfile (CRC; dense offsets from base unless compacted).
func (o *Objects) write(ctx context.Context, key string, base, last int64, compacted bool, sources []uint64,
	fill func(context.Context, *ObjectOutput) error) (segfile.Summary, error) {
	pr, pw := io.Pipe()
	type result struct {
		sum segfile.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := o.writeSegment(ctx, pw, key, base, last, compacted, sources, fill)
		pw.CloseWithError(err)
		done <- result{sum, err}
	}()
	meta := map[string]string{"strata-topic-id": o.tier.TopicID, "strata-partition": fmt.Sprint(o.cfg.Partition),
		"strata-base": fmt.Sprint(base), "strata-last": fmt.Sprint(last)}
	_, putErr := o.tier.Store.Put(ctx, key, pr, -1, meta)
	pr.CloseWithError(putErr) // a failed Put stops the writer
	res := <-done
	return res.sum, errors.Join(res.err, putErr)
}

// writeSegment writes the segment object named key to w: a segfile
// header, fill's batches, then (compacted, when they end before last) the
// end batch, the index and the tail, authenticated with the tier's key.
func (o *Objects) writeSegment(ctx context.Context, w io.Writer, key string, base, last int64, compacted bool, sources []uint64,
	fill func(context.Context, *ObjectOutput) error) (segfile.Summary, error) {
	sw, err := segfile.NewWriter(w, segfile.Options{BaseOffset: base, Compacted: compacted, Footer: &tieringpb.SegmentFooter{
		Topic: o.cfg.Topic, TopicId: o.tier.TopicID, Partition: o.cfg.Partition, OwnerEpoch: o.cfg.Epoch,
		SourceLedgers: sources, CreatedAtMs: o.cfg.Now().UnixMilli(),
	}, Key: o.tier.Key, Name: key})
	if err != nil {
		return segfile.Summary{}, err
	}
	out := &ObjectOutput{sw: sw, last: -1, maxTs: -1}
	if err := fill(ctx, out); err != nil {
		return segfile.Summary{}, err
	}
	if compacted && out.last < last {
		if err := out.Append(compact.EndBatch(last, out.maxTs)); err != nil {
			return segfile.Summary{}, err
		}
	}
	return sw.Finish()
}

// Delete deletes objects nothing references (any more); failures are left
// to the orphan sweep.
func (o *Objects) Delete(ctx context.Context, keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, o.tier.RequestTimeout)
	defer cancel()
	failed, err := o.tier.Store.Delete(ctx, keys)
	if err != nil || len(failed) > 0 {
		o.log.Warn("deleting objects failed; the orphan sweep retries", "objects", len(keys), "failed", len(failed), "err", err)
	}
}

// ObjectRange reads byte ranges of one object (segfile.RangeReader), each
// read bounded by Timeout (0: ctx only).
type ObjectRange struct {
	Store   objstore.Store
	Key     string
	Timeout time.Duration
}

// ReadAt reads [off, off+n) of the object.
func (o ObjectRange) ReadAt(ctx context.Context, off, n int64) ([]byte, error) {
	rc, done, err := o.Open(ctx, off, n)
	if err != nil {
		return nil, err
	}
	defer done()
	return readAllOf(rc, n)
}

// Open starts reading [off, off+n) within the timeout; done closes the
// reader and ends the timeout.
func (o ObjectRange) Open(ctx context.Context, off, n int64) (rc io.ReadCloser, done func(), err error) {
	cancel := context.CancelFunc(func() {})
	if o.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
	}
	if rc, err = o.Store.GetRange(ctx, o.Key, off, n); err != nil {
		cancel()
		return nil, nil, err
	}
	return rc, func() { rc.Close(); cancel() }, nil
}

// readAllOf reads r to its end into one buffer of the n bytes expected
// (io.ReadAll would grow and copy its way there from 512 bytes: a third
// of a compaction pass's CPU went to that). Fewer bytes come back short;
// more come back too, so that the caller sees the store broke O3.
func readAllOf(r io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, n)
	k, err := io.ReadFull(r, buf)
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return buf[:k], nil
	case err != nil:
		return nil, err
	}
	var extra [1]byte
	if m, _ := r.Read(extra[:]); m > 0 {
		return append(buf, extra[:m]...), nil
	}
	return buf, nil
}
