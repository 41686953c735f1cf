package partlog

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
)

// Read-side bounds.
const (
	// readAheadBytes: a read from bookies fetches this much beyond what a
	// fetch asked for, kept for the next sequential fetch (ReadAhead).
	readAheadBytes = 1 << 20
	// defaultReadAheadBytes bounds the read-ahead of a log configured
	// without a ReadAhead (its own, for its own reads).
	defaultReadAheadBytes = 4 * readAheadBytes
	// indexCacheSize, readerCacheSize: closed segments' indexes and ledger
	// readers kept per partition.
	indexCacheSize  = 64
	readerCacheSize = 8
)

// FetchResult is what Fetch returns.
type FetchResult struct {
	// Batches: whole stored batches, in offset order (a part read from a
	// segment object may hold several, concatenated); the first may start
	// below the requested offset (the client skips those records). They
	// are not copied out of the tail cache and the ledger reads, so they
	// are shared, and read-only.
	Batches                       [][]byte
	HighWatermark, LogStartOffset int64
}

// Bytes is the size of r's batches.
func (r FetchResult) Bytes() int {
	n := 0
	for _, b := range r.Batches {
		n += len(b)
	}
	return n
}

// Records is r's batches concatenated, in a new slice (nil if none).
func (r FetchResult) Records() []byte {
	if len(r.Batches) == 0 {
		return nil
	}
	return bytes.Join(r.Batches, nil)
}

// segRef is a snapshot of one segment for the read path.
type segRef struct {
	ledgerID    uint64
	first, last int64 // last acknowledged offset
	lastEntry   int64
	maxTs       int64
	open        bool
	entries     []entryInfo // open segment: its acknowledged entries
}

// Fetch returns whole batches from offset on, up to maxBytes (at least
// one batch however large), never at or beyond the high watermark,
// continuing across segments. At offset == HW it waits up to maxWait for
// an append, then returns nothing. Outside [log start, HW]:
// *OutOfRangeError.
func (l *Log) Fetch(ctx context.Context, offset int64, maxBytes int, maxWait time.Duration) (FetchResult, error) {
	var timeout <-chan time.Time
	retries := 0
	for {
		l.mu.Lock()
		if err := l.readErrLocked(); err != nil {
			l.mu.Unlock()
			return FetchResult{}, err
		}
		start, hw := l.mu.pl.GetLogStartOffset(), l.mu.hw
		if offset < start || offset > hw {
			l.mu.Unlock()
			return FetchResult{}, &OutOfRangeError{Offset: offset, Start: start, End: hw}
		}
		if offset < hw {
			if pl, version := l.mu.pl, l.mu.version; offset < localStart(pl, hw) {
				l.mu.Unlock()
				records, err := l.reads.readTiered(ctx, pl, offset, maxBytes)
				if err != nil {
					// The object may have been unlinked (retention, a
					// compaction swap) and deleted after its grace:
					// read again from the new list.
					if t := tieredFor(pl.GetTiered(), offset); t != nil && retries < 3 &&
						ctx.Err() == nil && replacedSince(l.Snapshot(), version, nil, []*brokerpb.TieredSegment{t}) {
						retries++
						continue
					}
					return FetchResult{}, err
				}
				return FetchResult{Batches: [][]byte{records}, HighWatermark: hw, LogStartOffset: start}, nil
			}
			segs, version := segmentRefs(l.mu.pl, &l.mu.seg), l.mu.version
			l.mu.Unlock()
			batches, n, err := l.reads.read(ctx, segs, offset, hw, maxBytes)
			if err != nil {
				// A compaction or retention CAS may have replaced (and
				// deleted) a ledger this read had listed: read again from
				// the new list.
				if retries < 3 && ctx.Err() == nil && replacedSince(l.Snapshot(), version, segs, nil) {
					retries++
					continue
				}
				return FetchResult{}, err
			}
			l.metrics.FetchedBytes.Add(float64(n))
			return FetchResult{Batches: batches, HighWatermark: hw, LogStartOffset: start}, nil
		}
		changed := l.mu.hwChanged
		l.mu.Unlock()
		if maxWait <= 0 {
			return FetchResult{HighWatermark: hw, LogStartOffset: start}, nil
		}
		if timeout == nil {
			t := time.NewTimer(maxWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			return FetchResult{HighWatermark: l.HighWatermark(), LogStartOffset: start}, nil
		case <-ctx.Done():
			return FetchResult{}, ctx.Err()
		}
	}
}

// replacedSince reports whether a read over segs and objects, a snapshot
// of the list taken at version, may have failed because a change since (a
// compaction swap, retention, tiering's removal of local copies) replaced
// a ledger or object of the snapshot and deleted it: the list (now cur)
// changed and no longer names one of them. The read is then worth doing
// again from the new list; a failure on pieces all still listed is not.
func replacedSince(cur Snapshot, version int64, segs []segRef, objects []*brokerpb.TieredSegment) bool {
	if cur.Version == version {
		return false
	}
	listed := make(map[uint64]bool, len(cur.List.GetSegments()))
	for _, s := range cur.List.GetSegments() {
		listed[s.GetLedgerId()] = true
	}
	for _, s := range segs {
		if !listed[s.ledgerID] {
			return true
		}
	}
	if len(objects) == 0 {
		return false
	}
	keys := make(map[string]bool, len(cur.List.GetTiered()))
	for _, t := range cur.List.GetTiered() {
		keys[t.ObjectKey] = true
	}
	for _, o := range objects {
		if !keys[o.ObjectKey] {
			return true
		}
	}
	return false
}

// readErrLocked is why reads must be refused, or nil.
// REQUIRES: l.mu held.
func (l *Log) readErrLocked() error {
	if l.mu.err != nil {
		// A failed log serves no more reads, and its broker drops it:
		// the reader is told, as for a closed one, to ask where the
		// partition lives now. The cause stays in the message only: an
		// append's unknown outcome is no read's, and answered as such
		// it made consumers give up instead of retrying elsewhere.
		return fmt.Errorf("%w: the log failed: %v", ErrClosed, l.mu.err)
	}
	select {
	case <-l.mu.closed:
		return ErrClosed
	default:
	}
	return nil
}

// segmentRefs snapshots pl's segments for reading, open the open segment
// (its acknowledged entries).
func segmentRefs(pl *brokerpb.PartitionLog, o *openSegment) []segRef {
	segs := make([]segRef, 0, len(pl.GetSegments()))
	for _, s := range pl.GetSegments() {
		if !s.GetClosed() && s.GetLedgerId() == o.ledgerID {
			entries := o.entries[:o.acked]
			ref := segRef{ledgerID: o.ledgerID, first: o.first, last: o.first - 1, lastEntry: int64(len(entries)) - 1,
				maxTs: -1, open: true, entries: entries}
			if n := len(entries); n > 0 {
				ref.last, ref.maxTs = entries[n-1].last, entries[n-1].runMaxTs
			}
			segs = append(segs, ref)
			continue
		}
		segs = append(segs, segRef{ledgerID: s.GetLedgerId(), first: s.GetFirstOffset(), last: s.GetLastOffset(),
			lastEntry: s.GetLastEntryId(), maxTs: s.GetMaxTimestampMs()})
	}
	return segs
}

// ListOffset resolves a timestamp to an offset: -2 the log start, -1 the
// high watermark (ts -1 for both); otherwise the first record with a
// timestamp >= timestampMs and its timestamp, or (HW, -1) when none.
// A lookup that fails on a ledger a CAS replaced meanwhile (a compaction
// swap deletes its inputs) looks up once more in the new list, as Fetch
// reads again.
func (l *Log) ListOffset(ctx context.Context, timestampMs int64) (offset, ts int64, err error) {
	for retried := false; ; retried = true {
		l.mu.Lock()
		if err := l.readErrLocked(); err != nil {
			l.mu.Unlock()
			return 0, 0, err
		}
		start, hw, pl, version := l.mu.pl.GetLogStartOffset(), l.mu.hw, l.mu.pl, l.mu.version
		segs := segmentRefs(l.mu.pl, &l.mu.seg)
		l.mu.Unlock()
		switch {
		case timestampMs == -2:
			return start, -1, nil
		case timestampMs == -1:
			return hw, -1, nil
		case timestampMs < 0:
			return 0, 0, fmt.Errorf("partlog: invalid timestamp %d", timestampMs)
		}
		offset, ts, err = l.reads.offsetForTime(ctx, pl, segs, start, hw, timestampMs, MaxStoredDecompressedBytes)
		if err != nil && !retried && ctx.Err() == nil && replacedSince(l.Snapshot(), version, segs, pl.GetTiered()) {
			continue
		}
		return offset, ts, err
	}
}
