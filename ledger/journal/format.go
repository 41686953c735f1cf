package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/strata-log/strata/vfs"
)

// The on-disk format; doc.go describes it byte by byte.
const (
	// FileHeaderSize is the size of the header at the start of every file;
	// the first record starts right after it.
	FileHeaderSize = 24
	// RecordHeaderSize is the fixed part of every record.
	RecordHeaderSize = 44
	// MaxRecordBytes bounds a record's encoding (header included). Longer
	// lengths read from disk are rejected before anything is allocated.
	MaxRecordBytes = 64 << 20
	// MaxPayloadBytes is the largest Add payload.
	MaxPayloadBytes = MaxRecordBytes - RecordHeaderSize
	// MaxPadBytes is the longest pad record, the most a commit group grows
	// by in format version 2: a gap shorter than a record header is padded
	// to the boundary after next.
	MaxPadBytes = alignBytes + RecordHeaderSize - 1

	fileMagic = "STRATAJL"
	// versionPacked files hold records back to back from the header on;
	// versionAligned files align every commit group to alignBytes and end
	// it with a pad record (written since direct I/O).
	versionPacked  = 1
	versionAligned = 2

	// alignBytes is the alignment of commit groups in versionAligned
	// files: what direct I/O needs of a write's offset and length.
	alignBytes = 4096

	flagRecovery = 1 << 0
)

// RecordType says what a record is.
type RecordType uint8

// The record types. Values are stored on disk: never renumber.
const (
	// TypeAdd stores an entry: LedgerID, EntryID, the LAC the writer sent
	// with it, Payload and the recovery-add flag.
	TypeAdd RecordType = 1
	// TypeFence marks LedgerID fenced.
	TypeFence RecordType = 2
	// TypeLAC is an explicit LAC for LedgerID.
	TypeLAC RecordType = 3
	// TypeDelete marks LedgerID deleted, so replay does not resurrect it.
	TypeDelete RecordType = 4
	// TypePad fills a commit group up to the next alignment boundary. The
	// journal writes it itself (Append refuses it); Replay skips it and
	// Read never returns it.
	TypePad RecordType = 5
)

// The aligned layout relies on the file system taking writes of alignBytes
// multiples with direct I/O.
var _ = [1]struct{}{}[alignBytes%vfs.DirectAlign]

func (t RecordType) String() string {
	switch t {
	case TypeAdd:
		return "add"
	case TypeFence:
		return "fence"
	case TypeLAC:
		return "lac"
	case TypeDelete:
		return "delete"
	case TypePad:
		return "pad"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Record is one journal record. Which fields a type uses is listed at the
// type constants; the others must be zero.
type Record struct {
	Type     RecordType
	LedgerID uint64
	EntryID  uint64
	LAC      int64
	Payload  []byte
	Recovery bool
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// validate checks rec before it is queued, so that everything written
// decodes.
func (rec *Record) validate() error {
	switch rec.Type {
	case TypeAdd:
		if len(rec.Payload) > MaxPayloadBytes {
			return fmt.Errorf("%w: payload of %d bytes, max %d", ErrTooLarge, len(rec.Payload), MaxPayloadBytes)
		}
		return nil
	case TypeFence, TypeLAC, TypeDelete:
	default:
		return fmt.Errorf("%w: type %v", ErrInvalidRecord, rec.Type)
	}
	if len(rec.Payload) != 0 || rec.EntryID != 0 || rec.Recovery || (rec.Type != TypeLAC && rec.LAC != 0) {
		return fmt.Errorf("%w: a %v record carries an entry id, payload, recovery flag or LAC it does not have",
			ErrInvalidRecord, rec.Type)
	}
	return nil
}

// encodedSize is the number of bytes rec takes on disk.
func (rec *Record) encodedSize() int { return RecordHeaderSize + len(rec.Payload) }

// appendFileHeader appends the header of file seq, in format version
// version, to dst.
func appendFileHeader(dst []byte, seq uint64, version uint32) []byte {
	start := len(dst)
	dst = append(dst, fileMagic...)
	dst = binary.LittleEndian.AppendUint32(dst, version)
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// decodeFileHeader returns the sequence number and version in a file
// header. ok is false when b is not a whole header with the magic and a
// matching checksum (a damaged, torn or foreign header).
func decodeFileHeader(b []byte) (seq uint64, version uint32, ok bool) {
	if len(b) < FileHeaderSize || string(b[:8]) != fileMagic ||
		binary.LittleEndian.Uint32(b[20:24]) != crc32.Checksum(b[:20], castagnoli) {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(b[12:20]), binary.LittleEndian.Uint32(b[8:12]), true
}

// appendRecord appends the encoding of rec, to be written at offset off of
// file seq, groupOffset bytes after the start of its commit group. The
// checksums cover the bytes in dst, so the record on disk is always
// self-consistent even if the caller's payload changes concurrently.
func appendRecord(dst []byte, rec *Record, seq uint64, off int64, groupOffset uint32) []byte {
	start := len(dst)
	dst = slices.Grow(dst, rec.encodedSize())[:start+RecordHeaderSize]
	h := dst[start:]
	binary.LittleEndian.PutUint32(h[4:8], uint32(rec.encodedSize()))
	binary.LittleEndian.PutUint32(h[12:16], groupOffset)
	h[16] = byte(rec.Type)
	h[17] = 0
	if rec.Recovery {
		h[17] = flagRecovery
	}
	h[18], h[19] = 0, 0
	binary.LittleEndian.PutUint64(h[20:28], rec.LedgerID)
	binary.LittleEndian.PutUint64(h[28:36], rec.EntryID)
	binary.LittleEndian.PutUint64(h[36:44], uint64(rec.LAC))
	dst = append(dst, rec.Payload...)
	h = dst[start : start+RecordHeaderSize]
	binary.LittleEndian.PutUint32(h[8:12], crc32.Checksum(dst[start+RecordHeaderSize:], castagnoli))
	binary.LittleEndian.PutUint32(h[0:4], headerChecksum(seq, off, h))
	return dst
}

// padLength is the length of the pad record that takes a group ending at
// offset end to an alignment boundary: 0 if end is on one, otherwise the
// gap to the next boundary, or to the one after if the gap cannot hold a
// record header.
func padLength(end int64) int {
	gap := int((alignBytes - end%alignBytes) % alignBytes)
	if gap > 0 && gap < RecordHeaderSize {
		gap += alignBytes
	}
	return gap
}

// appendPad appends a pad record of length bytes (header included; its
// payload is zeros), to be written at offset off of file seq, groupOffset
// bytes after the start of its group.
func appendPad(dst []byte, seq uint64, off int64, groupOffset uint32, length int) []byte {
	start := len(dst)
	dst = slices.Grow(dst, length)[:start+length]
	clear(dst[start:])
	h := dst[start:]
	binary.LittleEndian.PutUint32(h[4:8], uint32(length))
	binary.LittleEndian.PutUint32(h[8:12], crc32.Checksum(h[RecordHeaderSize:], castagnoli))
	binary.LittleEndian.PutUint32(h[12:16], groupOffset)
	h[16] = byte(TypePad)
	binary.LittleEndian.PutUint32(h[0:4], headerChecksum(seq, off, h))
	return dst
}

// headerChecksum is the CRC-32C of the record's position (file sequence and
// offset, 8 bytes each, little-endian) followed by header bytes [4, 44).
// Binding the position in makes a record read from the wrong place (a
// misdirected write, a stale copy, a record embedded in a payload) fail.
func headerChecksum(seq uint64, off int64, h []byte) uint32 {
	return crc32.Update(crcUint64(crcUint64(0, seq), uint64(off)), castagnoli, h[4:RecordHeaderSize])
}

// crcUint64 is crc32.Update(crc, castagnoli, v as 8 little-endian bytes),
// byte by byte from the table: a slice of a local array would escape into
// crc32's dispatch and cost an allocation per record.
func crcUint64(crc uint32, v uint64) uint32 {
	crc = ^crc
	for range 8 {
		crc = castagnoli[byte(crc)^byte(v)] ^ crc>>8
		v >>= 8
	}
	return ^crc
}

// recordHeader is a decoded, verified record header.
type recordHeader struct {
	length      uint32 // whole record
	payloadCRC  uint32
	groupOffset uint32
	typ         RecordType
	flags       uint8
	ledgerID    uint64
	entryID     uint64
	lac         int64
}

// plausibleHeader is a cheap filter run before the checksum when searching
// for the next record in damaged bytes: it rejects almost all garbage
// without computing a CRC.
func plausibleHeader(h []byte, room int64) bool {
	n := binary.LittleEndian.Uint32(h[4:8])
	return n >= RecordHeaderSize && n <= MaxRecordBytes && int64(n) <= room &&
		h[16] >= byte(TypeAdd) && h[16] <= byte(TypePad) && h[17]&^flagRecovery == 0 &&
		h[18] == 0 && h[19] == 0
}

// decodeHeader verifies and decodes the record header in h[:RecordHeaderSize]
// found at offset off of file seq.
func decodeHeader(h []byte, seq uint64, off int64) (recordHeader, error) {
	if len(h) < RecordHeaderSize {
		return recordHeader{}, corruptf(seq, off, "truncated record header (%d bytes)", len(h))
	}
	if binary.LittleEndian.Uint32(h[4:8]) == 0 && binary.LittleEndian.Uint32(h[0:4]) == 0 {
		return recordHeader{}, corruptf(seq, off, "zero record header (end of log)")
	}
	if got, want := binary.LittleEndian.Uint32(h[0:4]), headerChecksum(seq, off, h); got != want {
		return recordHeader{}, corruptf(seq, off, "record header checksum %08x, want %08x", got, want)
	}
	rh := recordHeader{
		length:      binary.LittleEndian.Uint32(h[4:8]),
		payloadCRC:  binary.LittleEndian.Uint32(h[8:12]),
		groupOffset: binary.LittleEndian.Uint32(h[12:16]),
		typ:         RecordType(h[16]),
		flags:       h[17],
		ledgerID:    binary.LittleEndian.Uint64(h[20:28]),
		entryID:     binary.LittleEndian.Uint64(h[28:36]),
		lac:         int64(binary.LittleEndian.Uint64(h[36:44])),
	}
	// The checksum matched, so what follows catches writer bugs and
	// deliberately forged records, not random damage.
	switch {
	case rh.length < RecordHeaderSize || rh.length > MaxRecordBytes:
		return recordHeader{}, corruptf(seq, off, "record length %d", rh.length)
	case rh.typ < TypeAdd || rh.typ > TypePad:
		return recordHeader{}, corruptf(seq, off, "record type %d", rh.typ)
	case rh.flags&^flagRecovery != 0 || h[18] != 0 || h[19] != 0:
		return recordHeader{}, corruptf(seq, off, "reserved bits set")
	case int64(rh.groupOffset) > off-FileHeaderSize:
		return recordHeader{}, corruptf(seq, off, "group offset %d before the first record", rh.groupOffset)
	case rh.typ == TypePad:
		if group := off - int64(rh.groupOffset); rh.length > MaxPadBytes || (off+int64(rh.length))%alignBytes != 0 ||
			(group != FileHeaderSize && group%alignBytes != 0) || rh.flags != 0 || rh.ledgerID != 0 ||
			rh.entryID != 0 || rh.lac != 0 {
			return recordHeader{}, corruptf(seq, off, "pad record that the journal does not write")
		}
	case rh.typ != TypeAdd && (rh.length != RecordHeaderSize || rh.entryID != 0 || rh.flags != 0 ||
		rh.payloadCRC != 0 || (rh.typ != TypeLAC && rh.lac != 0)):
		return recordHeader{}, corruptf(seq, off, "%v record with fields it does not have", rh.typ)
	}
	return rh, nil
}

// decodeRecord verifies and decodes the record at the start of b, found at
// offset off of file seq. b may extend past the record. The payload aliases
// b; nothing is allocated.
func decodeRecord(b []byte, seq uint64, off int64) (Record, recordHeader, error) {
	rh, err := decodeHeader(b, seq, off)
	if err != nil {
		return Record{}, rh, err
	}
	if int64(len(b)) < int64(rh.length) {
		return Record{}, rh, corruptf(seq, off, "truncated record: %d of %d bytes", len(b), rh.length)
	}
	payload := b[RecordHeaderSize:rh.length:rh.length]
	if got := crc32.Checksum(payload, castagnoli); got != rh.payloadCRC {
		return Record{}, rh, corruptf(seq, off, "payload checksum %08x, want %08x", got, rh.payloadCRC)
	}
	if rh.typ == TypePad {
		for _, c := range payload {
			if c != 0 {
				return Record{}, rh, corruptf(seq, off, "pad record with non-zero payload")
			}
		}
		return Record{Type: TypePad}, rh, nil
	}
	rec := Record{
		Type:     rh.typ,
		LedgerID: rh.ledgerID,
		EntryID:  rh.entryID,
		LAC:      rh.lac,
		Recovery: rh.flags&flagRecovery != 0,
	}
	if len(payload) > 0 {
		rec.Payload = payload
	}
	return rec, rh, nil
}
