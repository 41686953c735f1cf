package partlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/tieringpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/segfile"
)

// Tier is a partition log's object-store tier (tiering/, DESIGN §7): the
// owner copies runs of closed ledgers into segment objects, commits them
// in the PartitionLog, reads offsets below its first ledger from them, and
// deletes ledgers an object covers once local retention allows.
type Tier struct {
	Store objstore.Store
	// Reader reads committed segment objects (tiering.Reader).
	Reader TierReader
	// KeyPrefix starts every object key of this partition:
	// "strata/<cluster id>/t/<topic id>/<partition>/". The orphan sweep
	// only ever lists and deletes under it.
	KeyPrefix string
	// TopicID goes into the objects' footers.
	TopicID string
	// SegmentBytes: upload a run of closed ledgers once it holds this
	// much; MaxDelay: or once its oldest ledger is this old.
	SegmentBytes int64
	MaxDelay     time.Duration
	// OrphanGrace: objects under KeyPrefix that the PartitionLog does not
	// name are deleted once older than this (uploads that never
	// committed, deletions that failed).
	OrphanGrace time.Duration
	// DeleteDelay: an object the list stopped naming (retention, a
	// compaction swap) is deleted this long after, so that reads that
	// chose it before still find it (Kafka's file.delete.delay.ms); a read
	// that still misses it reads again from the new list. Zero: at once.
	DeleteDelay time.Duration
	// Uploads bounds concurrent uploads broker-wide (a semaphore shared
	// by every Log; nil: unbounded).
	Uploads chan struct{}
	// RequestTimeout bounds every store call but an upload (list, delete,
	// each read of the verification); UploadTimeout bounds one upload with
	// its copy from the bookies. A store that hangs never holds a
	// partition's tiering forever.
	RequestTimeout time.Duration
	UploadTimeout  time.Duration
	// VerifyFull reads every byte of a new object back before committing
	// it; otherwise only its tail (index, footer, trailer with the data
	// CRC the writer computed) is read back and compared. The batches
	// were checked (CRC-32C, offsets) on their way from the bookies, and
	// every uploaded part carries a CRC-32C the store checks (minio-go
	// adds it), so the tail proves the object is whole; full verification
	// costs one more pass over the data (scrub does it later, off the
	// upload path).
	VerifyFull bool
	// CanDestroy, when set, is asked before anything is deleted because of
	// the store's state (local copies of tiered ledgers, orphan objects);
	// false skips it this time (the bucket's identity could not be
	// confirmed: T9).
	CanDestroy func(context.Context) error
}

// TierReader reads committed segment objects.
type TierReader interface {
	// Fetch returns whole batches of seg from the one holding offset (or
	// the first after it) on, at least one, then more within maxBytes.
	Fetch(ctx context.Context, seg *brokerpb.TieredSegment, offset int64, maxBytes int) ([]byte, error)
	// OffsetForTime is the first record of seg whose timestamp is >= ts;
	// a batch may decompress to at most maxDecompressed bytes.
	OffsetForTime(ctx context.Context, seg *brokerpb.TieredSegment, ts int64, maxDecompressed int) (offset, timestampMs int64, found bool, err error)
}

// Defaults of Tier.
const (
	DefaultTierSegmentBytes = 256 << 20
	DefaultTierMaxDelay     = 10 * time.Minute
	DefaultTierOrphanGrace  = time.Hour
	DefaultTierRequest      = 30 * time.Second
	DefaultTierUpload       = 10 * time.Minute
)

func (t *Tier) withDefaults() *Tier {
	c := *t
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = DefaultTierSegmentBytes
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = DefaultTierMaxDelay
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = DefaultTierOrphanGrace
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultTierRequest
	}
	if c.UploadTimeout <= 0 {
		c.UploadTimeout = DefaultTierUpload
	}
	return &c
}

// tieredEnd is the first offset the tiered segments do not cover, -1 when
// there are none.
func tieredEnd(pl *brokerpb.PartitionLog) int64 {
	if n := len(pl.GetTiered()); n > 0 {
		return pl.Tiered[n-1].LastOffset + 1
	}
	return -1
}

// uploadRun decides which closed ledgers to copy next (T3, T4): the run
// of closed segments that starts where the tiered segments end (at the
// first segment when nothing is tiered yet), cut once it holds
// segmentBytes, or all of it once its oldest segment is maxDelay old. It
// returns nil when nothing is due. A pure function of its inputs.
func uploadRun(pl *brokerpb.PartitionLog, nowMs int64, segmentBytes int64, maxDelay time.Duration) []*brokerpb.LedgerSegment {
	end := tieredEnd(pl)
	var run []*brokerpb.LedgerSegment
	var bytes int64
	for _, s := range pl.GetSegments() {
		if end >= 0 && s.LastOffset < end {
			continue // covered already (a local copy local retention keeps)
		}
		if !s.Closed {
			break
		}
		if len(run) == 0 && end >= 0 && s.FirstOffset != end {
			return nil // not contiguous: never leave a hole (T4)
		}
		run = append(run, s)
		bytes += s.Bytes
		if bytes >= segmentBytes {
			return run
		}
	}
	if len(run) == 0 || bytes == 0 || run[0].CreatedAtMs > nowMs-maxDelay.Milliseconds() {
		return nil
	}
	return run
}

// localDeletable is how many leading segments local retention may delete
// from the bookies: closed ones that a committed object covers (T8: it was
// verified before the commit) and whose newest record is older than
// localRetentionMs (-1: keep them until retention). A pure function.
func localDeletable(pl *brokerpb.PartitionLog, nowMs, localRetentionMs int64) int {
	end := tieredEnd(pl)
	if end < 0 || localRetentionMs < 0 {
		return 0
	}
	n := 0
	for _, s := range pl.GetSegments() {
		newest := s.MaxTimestampMs
		if s.LastOffset < s.FirstOffset || newest < 0 {
			newest = s.CreatedAtMs
		}
		if !s.Closed || s.LastOffset >= end || newest >= nowMs-localRetentionMs {
			break
		}
		n++
	}
	return n
}

// TierLag is the upload lag: the bytes of closed ledgers no object covers
// and the age of the oldest of them (from its newest record, or its
// creation when it has none). Zero without tiering.
func (l *Log) TierLag() (bytes int64, age time.Duration) {
	if l.cfg.Tier == nil {
		return 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mu.policy.RemoteStorage {
		return 0, 0
	}
	end := tieredEnd(l.mu.pl)
	now := l.cfg.Now().UnixMilli()
	for _, s := range l.mu.pl.GetSegments() {
		if !s.Closed || s.LastOffset < end || s.LastOffset < s.FirstOffset {
			continue
		}
		bytes += s.Bytes
		newest := s.MaxTimestampMs
		if newest < 0 {
			newest = s.CreatedAtMs
		}
		age = max(age, time.Duration(now-newest)*time.Millisecond)
	}
	return bytes, age
}

// TierOnce uploads what is due, deletes local copies local retention no
// longer keeps and, with sweep, deletes orphan objects.
func (l *Log) TierOnce(ctx context.Context, sweep bool) error {
	if l.cfg.Tier == nil {
		return nil
	}
	var errs []error
	for {
		uploaded, err := l.uploadOnce(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		if !uploaded || err != nil {
			break
		}
	}
	if err := l.deleteLocalCopies(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := l.collectGarbage(ctx); err != nil {
		errs = append(errs, err)
	}
	if sweep {
		if err := l.sweepOrphanObjects(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// uploadOnce copies the next due run of ledgers into one object, verifies
// it and commits it (T2, T7, T8). A crash or failure at any step leaves
// either nothing visible or an unreferenced object, which the orphan sweep
// deletes; produce goes on meanwhile.
func (l *Log) uploadOnce(ctx context.Context) (bool, error) {
	tier := l.cfg.Tier
	l.mu.Lock()
	pl, remote := l.mu.pl, l.mu.policy.RemoteStorage
	l.mu.Unlock()
	if !remote {
		return false, nil
	}
	run := uploadRun(pl, l.cfg.Now().UnixMilli(), tier.SegmentBytes, tier.MaxDelay)
	if len(run) == 0 {
		return false, nil
	}
	if tier.Uploads != nil {
		select {
		case tier.Uploads <- struct{}{}:
			defer func() { <-tier.Uploads }()
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	start := time.Now()
	base, last := run[0].FirstOffset, run[len(run)-1].LastOffset
	// Ledgers below cleaned_offset were rewritten by compaction (P7):
	// their offsets have holes and the run may end in one. The ones at or
	// after it are as written, dense, and keep segfile's dense check (T8).
	compacted := base < pl.GetCleanedOffset()
	seg, err := l.putObject(ctx, base, last, compacted, ledgerIDs(run), func(ctx context.Context, out *objectOutput) error {
		return l.copyLedgers(ctx, out, run)
	})
	if err != nil {
		return false, err
	}
	if sent, err := l.commitTiered(ctx, seg, run); err != nil {
		// The object is unnamed unless the CAS was sent and its outcome
		// is unknown: then it may be listed (and the bookie copies deleted
		// on the strength of it), so only the orphan sweep, which checks
		// the list, may delete it.
		if !sent || errors.Is(err, ErrConflict) {
			l.deleteObjects(ctx, []string{seg.ObjectKey})
		}
		return false, err
	}
	failpoint.Hit("tier.after_commit")
	l.log.Info("tiered", "object", seg.ObjectKey, "base_offset", seg.BaseOffset, "last_offset", seg.LastOffset,
		"bytes", seg.SizeBytes, "ledgers", len(run), "took", time.Since(start).Round(time.Millisecond))
	return true, nil
}

// readBack reads a new object back as Tier.VerifyFull says: all of it, or
// its tail, and returns the summary it states.
func (l *Log) readBack(ctx context.Context, key string, wrote segfile.Summary) (segfile.Summary, error) {
	rr := objectRange{l.cfg.Tier.Store, key, l.cfg.Tier.RequestTimeout}
	if l.cfg.Tier.VerifyFull {
		return segfile.Verify(ctx, rr, wrote.Size)
	}
	tail, err := segfile.ReadTail(ctx, rr, wrote.IndexPos, wrote.Size)
	if err != nil {
		return segfile.Summary{}, err
	}
	return tail.Summary(), nil
}

// putObject writes a new segment object covering [base, last] under a
// new key (T2), filled by fill, verifies it (T8) and returns its entry for
// the list, or deletes it and fails. The uploader and compaction share
// it, so a compaction output is checked exactly as an upload is.
// compacted allows holes (segfile.Options.Compacted); such an object
// whose batches end before last gets an empty batch at last
// (compact.EndBatch), so that it covers [base, last] like its inputs.
func (l *Log) putObject(ctx context.Context, base, last int64, compacted bool, sources []uint64,
	fill func(context.Context, *objectOutput) error) (*brokerpb.TieredSegment, error) {
	tier := l.cfg.Tier
	key := fmt.Sprintf("%s%020d-%020d-%016x.seg", tier.KeyPrefix, base, last, rand.Uint64())
	uctx, cancel := context.WithTimeout(ctx, tier.UploadTimeout)
	sum, err := l.writeObject(uctx, key, base, last, compacted, sources, fill)
	cancel()
	if err != nil {
		l.deleteObjects(ctx, []string{key})
		return nil, fmt.Errorf("partlog: uploading offsets %d-%d: %w", base, last, err)
	}
	if sum.BaseOffset != base || sum.LastOffset != last {
		l.deleteObjects(ctx, []string{key})
		return nil, fmt.Errorf("partlog: object %s covers %d-%d, want %d-%d", key, sum.BaseOffset, sum.LastOffset, base, last)
	}
	// Read it back before anything depends on it (T8).
	got, err := l.readBack(ctx, key, sum)
	if err != nil || got != sum {
		l.deleteObjects(ctx, []string{key})
		return nil, fmt.Errorf("partlog: verifying %s: %w (read back %+v, wrote %+v)", key, err, got, sum)
	}
	failpoint.Hit("tier.after_upload")
	l.metrics.TierUploadedBytes.Add(float64(sum.Size))
	l.metrics.TierUploadedObjects.Inc()
	return &brokerpb.TieredSegment{
		ObjectKey: key, BaseOffset: sum.BaseOffset, LastOffset: sum.LastOffset, SizeBytes: sum.Size,
		IndexPos: sum.IndexPos, DataBytes: sum.DataBytes, Records: sum.Records,
		MinTimestampMs: sum.MinTimestampMs, MaxTimestampMs: sum.MaxTimestampMs, CommittedAtMs: l.cfg.Now().UnixMilli(),
		SourceLedgers: sources,
	}, nil
}

// objectOutput is the segment object being written: fill appends batches
// in offset order.
type objectOutput struct {
	sw    *segfile.Writer
	last  int64 // last offset of the last batch appended, -1: none
	maxTs int64
}

func (o *objectOutput) append(batch []byte) error {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptBatch, err)
	}
	if err := o.sw.Append(batch); err != nil {
		return err
	}
	o.last, o.maxTs = h.LastOffset(), max(o.maxTs, h.MaxTimestamp)
	return nil
}

// writeObject streams a new object under key: fill's batches, checked by
// segfile (CRC; dense offsets from base unless compacted).
func (l *Log) writeObject(ctx context.Context, key string, base, last int64, compacted bool, sources []uint64,
	fill func(context.Context, *objectOutput) error) (segfile.Summary, error) {
	pr, pw := io.Pipe()
	type result struct {
		sum segfile.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := l.writeSegment(ctx, pw, base, last, compacted, sources, fill)
		pw.CloseWithError(err)
		done <- result{sum, err}
	}()
	meta := map[string]string{"strata-topic-id": l.cfg.Tier.TopicID, "strata-partition": fmt.Sprint(l.cfg.Partition),
		"strata-base": fmt.Sprint(base), "strata-last": fmt.Sprint(last)}
	_, putErr := l.cfg.Tier.Store.Put(ctx, key, pr, -1, meta)
	pr.CloseWithError(putErr) // a failed Put stops the writer
	res := <-done
	return res.sum, errors.Join(res.err, putErr)
}

// writeSegment writes a segment object to w: a segfile header, fill's
// batches, then (compacted, when they end before last) the end batch,
// the index and the tail.
func (l *Log) writeSegment(ctx context.Context, w io.Writer, base, last int64, compacted bool, sources []uint64,
	fill func(context.Context, *objectOutput) error) (segfile.Summary, error) {
	sw, err := segfile.NewWriter(w, segfile.Options{BaseOffset: base, Compacted: compacted, Footer: &tieringpb.SegmentFooter{
		Topic: l.cfg.Topic, TopicId: l.cfg.Tier.TopicID, Partition: l.cfg.Partition, OwnerEpoch: l.cfg.Epoch,
		SourceLedgers: sources, CreatedAtMs: l.cfg.Now().UnixMilli(),
	}})
	if err != nil {
		return segfile.Summary{}, err
	}
	out := &objectOutput{sw: sw, last: -1, maxTs: -1}
	if err := fill(ctx, out); err != nil {
		return segfile.Summary{}, err
	}
	if compacted && out.last < last {
		if err := out.append(compact.EndBatch(last, out.maxTs)); err != nil {
			return segfile.Summary{}, err
		}
	}
	return sw.Finish()
}

// copyLedgers appends every entry of run's ledgers, in order, read from
// the bookies.
func (l *Log) copyLedgers(ctx context.Context, out *objectOutput, run []*brokerpb.LedgerSegment) error {
	for _, s := range run {
		if s.LastEntryId < 0 {
			continue
		}
		r, err := ledger.OpenReader(ctx, l.cfg.Env, s.LedgerId)
		if err != nil {
			return fmt.Errorf("opening ledger %d: %w", s.LedgerId, err)
		}
		r.AdvanceLAC(s.LastEntryId) // closed: every entry is acknowledged
		err = r.ReadRange(ctx, 0, s.LastEntryId, func(e ledger.Entry) error {
			l.metrics.BookieReadBytes.Add(float64(len(e.Payload)))
			return out.append(e.Payload)
		})
		if err != nil {
			return fmt.Errorf("copying ledger %d: %w", s.LedgerId, err)
		}
	}
	return nil
}

func ledgerIDs(segs []*brokerpb.LedgerSegment) []uint64 {
	out := make([]uint64, len(segs))
	for i, s := range segs {
		out[i] = s.LedgerId
	}
	return out
}

// commitTiered adds seg, the copy of run, to the PartitionLog in one CAS
// (T4, T7), unless the log changed so that it no longer follows
// (retention moved the log start past it) or run is no longer what the
// list holds there (compaction swapped those ledgers for rewritten ones
// meanwhile: the object would bring back what the pass removed, below
// cleaned_offset where no later pass looks for it). Then nothing is
// committed and the caller deletes it.
func (l *Log) commitTiered(ctx context.Context, seg *brokerpb.TieredSegment, run []*brokerpb.LedgerSegment) (sent bool, err error) {
	err = l.casUnderSem(ctx, func(pl *brokerpb.PartitionLog) error {
		if end := tieredEnd(pl); (end >= 0 && end != seg.BaseOffset) || pl.LogStartOffset > seg.BaseOffset {
			return fmt.Errorf("partlog: segment %d-%d no longer follows (tiered end %d, log start %d)",
				seg.BaseOffset, seg.LastOffset, end, pl.LogStartOffset)
		}
		i := slices.IndexFunc(pl.Segments, func(s *brokerpb.LedgerSegment) bool { return s.LedgerId == run[0].LedgerId })
		for j, s := range run {
			if i < 0 || i+j >= len(pl.Segments) || pl.Segments[i+j].LedgerId != s.LedgerId {
				return fmt.Errorf("partlog: segment %d-%d: ledger %d is no longer listed (compacted meanwhile)",
					seg.BaseOffset, seg.LastOffset, s.LedgerId)
			}
		}
		pl.Tiered = append(pl.Tiered, seg)
		sent = true
		return nil
	})
	return sent, err
}

// errNothing: a casUnderSem change function that has nothing to change.
var errNothing = errors.New("partlog: nothing to change")

// casUnderSem applies change to a copy of the PartitionLog and CASes it,
// holding appendSem like every writer of the list. change returning
// errNothing writes nothing; any other error is returned as is. A failed
// CAS fails the log (P3).
func (l *Log) casUnderSem(ctx context.Context, change func(pl *brokerpb.PartitionLog) error) error {
	select {
	case l.appendSem <- struct{}{}:
	case <-l.stop:
		return ErrClosed
	case <-l.failed:
		return l.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
	defer l.release()
	l.mu.Lock()
	if err := l.acceptErrLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	pl := proto.Clone(l.mu.pl).(*brokerpb.PartitionLog)
	version := l.mu.version
	l.mu.Unlock()
	if err := change(pl); err != nil {
		if errors.Is(err, errNothing) {
			return nil
		}
		return err
	}
	v, err := casPartitionLog(ctx, l.cfg.Store, l.cfg.Topic, l.cfg.Partition, pl, version)
	if err != nil {
		if !errors.Is(err, ErrConflict) {
			err = fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		l.fail(err)
		return err
	}
	l.mu.Lock()
	l.mu.pl, l.mu.version = pl, v
	l.mu.Unlock()
	return nil
}

// deleteLocalCopies deletes the ledgers a committed object covers once
// local retention allows: one CAS drops them from the list (the log start
// does not move: the object serves those offsets), then the ledgers go.
func (l *Log) deleteLocalCopies(ctx context.Context) error {
	if tier := l.cfg.Tier; tier.CanDestroy != nil {
		l.mu.Lock()
		due := localDeletable(l.mu.pl, l.cfg.Now().UnixMilli(), l.mu.policy.LocalRetentionMs) > 0
		l.mu.Unlock()
		if !due {
			return nil
		}
		if err := tier.CanDestroy(ctx); err != nil {
			return fmt.Errorf("partlog: keeping local copies: %w", err)
		}
	}
	var gone []*brokerpb.LedgerSegment
	err := l.casUnderSem(ctx, func(pl *brokerpb.PartitionLog) error {
		l.mu.Lock()
		localMs := l.mu.policy.LocalRetentionMs
		l.mu.Unlock()
		n := localDeletable(pl, l.cfg.Now().UnixMilli(), localMs)
		if n == 0 {
			return errNothing
		}
		gone = slices.Clone(pl.Segments[:n])
		pl.Segments = pl.Segments[n:]
		return nil
	})
	if err != nil || len(gone) == 0 {
		return err
	}
	failpoint.Hit("tier.after_local_unlink")
	if n := l.deleteRemoved(ctx, gone); n < len(gone) {
		l.log.Info("tier: stopped deleting local copies; the orphan sweeper deletes the rest", "deleted", n, "left", len(gone)-n)
	}
	l.metrics.TierLocalDeleted.Add(float64(len(gone)))
	l.log.Info("deleted local copies of tiered ledgers", "ledgers", len(gone), "first_ledger", gone[0].LedgerId,
		"last_offset", gone[len(gone)-1].LastOffset)
	return nil
}

// collectGarbage deletes the queued garbage objects unlinked at least
// DeleteDelay ago and, once the store
// confirms, removes them from the queue by CAS. Objects whose deletion
// fails stay queued for the next check.
func (l *Log) collectGarbage(ctx context.Context) error {
	if l.cfg.Tier == nil {
		return nil
	}
	horizon := l.cfg.Now().Add(-l.cfg.Tier.DeleteDelay).UnixMilli()
	l.mu.Lock()
	var keys []string
	for _, g := range l.mu.pl.GetGarbage() {
		if g.SinceMs <= horizon {
			keys = append(keys, g.ObjectKey)
		}
	}
	l.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, l.cfg.Tier.RequestTimeout)
	failed, err := l.cfg.Tier.Store.Delete(dctx, keys)
	cancel()
	if err != nil {
		return fmt.Errorf("partlog: deleting %d garbage objects: %w", len(keys), err)
	}
	deleted := make(map[string]bool, len(keys))
	for _, k := range keys {
		deleted[k] = true
	}
	for _, f := range failed {
		delete(deleted, f.Key)
	}
	err = l.casUnderSem(ctx, func(pl *brokerpb.PartitionLog) error {
		n := len(pl.Garbage)
		pl.Garbage = slices.DeleteFunc(pl.Garbage, func(g *brokerpb.GarbageObject) bool { return deleted[g.ObjectKey] })
		if len(pl.Garbage) == n {
			return errNothing
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.metrics.TierGarbageDeleted.Add(float64(len(keys) - len(failed)))
	if len(failed) > 0 {
		return fmt.Errorf("partlog: %d of %d garbage objects not deleted (first: %s: %v)", len(failed), len(keys), failed[0].Key, failed[0].Err)
	}
	return nil
}

// deleteObjects deletes objects nothing references (any more); failures
// are left to the orphan sweep.
func (l *Log) deleteObjects(ctx context.Context, keys []string) {
	if l.cfg.Tier == nil || len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Tier.RequestTimeout)
	defer cancel()
	failed, err := l.cfg.Tier.Store.Delete(ctx, keys)
	if err != nil || len(failed) > 0 {
		l.log.Warn("deleting objects failed; the orphan sweep retries", "objects", len(keys), "failed", len(failed), "err", err)
	}
}

// sweepOrphanObjects deletes objects under this partition's prefix that
// the PartitionLog names neither as tiered nor as queued garbage and that
// are older than OrphanGrace
// (T1: the listing never decides what is readable, only what is garbage).
func (l *Log) sweepOrphanObjects(ctx context.Context) error {
	tier := l.cfg.Tier
	if tier.CanDestroy != nil {
		if err := tier.CanDestroy(ctx); err != nil {
			return fmt.Errorf("partlog: orphan sweep skipped: %w", err)
		}
	}
	var orphans []string
	horizon := time.Now().Add(-tier.OrphanGrace)
	lctx, cancel := context.WithTimeout(ctx, tier.RequestTimeout)
	defer cancel()
	err := tier.Store.List(lctx, tier.KeyPrefix, "", func(o objstore.ObjectInfo) bool {
		if strings.HasSuffix(o.Key, ".seg") && o.LastModified.Before(horizon) {
			orphans = append(orphans, o.Key)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("partlog: listing %s: %w", tier.KeyPrefix, err)
	}
	// Read the list from metad after the listing, so an object committed
	// meanwhile is named by it, and sweep only if it is still the version
	// this log wrote: a stale owner (paused past its lease) would otherwise
	// take the new owner's objects for orphans (T1, T7).
	stored, version, err := ReadPartitionLog(ctx, l.cfg.Store, l.cfg.Topic, l.cfg.Partition)
	if err != nil {
		return fmt.Errorf("partlog: orphan sweep: %w", err)
	}
	l.mu.Lock()
	ours := l.mu.version
	l.mu.Unlock()
	if version != ours {
		return fmt.Errorf("partlog: orphan sweep skipped: the partition's list is at version %d, this owner wrote %d", version, ours)
	}
	live := map[string]bool{}
	for _, s := range stored.GetTiered() {
		live[s.ObjectKey] = true
	}
	// Queued garbage is not an orphan: the queue deletes it once
	// DeleteDelay has passed, for the reads that chose it before its
	// unlinking (T6).
	for _, g := range stored.GetGarbage() {
		live[g.ObjectKey] = true
	}
	orphans = slices.DeleteFunc(orphans, func(k string) bool { return live[k] })
	l.abortOldUploads(ctx, horizon)
	if len(orphans) == 0 {
		return nil
	}
	l.deleteObjects(ctx, orphans)
	l.metrics.TierOrphansDeleted.Add(float64(len(orphans)))
	l.log.Info("deleted orphan objects", "objects", len(orphans))
	return nil
}

// abortOldUploads aborts multipart uploads under the partition's prefix
// begun before horizon: a crash mid-upload leaves one behind (an upload
// in progress is younger). Stores that cannot list them by prefix (MinIO)
// expire them on their own.
func (l *Log) abortOldUploads(ctx context.Context, horizon time.Time) {
	tier := l.cfg.Tier
	ctx, cancel := context.WithTimeout(ctx, tier.RequestTimeout)
	defer cancel()
	var old []objstore.UploadInfo
	err := tier.Store.ListIncompleteUploads(ctx, tier.KeyPrefix, func(u objstore.UploadInfo) bool {
		if u.Initiated.Before(horizon) {
			old = append(old, u)
		}
		return true
	})
	if err != nil {
		l.log.Warn("listing incomplete uploads", "err", err)
		return
	}
	for _, u := range old {
		if err := tier.Store.AbortIncompleteUpload(ctx, u.Key, u.UploadID); err != nil {
			l.log.Warn("aborting an abandoned upload", "key", u.Key, "err", err)
			continue
		}
		l.log.Info("aborted an abandoned upload", "key", u.Key, "initiated", u.Initiated)
	}
}

// tieredFor returns the tiered segment holding offset, or nil.
func tieredFor(tiered []*brokerpb.TieredSegment, offset int64) *brokerpb.TieredSegment {
	i := sort.Search(len(tiered), func(i int) bool { return tiered[i].LastOffset >= offset })
	if i < len(tiered) && tiered[i].BaseOffset <= offset {
		return tiered[i]
	}
	return nil
}

// localStart is the first offset the ledgers hold (the high watermark
// when there are none): below it, reads go to the object store.
func localStart(pl *brokerpb.PartitionLog, hw int64) int64 {
	if len(pl.GetSegments()) > 0 {
		return pl.Segments[0].FirstOffset
	}
	return hw
}

// objectRange reads byte ranges of one object (segfile.RangeReader), each
// read bounded by timeout (0: ctx only).
type objectRange struct {
	store   objstore.Store
	key     string
	timeout time.Duration
}

func (o objectRange) ReadAt(ctx context.Context, off, n int64) ([]byte, error) {
	rc, done, err := o.open(ctx, off, n)
	if err != nil {
		return nil, err
	}
	defer done()
	return readAllOf(rc, n)
}

// open starts reading [off, off+n) within the timeout; done closes the
// reader and ends the timeout.
func (o objectRange) open(ctx context.Context, off, n int64) (rc io.ReadCloser, done func(), err error) {
	cancel := context.CancelFunc(func() {})
	if o.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
	}
	if rc, err = o.store.GetRange(ctx, o.key, off, n); err != nil {
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
