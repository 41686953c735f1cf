package segfile

import (
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/tieringpb"
	"github.com/strata-log/strata/recordbatch"
)

// Options configures a Writer.
type Options struct {
	// BaseOffset is the first offset the segment covers, written in the
	// header before any batch is seen. A plain segment's first batch must
	// start exactly here (the uploader passes tiered_end_offset, so a
	// segment that would leave a gap is refused); a compacted segment's
	// first batch may start later.
	BaseOffset int64
	// Compacted allows holes between batches: base offsets need only
	// increase (a compaction output keeps the surviving batches' original
	// base and last offsets), and batches may be empty.
	Compacted bool
	// IndexIntervalBytes is the index spacing: an entry for the first
	// batch, then one for the first batch starting at least this many
	// bytes after the previous entry. 0 means DefaultIndexIntervalBytes.
	IndexIntervalBytes int64
	// Footer holds the descriptive footer fields (topic, topic id,
	// partition, provenance, generation, created_at_ms, writer, epoch,
	// upload id, producers). It is cloned; the computed fields (see
	// segment.proto) are overwritten. Nil means none.
	Footer *tieringpb.SegmentFooter
	// Key, when set, makes the object authenticated (format version 2):
	// block tags and a MAC under Key that bind Name, the object's key
	// in the store, which must then be set. Nil writes version 1.
	Key  *Key
	Name string
	// BlockBytes is the size of an authenticated block, a power of two in
	// [MinBlockBytes, MaxBlockBytes]; 0 means DefaultBlockBytes.
	BlockBytes int64
}

// withDefaults returns o with zero values replaced by defaults.
func (o Options) withDefaults() Options {
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.BlockBytes == 0 {
		o.BlockBytes = DefaultBlockBytes
	}
	return o
}

// Validate reports whether o can be used (after defaults).
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.BaseOffset < 0:
		return fmt.Errorf("%w: negative base offset %d", ErrInvalidOptions, o.BaseOffset)
	case o.IndexIntervalBytes < 0:
		return fmt.Errorf("%w: negative index interval %d", ErrInvalidOptions, o.IndexIntervalBytes)
	case o.BlockBytes < MinBlockBytes || o.BlockBytes > MaxBlockBytes || bits.OnesCount64(uint64(o.BlockBytes)) != 1:
		return fmt.Errorf("%w: block size %d is not a power of two in [%d, %d]", ErrInvalidOptions, o.BlockBytes, MinBlockBytes, MaxBlockBytes)
	case o.Key != nil && (o.Name == "" || len(o.Name) > MaxNameBytes):
		return fmt.Errorf("%w: an authenticated object needs a name of 1 to %d bytes, not %d", ErrInvalidOptions, MaxNameBytes, len(o.Name))
	}
	return nil
}

// String describes o for logs.
func (o Options) String() string {
	o = o.withDefaults()
	f := o.Footer
	auth := "none"
	if o.Key != nil {
		auth = fmt.Sprintf("%s blocks=%dB", o.Key, o.BlockBytes)
	}
	return fmt.Sprintf("segfile base=%d compacted=%t index=%dB auth=%s topic=%s/%d gen=%d upload=%s",
		o.BaseOffset, o.Compacted, o.IndexIntervalBytes, auth, f.GetTopic(), f.GetPartition(),
		f.GetCompactionGeneration(), f.GetUploadId())
}

// Summary is what Writer.Finish, Tail.Summary and Verify report about a
// segment: what the caller records in metad (TieredSegment) and compares
// on read-back. It is comparable with ==.
type Summary struct {
	BaseOffset int64 // first offset covered (Options.BaseOffset)
	LastOffset int64 // last batch's last offset
	Records    int64
	Batches    int64
	DataBytes  int64 // bytes of batches
	IndexPos   int64 // where the tail starts: a reader GETs [IndexPos, Size)
	IndexCount int
	FooterPos  int64
	FooterLen  int
	Size       int64 // the whole object
	// MinTimestampMs is a hint (the smallest batch first-record
	// timestamp); MaxTimestampMs is exact. -1: none.
	MinTimestampMs        int64
	MaxTimestampMs        int64
	MinTombstoneHorizonMs int64 // -1: no batch carries a delete horizon
	Compacted             bool
	DataCRC, MetaCRC      uint32
	// Authenticated: the object carries a MAC (format version 2); record
	// it, so that readers refuse a copy without one (Auth.Required).
	Authenticated bool
}

// Writer streams a segment object to an io.Writer (typically the body of
// a multipart upload): the header, then each appended batch byte for byte,
// then at Finish the index, block tags, footer and trailer. Memory use is
// the index (24 bytes per IndexIntervalBytes of data) plus the footer,
// and with a key a copy of the current block (BlockBytes) and 16 bytes of
// tag per block; batches are written as they come.
//
// The first error is sticky: after an invalid batch or a failed write
// every call returns that error, and the bytes written so far must be
// discarded (abort the upload). Cancellation belongs to the io.Writer
// (e.g. io.PipeWriter.CloseWithError). A Writer is not safe for
// concurrent use.
type Writer struct {
	w        io.Writer
	opts     Options
	footer   *tieringpb.SegmentFooter
	err      error // sticky
	finished bool
	pos      int64 // bytes written so far
	dataCRC  uint32
	stats    stats
	// With a key: the tags of the blocks written so far, the current
	// block's bytes, and the object's block tagger.
	tags   []Tag
	block  []byte
	tagger blockTagger
}

// NewWriter returns a Writer writing to w. It writes nothing until the
// first Append.
func NewWriter(w io.Writer, opts Options) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	footer := &tieringpb.SegmentFooter{}
	if opts.Footer != nil {
		footer = proto.Clone(opts.Footer).(*tieringpb.SegmentFooter)
	}
	wr := &Writer{w: w, opts: opts, footer: footer, stats: newStats(opts.IndexIntervalBytes)}
	if opts.Key != nil {
		wr.tagger = opts.Key.blocks(opts.Name)
		wr.block = make([]byte, 0, opts.BlockBytes)
	}
	return wr, nil
}

// Append validates batch (one Kafka v2 batch as stored in a ledger entry:
// magic, size, CRC-32C, record count, offsets following the previous
// batch) and writes it unchanged. Errors: ErrInvalidBatch, ErrOffsetOrder,
// ErrFinished, or the io.Writer's error; all are sticky.
func (w *Writer) Append(batch []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.finished {
		return ErrFinished
	}
	h, err := recordbatch.Verify(batch)
	if err != nil {
		return w.fail(fmt.Errorf("%w: batch %d: %w", ErrInvalidBatch, w.stats.batches, err))
	}
	if msg := checkBatchHeader(h, w.opts.Compacted); msg != "" {
		return w.fail(fmt.Errorf("%w: batch %d at offset %d: %s (%d records, last offset delta %d)",
			ErrInvalidBatch, w.stats.batches, h.BaseOffset, msg, h.RecordCount, h.LastOffsetDelta))
	}
	if w.stats.batches == 0 {
		if msg := checkFirst(w.opts.BaseOffset, h.BaseOffset, w.opts.Compacted); msg != "" {
			return w.fail(fmt.Errorf("%w: %s: batch base %d, segment base %d", ErrOffsetOrder, msg, h.BaseOffset, w.opts.BaseOffset))
		}
	} else if msg := checkOrder(w.stats.lastOffset, h.BaseOffset, w.opts.Compacted); msg != "" {
		return w.fail(fmt.Errorf("%w: %s: batch %d starts at %d after last offset %d",
			ErrOffsetOrder, msg, w.stats.batches, h.BaseOffset, w.stats.lastOffset))
	}
	if w.pos == 0 {
		if err := w.write(appendHeader(nil, w.version(), w.opts.BaseOffset, w.opts.Compacted)); err != nil {
			return err
		}
	}
	pos := w.pos
	if err := w.write(batch); err != nil {
		return err
	}
	w.stats.add(h, pos, len(batch))
	return nil
}

// Finish writes the index, the footer and the trailer and returns the
// segment's summary. It does not close the io.Writer. Errors: ErrEmpty
// (nothing appended; nothing was written), ErrTooLarge, ErrFinished, a
// sticky error, or the io.Writer's error.
func (w *Writer) Finish() (Summary, error) {
	if w.err != nil {
		return Summary{}, w.err
	}
	if w.finished {
		return Summary{}, ErrFinished
	}
	w.finished = true
	if w.stats.batches == 0 {
		return Summary{}, ErrEmpty
	}
	s := &w.stats
	f := w.footer
	f.BaseOffset, f.LastOffset = w.opts.BaseOffset, s.lastOffset
	f.Records, f.Batches, f.DataBytes = s.records, s.batches, s.dataBytes
	f.MinTimestampMs, f.MaxTimestampMs = s.minTs, s.maxTs
	f.MinTombstoneHorizonMs = s.minHorizon
	f.IndexIntervalBytes = s.interval
	f.Compacted = w.opts.Compacted

	indexPos := w.pos
	w.endBlock()
	tail := make([]byte, 0, len(s.index)*IndexEntrySize+len(w.tags)*TagSize+proto.Size(f)+TrailerSizeV2)
	for _, e := range s.index {
		tail = appendIndexEntry(tail, e)
	}
	for _, tag := range w.tags {
		tail = append(tail, tag[:]...)
	}
	footerPos := indexPos + int64(len(tail))
	// Deterministic so that equal inputs give equal objects (golden test).
	tail, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(tail, f)
	if err != nil {
		return Summary{}, w.fail(fmt.Errorf("segfile: encoding footer: %w", err))
	}
	footerLen := int64(len(tail)) - (footerPos - indexPos)
	tr := Trailer{
		Version:  w.version(),
		IndexPos: indexPos, IndexCount: len(s.index), FooterPos: footerPos, FooterLen: int(footerLen),
		DataCRC: w.dataCRC,
	}
	if tr.Version == VersionAuthenticated {
		tr.BlockBytes, tr.BlockCount, tr.KeyID = w.opts.BlockBytes, len(w.tags), w.opts.Key.ID()
	}
	tr.Size = indexPos + int64(len(tail)) + tr.Len()
	if footerLen > math.MaxUint32 || int64(len(tail))+tr.Len() > MaxTailBytes {
		return Summary{}, w.fail(fmt.Errorf("%w: %d index entries, %d block tags and a %d-byte footer", ErrTooLarge, len(s.index), len(w.tags), footerLen))
	}
	tail = appendTrailer(tail, tr, tail, w.opts.Key, w.opts.Name)
	end := tail[int64(len(tail))-trEndLen:]
	tr.MetaCRC = be.Uint32(end[trEndMetaCRC:])
	if tr.Version == VersionAuthenticated {
		copy(tr.MAC[:], tail[int64(len(tail))-TrailerSizeV2+trMAC:])
	}
	// The tail is not part of the data CRC.
	if _, err := w.w.Write(tail); err != nil {
		return Summary{}, w.fail(err)
	}
	w.pos += int64(len(tail))
	return summarize(tr, f), nil
}

// version is the format version the Writer writes.
func (w *Writer) version() int {
	if w.opts.Key != nil {
		return VersionAuthenticated
	}
	return Version
}

// tagBlocks adds b, the bytes just written, to the current block, and
// tags each block they complete.
func (w *Writer) tagBlocks(b []byte) {
	bs := int(w.opts.BlockBytes)
	for len(b) > 0 {
		n := min(len(b), bs-len(w.block))
		w.block = append(w.block, b[:n]...)
		b = b[n:]
		if len(w.block) == bs {
			w.endBlock()
		}
	}
}

// endBlock tags the current block, if it holds bytes.
func (w *Writer) endBlock() {
	if w.opts.Key == nil || len(w.block) == 0 {
		return
	}
	w.tags = append(w.tags, w.tagger.tag(int64(len(w.tags)), w.block))
	w.block = w.block[:0]
}

// write writes b and folds it into the data CRC.
func (w *Writer) write(b []byte) error {
	if _, err := w.w.Write(b); err != nil {
		return w.fail(err)
	}
	w.dataCRC = crc32.Update(w.dataCRC, castagnoli, b)
	w.pos += int64(len(b))
	if w.opts.Key != nil {
		w.tagBlocks(b)
	}
	return nil
}

func (w *Writer) fail(err error) error {
	w.err = err
	return err
}

// summarize builds a Summary from a trailer and a footer.
func summarize(tr Trailer, f *tieringpb.SegmentFooter) Summary {
	return Summary{
		BaseOffset: f.GetBaseOffset(), LastOffset: f.GetLastOffset(),
		Records: f.GetRecords(), Batches: f.GetBatches(), DataBytes: f.GetDataBytes(),
		IndexPos: tr.IndexPos, IndexCount: tr.IndexCount, FooterPos: tr.FooterPos, FooterLen: tr.FooterLen,
		Size:           tr.Size,
		MinTimestampMs: f.GetMinTimestampMs(), MaxTimestampMs: f.GetMaxTimestampMs(),
		MinTombstoneHorizonMs: f.GetMinTombstoneHorizonMs(),
		Compacted:             f.GetCompacted(),
		DataCRC:               tr.DataCRC, MetaCRC: tr.MetaCRC,
		Authenticated: tr.Version == VersionAuthenticated,
	}
}
