package partlog

import (
	"errors"
	"fmt"

	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
)

// validateRecords checks a produced batch's records against its header
// before anything is stored, as Kafka's LogValidator does, so that what a
// log holds is what every reader can decode (a 61-byte batch claiming 2^31-1 records moved the next offset by two billion and
// stopped every consumer of the partition for good).
//
// batch passed recordbatch.Verify with header h. The rules, all of which
// a producer's batch satisfies (a producer never sends compacted batches):
//   - a compressed records section decompresses to at most
//     InflationBound(len(batch), maxRatio) bytes: maxRatio (the topic's
//     max.compression.ratio) times the batch's size, else ErrInflated (no
//     decompression bombs); and to at most
//     recordbatch.MaxDecompressedBytes, else ErrTooLarge. The check
//     streams (recordbatch.ScanRecords): it holds a window and the
//     codec's state, never the decompressed records;
//   - every record's framing is consistent with its bytes;
//   - it is not a control batch: transaction markers are the broker's to
//     write (Kafka refuses them from clients too), and consumers skip
//     control batches, so a produced one would be acknowledged and never
//     delivered;
//   - it carries no delete horizon (attribute bit 6, KIP-534): only
//     compaction stamps one, and compaction drops a batch's tombstones
//     once its horizon passed, so a produced one would have them dropped
//     before delete.retention.ms;
//   - the records decoded number exactly RecordCount, which is positive;
//   - their offset deltas are 0, 1, ..., n-1 in order;
//   - LastOffsetDelta is RecordCount-1;
//   - with create times, no record is newer than MaxTimestamp (the
//     header's value is what message.timestamp.after.max.ms, the time
//     index and retention look at, so a record stamped beyond it would
//     slip past all three).
//
// Anything else is ErrCorruptBatch, with what is wrong.
func validateRecords(batch []byte, h recordbatch.BatchHeader, maxRatio int) error {
	if h.RecordCount <= 0 {
		return fmt.Errorf("%w: record count %d, want at least 1", ErrCorruptBatch, h.RecordCount)
	}
	if h.IsControl() {
		return fmt.Errorf("%w: control batch (attributes 0x%04x): clients may not write transaction markers", ErrCorruptBatch, uint16(h.Attributes))
	}
	if _, ok := compact.DeleteHorizon(h); ok {
		return fmt.Errorf("%w: delete horizon set (attributes 0x%04x): only compaction stamps one", ErrCorruptBatch, uint16(h.Attributes))
	}
	if h.LastOffsetDelta != h.RecordCount-1 {
		return fmt.Errorf("%w: last offset delta %d with %d records, want %d", ErrCorruptBatch, h.LastOffsetDelta, h.RecordCount, h.RecordCount-1)
	}
	maxDecompressed := InflationBound(len(batch), maxRatio)
	n, err := recordbatch.ScanRecords(batch, h, maxDecompressed, func(i int, r recordbatch.RecordInfo) error {
		if i >= int(h.RecordCount) {
			return fmt.Errorf("%w: more records than the %d the header counts", ErrCorruptBatch, h.RecordCount)
		}
		if r.OffsetDelta != int32(i) {
			return fmt.Errorf("%w: record %d has offset delta %d, want %d", ErrCorruptBatch, i, r.OffsetDelta, i)
		}
		if h.RecordTimestamp(r) > h.MaxTimestamp {
			return fmt.Errorf("%w: record %d is stamped %d+%d, after the batch's max timestamp %d", ErrCorruptBatch, i, h.BaseTimestamp, r.TimestampDelta, h.MaxTimestamp)
		}
		return nil
	})
	switch {
	case errors.Is(err, recordbatch.ErrTooLarge) && maxDecompressed < recordbatch.MaxDecompressedBytes:
		return fmt.Errorf("%w: a %d-byte %s batch decompresses to more than %d bytes, %d times its size: max.compression.ratio is %d",
			ErrInflated, len(batch), h.Compression(), maxDecompressed, maxRatio, maxRatio)
	case errors.Is(err, recordbatch.ErrTooLarge):
		return fmt.Errorf("%w: %w (a batch may decompress to at most %d bytes)", ErrTooLarge, err, maxDecompressed)
	case errors.Is(err, ErrCorruptBatch):
		return err
	case err != nil:
		return fmt.Errorf("%w: %w", ErrCorruptBatch, err)
	case n != int(h.RecordCount):
		return fmt.Errorf("%w: header counts %d records, the bytes hold %d", ErrCorruptBatch, h.RecordCount, n)
	}
	return nil
}

// MaxStoredDecompressedBytes is the bound a reader of stored batches
// decompresses one within (ListOffsets by time, compaction): the most any
// produced batch may decompress to (InflationBound), whatever the topic's
// limits were when it was stored.
const MaxStoredDecompressedBytes = recordbatch.MaxDecompressedBytes

// InflationBound is how many bytes the records of a produced batch of
// batchBytes may decompress to under max.compression.ratio maxRatio:
// maxRatio times its size, and at most recordbatch.MaxDecompressedBytes,
// the bound every reader decodes a batch within (consumers, compaction,
// ListOffsets).
func InflationBound(batchBytes, maxRatio int) int {
	return int(min(int64(batchBytes)*int64(maxRatio), recordbatch.MaxDecompressedBytes))
}

// DecompressedBound is the most that validating batch under lim
// decompresses: InflationBound of its size for a compressed batch, its size
// for one that is not (or that is refused before its records are read:
// larger than MaxBatchBytes, or too short to tell). It is what a produce
// budget holds for the batch while it is validated (a pure function).
func DecompressedBound(batch []byte, lim Limits) int {
	h, err := recordbatch.ParseHeader(batch)
	if err != nil || h.Compression() == recordbatch.CompressionNone || len(batch) > lim.MaxBatchBytes {
		return len(batch)
	}
	return max(len(batch), InflationBound(len(batch), lim.MaxCompressionRatio))
}
