package compact

import (
	"errors"
	"fmt"

	"github.com/strata-log/strata/recordbatch"
)

// Sentinel errors (match with errors.Is). Batches that do not decode fail
// with recordbatch's errors (ErrCorrupt, ErrShort, ErrMagic,
// ErrTooLarge), wrapped with the batch's position: compaction never
// skips what it cannot read (C7).
var (
	// ErrMapTooSmall: Plan met a batch with more keys than an empty
	// OffsetMap holds, so no pass could make progress.
	ErrMapTooSmall = errors.New("compact: offset map too small for one batch")
	// ErrOrder: Plan's batches are not in increasing offset order.
	ErrOrder = errors.New("compact: batches out of order")
)

// Options parameterize Rewrite.
type Options struct {
	// NowMs is the compaction's clock reading: a tombstone whose batch
	// horizon is <= NowMs is dropped; a new horizon is NowMs +
	// DeleteRetentionMs.
	NowMs int64
	// DeleteRetentionMs is the topic's delete.retention.ms.
	DeleteRetentionMs int64
	// KeepEmpty keeps an empty batch (RecordCount 0) when no record
	// survives, so that the producer's last sequence and epoch stay in the
	// log (C5). CompactBatches sets it for the last batch of each producer
	// id.
	KeepEmpty bool
	// MaxDecompressedBytes bounds one batch's decompressed records
	// section; 0 means recordbatch.MaxDecompressedBytes.
	MaxDecompressedBytes int
	// CRCChecked: the caller has checked the CRC of every batch it passes,
	// on these very bytes (recordbatch.DecodeChecked); Plan and Rewrite
	// then skip computing it again. Every other check still runs.
	CRCChecked bool
	// Survivors: Plan marks in it the records it cannot judge by key
	// (keyless ones, control batches). Given to Rewrite, it also vouches
	// that this batch lies in the range Plan indexed into m with it
	// (Survivors.AddLatest done), on these very bytes: a batch holding
	// none of its offsets is then dropped from its header alone. nil:
	// every batch is decoded.
	Survivors *Survivors
}

func (o *Options) maxDecompressed() int {
	if o.MaxDecompressedBytes > 0 {
		return o.MaxDecompressedBytes
	}
	return recordbatch.MaxDecompressedBytes
}

// decode decodes batch as o says (DecodeLimit or DecodeChecked).
func (o *Options) decode(batch []byte) (recordbatch.BatchHeader, []recordbatch.Record, error) {
	if o.CRCChecked {
		return recordbatch.DecodeChecked(batch, o.maxDecompressed())
	}
	return recordbatch.DecodeLimit(batch, o.maxDecompressed())
}

// Stats counts what a rewrite did.
type Stats struct {
	BatchesIn, BatchesOut       int64
	BatchesRewritten            int64 // re-encoded (the others are kept byte for byte or dropped)
	RecordsKept                 int64
	RecordsRemoved              int64 // superseded records and dropped tombstones
	TombstonesDropped           int64 // past their delete horizon
	HorizonsStamped             int64 // batches given a delete horizon
	BytesIn, BytesOut           int64
	EmptyBatchesKept            int64
	ControlBatchesPassedThrough int64
	// BatchesDroppedUnread: dropped from the header alone
	// (Options.Survivors), neither decompressed nor decoded.
	BatchesDroppedUnread int64
	// TombstoneHorizonMs is the earliest delete horizon of the batches
	// that left with a tombstone (the horizon they had or were stamped
	// with), 0 when no tombstone was kept. A kept tombstone's horizon is
	// above NowMs (C4), so 0 is never one for a clock past the epoch.
	// The caller stores it so that a pass runs once it passes (Decide).
	TombstoneHorizonMs int64
}

// Add adds o to s.
func (s *Stats) Add(o Stats) {
	s.BatchesIn += o.BatchesIn
	s.BatchesOut += o.BatchesOut
	s.BatchesRewritten += o.BatchesRewritten
	s.RecordsKept += o.RecordsKept
	s.RecordsRemoved += o.RecordsRemoved
	s.TombstonesDropped += o.TombstonesDropped
	s.HorizonsStamped += o.HorizonsStamped
	s.BytesIn += o.BytesIn
	s.BytesOut += o.BytesOut
	s.EmptyBatchesKept += o.EmptyBatchesKept
	s.ControlBatchesPassedThrough += o.ControlBatchesPassedThrough
	s.BatchesDroppedUnread += o.BatchesDroppedUnread
	s.TombstoneHorizonMs = EarliestHorizon(s.TombstoneHorizonMs, o.TombstoneHorizonMs)
}

// EarliestHorizon is the earlier of two tombstone horizons, 0 meaning
// none (Stats.TombstoneHorizonMs).
func EarliestHorizon(a, b int64) int64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// DeleteHorizon returns the KIP-534 delete horizon of a batch: its base
// timestamp when attribute bit 6 is set.
func DeleteHorizon(h recordbatch.BatchHeader) (ms int64, ok bool) {
	if h.Attributes&attrDeleteHorizon == 0 {
		return 0, false
	}
	return h.BaseTimestamp, true
}

// Rewrite returns the compacted form of batch, one stored batch (base
// offset stamped, valid CRC), given the map m of the latest offset of
// each key (see Plan):
//
//   - a record is kept if it has no key, or its key is not in m, or m's
//     offset for it is <= the record's offset (C1, C2);
//   - a surviving tombstone keeps or gets a delete horizon; it is dropped
//     once NowMs >= the batch's horizon (C3, C4);
//   - the output keeps the batch's offsets, producer fields, leader
//     epoch, attributes and codec; records keep their offsets and
//     timestamps (C5, C6).
//
// out is batch itself (not a copy) when nothing changes, a new buffer
// when something does, and nil when the batch is dropped. Control
// batches are passed through unchanged. With opt.Survivors, a batch none
// of whose records can survive is dropped without being decoded.
func Rewrite(batch []byte, m *OffsetMap, opt Options) (out []byte, st Stats, err error) {
	if st, ok := opt.Survivors.drop(batch, opt); ok {
		return nil, st, nil
	}
	h, recs, err := opt.decode(batch)
	if err != nil {
		return nil, Stats{}, fmt.Errorf("compact: rewrite: %w", err)
	}
	st = Stats{BatchesIn: 1, BytesIn: int64(len(batch))}
	if h.IsControl() {
		// No transactions in Strata yet: markers are kept as they are
		// (KIP-98's marker rules come with transactions).
		st.ControlBatchesPassedThrough++
		return keep(batch, st, int64(len(recs)))
	}
	horizon, hasHorizon := DeleteHorizon(h)
	kept := recs[:0]
	keptTombstone := false
	for i := range recs {
		r := &recs[i]
		if r.Key != nil {
			if latest, ok := m.get(m.hash(r.Key)); ok && latest > r.Offset {
				st.RecordsRemoved++
				continue
			}
		}
		if r.Value == nil && r.Key != nil {
			if hasHorizon && opt.NowMs >= horizon {
				st.RecordsRemoved++
				st.TombstonesDropped++
				continue
			}
			keptTombstone = true
		}
		kept = append(kept, *r) // in-place filter: never overtakes i
	}
	if len(kept) == 0 {
		if opt.KeepEmpty && h.ProducerID >= 0 {
			if len(recs) == 0 { // already empty
				return keep(batch, st, 0)
			}
			st.EmptyBatchesKept++
			return finishOut(emptyBatch(h), st, 0)
		}
		return nil, st, nil
	}
	if keptTombstone {
		// The horizon the output carries (C3): the one already stamped,
		// or the one encode stamps.
		st.TombstoneHorizonMs = horizon
		if !hasHorizon {
			st.TombstoneHorizonMs = opt.NowMs + opt.DeleteRetentionMs
		}
	}
	if st.RecordsRemoved == 0 && (hasHorizon || !keptTombstone) {
		return keep(batch, st, int64(len(kept)))
	}
	out, err = encode(h, kept, keptTombstone, hasHorizon, opt)
	if err != nil {
		return nil, Stats{}, err
	}
	if keptTombstone && !hasHorizon {
		st.HorizonsStamped++
	}
	st.BatchesRewritten++
	return finishOut(out, st, int64(len(kept)))
}

func keep(batch []byte, st Stats, records int64) ([]byte, Stats, error) {
	return finishOut(batch, st, records)
}

func finishOut(out []byte, st Stats, records int64) ([]byte, Stats, error) {
	st.BatchesOut++
	st.RecordsKept += records
	st.BytesOut += int64(len(out))
	return out, st, nil
}

// encode re-encodes h's batch with only the records kept. See doc.go
// "Delete horizon" for the base timestamp rule.
func encode(h recordbatch.BatchHeader, kept []recordbatch.Record, keptTombstone, hasHorizon bool, opt Options) ([]byte, error) {
	out := h
	out.RecordCount = int32(len(kept))
	out.Attributes &^= attrDeleteHorizon
	switch {
	case keptTombstone && hasHorizon:
		out.Attributes |= attrDeleteHorizon // keep the horizon already stamped
	case keptTombstone:
		out.Attributes |= attrDeleteHorizon
		out.BaseTimestamp = opt.NowMs + opt.DeleteRetentionMs
	default:
		out.BaseTimestamp = kept[0].TimestampMs
	}
	if h.Attributes&attrLogAppendTime == 0 {
		// CreateTime: the batch's max is the max of what survives.
		out.MaxTimestamp = kept[0].TimestampMs
		for i := range kept {
			out.MaxTimestamp = max(out.MaxTimestamp, kept[i].TimestampMs)
		}
	} // LogAppendTime: MaxTimestamp is every record's timestamp; keep it.
	return recordbatch.EncodeWithHeader(out, kept)
}

// emptyBatch is h's batch with no records, as Kafka writes it
// (DefaultRecordBatch.writeEmptyHeader): same offsets and producer
// fields, codec none (there is nothing to compress), base and max
// timestamp = the original max timestamp, no delete horizon.
func emptyBatch(h recordbatch.BatchHeader) []byte {
	out := h
	out.RecordCount = 0
	out.Attributes &^= attrCompressionMask | attrDeleteHorizon
	out.BaseTimestamp = h.MaxTimestamp
	buf, err := recordbatch.EncodeWithHeader(out, nil)
	if err != nil {
		panic(fmt.Sprintf("compact: an empty batch cannot fail to encode: %v", err)) // codec none, no records
	}
	return buf
}

// LastBatchOfProducer returns, for every producer id >= 0 among headers,
// the last offset of its last batch: the batch Rewrite must keep, even
// empty, for that producer (Options.KeepEmpty). Headers are of the whole
// log being compacted, in offset order.
func LastBatchOfProducer(headers []recordbatch.BatchHeader) map[int64]int64 {
	last := make(map[int64]int64)
	for _, h := range headers {
		if h.ProducerID >= 0 {
			last[h.ProducerID] = h.LastOffset()
		}
	}
	return last
}

// CompactBatches rewrites batches (in offset order) with Rewrite and
// returns the surviving ones. lastOfProducer (LastBatchOfProducer over
// the whole log) decides which may stay empty; nil computes it from
// batches. opt.KeepEmpty is ignored.
func CompactBatches(batches [][]byte, m *OffsetMap, opt Options, lastOfProducer map[int64]int64) ([][]byte, Stats, error) {
	if lastOfProducer == nil {
		headers := make([]recordbatch.BatchHeader, 0, len(batches))
		for i, b := range batches {
			h, err := recordbatch.ParseHeader(b)
			if err != nil {
				return nil, Stats{}, fmt.Errorf("compact: batch %d: %w", i, err)
			}
			headers = append(headers, h)
		}
		lastOfProducer = LastBatchOfProducer(headers)
	}
	var total Stats
	out := make([][]byte, 0, len(batches))
	for i, b := range batches {
		h, err := recordbatch.ParseHeader(b)
		if err != nil {
			return nil, Stats{}, fmt.Errorf("compact: batch %d: %w", i, err)
		}
		last, ok := lastOfProducer[h.ProducerID]
		opt.KeepEmpty = h.ProducerID >= 0 && ok && last == h.LastOffset()
		nb, st, err := Rewrite(b, m, opt)
		if err != nil {
			return nil, Stats{}, fmt.Errorf("compact: batch %d (offset %d): %w", i, h.BaseOffset, err)
		}
		total.Add(st)
		if nb != nil {
			out = append(out, nb)
		}
	}
	return out, total, nil
}

// EndBatch is a batch holding no record at offset, with both timestamps
// timestampMs and no producer: what ends a compacted segment object whose
// last offset lies in a hole (a segment object's last offset is its last
// batch's, segfile), so that the object still covers the range its
// inputs did.
func EndBatch(offset, timestampMs int64) []byte {
	h := recordbatch.BatchHeader{BaseOffset: offset, PartitionLeaderEpoch: -1, Magic: 2,
		BaseTimestamp: timestampMs, MaxTimestamp: timestampMs, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	buf, err := recordbatch.EncodeWithHeader(h, nil)
	if err != nil {
		panic(fmt.Sprintf("compact: an empty batch cannot fail to encode: %v", err)) // codec none, no records
	}
	return buf
}
