package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
)

var formatRecords = []Record{
	{Type: TypeAdd, LedgerID: 7, EntryID: 42, LAC: 41, Payload: []byte("hello")},
	{Type: TypeAdd, LedgerID: 1<<64 - 1, EntryID: 0, LAC: -1, Recovery: true, Payload: []byte{0}},
	{Type: TypeAdd, LedgerID: 3, EntryID: 9, LAC: 8}, // empty payload
	{Type: TypeFence, LedgerID: 7},
	{Type: TypeLAC, LedgerID: 7, LAC: 100},
	{Type: TypeLAC, LedgerID: 7, LAC: -1},
	{Type: TypeDelete, LedgerID: 7},
}

func TestRecordRoundTrip(t *testing.T) {
	const seq, off = 5, 1000
	for _, rec := range formatRecords {
		t.Run(rec.Type.String(), func(t *testing.T) {
			if err := rec.validate(); err != nil {
				t.Fatal(err)
			}
			b := appendRecord([]byte("prefix"), &rec, seq, off, 17)[len("prefix"):]
			if len(b) != rec.encodedSize() {
				t.Fatalf("encoded %d bytes, want %d", len(b), rec.encodedSize())
			}
			got, rh, err := decodeRecord(append(b, "trailing"...), seq, off)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, rec) {
				t.Fatalf("decoded %+v, want %+v", got, rec)
			}
			if rh.length != uint32(len(b)) || rh.groupOffset != 17 {
				t.Fatalf("header %+v", rh)
			}
			// The same bytes at another position are not a record.
			for _, pos := range [][2]int64{{seq + 1, off}, {seq, off + 1}} {
				if _, _, err := decodeRecord(b, uint64(pos[0]), pos[1]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("decoded at %v: %v, want ErrCorrupt", pos, err)
				}
			}
		})
	}
}

func TestRecordValidate(t *testing.T) {
	for _, tc := range []struct {
		rec  Record
		want error
	}{
		{Record{Type: 0}, ErrInvalidRecord},
		{Record{Type: 5}, ErrInvalidRecord},
		{Record{Type: TypeFence, EntryID: 1}, ErrInvalidRecord},
		{Record{Type: TypeFence, LAC: 1}, ErrInvalidRecord},
		{Record{Type: TypeDelete, Payload: []byte("x")}, ErrInvalidRecord},
		{Record{Type: TypeLAC, Recovery: true}, ErrInvalidRecord},
		{Record{Type: TypeAdd, Payload: make([]byte, MaxPayloadBytes+1)}, ErrTooLarge},
		{Record{Type: TypeAdd, Payload: make([]byte, MaxPayloadBytes)}, nil},
	} {
		if err := tc.rec.validate(); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("validate(%v, %d-byte payload) = %v, want %v", tc.rec.Type, len(tc.rec.Payload), err, tc.want)
		}
	}
}

// reseal recomputes the header CRC of an encoded record after a test edits
// its header, so the semantic checks behind the CRC are reached.
func reseal(b []byte, seq uint64, off int64) []byte {
	binary.LittleEndian.PutUint32(b[0:4], headerChecksum(seq, off, b))
	return b
}

func TestDecodeRecordDamage(t *testing.T) {
	const seq, off = 2, 500
	add := Record{Type: TypeAdd, LedgerID: 1, EntryID: 2, LAC: 1, Payload: []byte("payload bytes")}
	fence := Record{Type: TypeFence, LedgerID: 1}
	enc := func(rec Record) []byte { return appendRecord(nil, &rec, seq, off, 0) }
	edit := func(rec Record, fn func(b []byte)) []byte {
		b := enc(rec)
		fn(b)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short header", enc(add)[:RecordHeaderSize-1]},
		{"zeros", make([]byte, 100)},
		{"header only", enc(add)[:RecordHeaderSize]},
		{"one payload byte missing", func() []byte { b := enc(add); return b[:len(b)-1] }()},
		{"flipped header CRC", edit(add, func(b []byte) { b[0] ^= 1 })},
		{"flipped length", edit(add, func(b []byte) { b[5] ^= 1 })},
		{"flipped type", edit(add, func(b []byte) { b[16] ^= 1 })},
		{"flipped ledger id", edit(add, func(b []byte) { b[20] ^= 0x80 })},
		{"flipped payload", edit(add, func(b []byte) { b[RecordHeaderSize+3] ^= 4 })},
		{"flipped payload CRC", edit(add, func(b []byte) { b[9] ^= 1 })},
		{"length below header, resealed", edit(add, func(b []byte) {
			binary.LittleEndian.PutUint32(b[4:8], 10)
			reseal(b, seq, off)
		})},
		{"length above max, resealed", edit(add, func(b []byte) {
			binary.LittleEndian.PutUint32(b[4:8], MaxRecordBytes+1)
			reseal(b, seq, off)
		})},
		{"length 4 GiB, resealed", edit(add, func(b []byte) {
			binary.LittleEndian.PutUint32(b[4:8], 1<<32-1)
			reseal(b, seq, off)
		})},
		{"unknown type, resealed", edit(add, func(b []byte) { b[16] = 9; reseal(b, seq, off) })},
		{"reserved flag, resealed", edit(add, func(b []byte) { b[17] = 2; reseal(b, seq, off) })},
		{"reserved bytes, resealed", edit(add, func(b []byte) { b[19] = 1; reseal(b, seq, off) })},
		{"fence with recovery flag, resealed", edit(fence, func(b []byte) { b[17] = 1; reseal(b, seq, off) })},
		{"fence with entry id, resealed", edit(fence, func(b []byte) { b[28] = 1; reseal(b, seq, off) })},
		{"fence with LAC, resealed", edit(fence, func(b []byte) { b[36] = 1; reseal(b, seq, off) })},
		{"group before the first record, resealed", edit(add, func(b []byte) {
			binary.LittleEndian.PutUint32(b[12:16], off)
			reseal(b, seq, off)
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeRecord(tc.b, seq, off)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeRecord = %v, want ErrCorrupt", err)
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.File != seq || ce.Offset != off {
				t.Fatalf("error %v does not locate the damage", err)
			}
		})
	}
}

func TestFileHeader(t *testing.T) {
	h := appendFileHeader(nil, 0x1234, versionAligned)
	if len(h) != FileHeaderSize || string(h[:8]) != "STRATAJL" {
		t.Fatalf("header %x", h)
	}
	if seq, version, ok := decodeFileHeader(h); !ok || seq != 0x1234 || version != versionAligned {
		t.Fatalf("decodeFileHeader = %d %d %v", seq, version, ok)
	}
	for i := range h {
		b := bytes.Clone(h)
		b[i] ^= 0x10
		if _, _, ok := decodeFileHeader(b); ok {
			t.Fatalf("a flip in byte %d went unnoticed", i)
		}
	}
	if _, _, ok := decodeFileHeader(h[:FileHeaderSize-1]); ok {
		t.Fatal("short header accepted")
	}
}

// TestDecodeRecordAllocs checks that decoding (replay's hot path) allocates
// nothing: the payload aliases the input.
func TestDecodeRecordAllocs(t *testing.T) {
	rec := Record{Type: TypeAdd, LedgerID: 1, Payload: bytes.Repeat([]byte("x"), 1000)}
	b := appendRecord(nil, &rec, 1, FileHeaderSize, 0)
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := decodeRecord(b, 1, FileHeaderSize); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("decodeRecord allocates %.0f times", n)
	}
}

// TestFormatIsStable pins the encoding byte for byte: changing it needs a
// new format version.
func TestFormatIsStable(t *testing.T) {
	rec := Record{Type: TypeAdd, LedgerID: 0x0102030405060708, EntryID: 9, LAC: -1, Recovery: true, Payload: []byte("ab")}
	got := appendRecord(nil, &rec, 1, FileHeaderSize, 0)
	want := []byte{
		0, 0, 0, 0, // header CRC, filled below
		46, 0, 0, 0, // length
		0, 0, 0, 0, // payload CRC, filled below
		0, 0, 0, 0, // group offset
		1,    // type add
		1,    // recovery flag
		0, 0, // reserved
		8, 7, 6, 5, 4, 3, 2, 1, // ledger id
		9, 0, 0, 0, 0, 0, 0, 0, // entry id
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // LAC -1
		'a', 'b',
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	binary.LittleEndian.PutUint32(want[8:12], crc32.Checksum([]byte("ab"), tab))
	pos := []byte{1, 0, 0, 0, 0, 0, 0, 0, FileHeaderSize, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(want[0:4], crc32.Checksum(append(pos, want[4:RecordHeaderSize]...), tab))
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
}

// FuzzDecodeRecord: the decoder must never panic, must allocate nothing
// (so a garbage length cannot make it allocate), and whatever it accepts
// must encode back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for i, rec := range formatRecords {
		f.Add(appendRecord(nil, &rec, 1, FileHeaderSize+int64(i), uint32(i)), uint64(1), int64(FileHeaderSize+i))
	}
	f.Add(appendPad(nil, 1, 4096+100, 100, 4096-100), uint64(1), int64(4096+100))
	f.Add(appendPad(nil, 1, FileHeaderSize, 0, 4096-FileHeaderSize), uint64(1), int64(FileHeaderSize))
	f.Add(make([]byte, 64), uint64(0), int64(0))
	f.Add([]byte{}, uint64(1), int64(-5))
	f.Fuzz(func(t *testing.T, b []byte, seq uint64, off int64) {
		var rec Record
		var rh recordHeader
		var err error
		allocs := testing.AllocsPerRun(1, func() { rec, rh, err = decodeRecord(b, seq, off) })
		if err == nil && allocs != 0 {
			t.Fatalf("decodeRecord allocated %.0f times", allocs)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		var again []byte
		if rec.Type == TypePad {
			again = appendPad(nil, seq, off, rh.groupOffset, int(rh.length))
		} else {
			if err := rec.validate(); err != nil {
				t.Fatalf("decoded a record that does not validate: %v", err)
			}
			again = appendRecord(nil, &rec, seq, off, rh.groupOffset)
		}
		if !bytes.Equal(again, b[:rh.length]) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b[:rh.length])
		}
	})
}

// TestPadRecord pins the pad layout (doc.go) and checks that the decoder
// takes exactly the pads the journal writes: ending on a 4 KiB boundary, in
// a group starting after the file header or on a boundary, zero payload,
// no ledger, entry, LAC or flags.
func TestPadRecord(t *testing.T) {
	const seq = 3
	for _, tc := range []struct {
		end  int64 // where the group's records end
		want int
	}{
		{4096, 0}, {4096 + 1, 4095}, {2*4096 - 44, 44}, {2*4096 - 43, 4096 + 43}, {2*4096 - 1, 4096 + 1},
	} {
		if got := padLength(tc.end); got != tc.want {
			t.Errorf("padLength(%d) = %d, want %d", tc.end, got, tc.want)
		}
	}
	const off, groupOffset, length = 4096 + 1000, 1000, 4096 - 1000
	b := appendPad(nil, seq, off, groupOffset, length)
	want := make([]byte, length)
	binary.LittleEndian.PutUint32(want[4:8], length)
	binary.LittleEndian.PutUint32(want[8:12], crc32.Checksum(make([]byte, length-RecordHeaderSize), castagnoli))
	binary.LittleEndian.PutUint32(want[12:16], groupOffset)
	want[16] = 5
	binary.LittleEndian.PutUint32(want[0:4], headerChecksum(seq, off, want))
	if !bytes.Equal(b, want) {
		t.Fatalf("pad encoding\n got %x\nwant %x", b[:RecordHeaderSize], want[:RecordHeaderSize])
	}
	rec, rh, err := decodeRecord(b, seq, off)
	if err != nil || rec.Type != TypePad || rh.length != length || rh.groupOffset != groupOffset {
		t.Fatalf("decodeRecord(pad) = %+v %+v %v", rec, rh, err)
	}
	if err := (&Record{Type: TypePad}).validate(); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("validate(pad) = %v, want ErrInvalidRecord: Append must refuse pads", err)
	}
	edit := func(fn func(b []byte)) []byte {
		b := appendPad(nil, seq, off, groupOffset, length)
		fn(b)
		return reseal(b, seq, off)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		off  int64
	}{
		{"not ending on a boundary", appendPad(nil, seq, off, groupOffset, length-1), off},
		{"too long", appendPad(nil, seq, 2*4096-(MaxPadBytes+1), 2*4096-(MaxPadBytes+1)-FileHeaderSize, MaxPadBytes+1), 2*4096 - (MaxPadBytes + 1)},
		{"group not starting on a boundary", appendPad(nil, seq, off, groupOffset-1, length), off},
		{"ledger id", edit(func(b []byte) { b[20] = 1 }), off},
		{"entry id", edit(func(b []byte) { b[28] = 1 }), off},
		{"LAC", edit(func(b []byte) { b[36] = 1 }), off},
		{"recovery flag", edit(func(b []byte) { b[17] = flagRecovery }), off},
		{"non-zero payload, checksummed", edit(func(b []byte) {
			b[RecordHeaderSize+5] = 1
			binary.LittleEndian.PutUint32(b[8:12], crc32.Checksum(b[RecordHeaderSize:], castagnoli))
		}), off},
		{"payload bit flip", func() []byte { b := appendPad(nil, seq, off, groupOffset, length); b[100] ^= 1; return b }(), off},
	} {
		if _, _, err := decodeRecord(tc.b, seq, tc.off); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decodeRecord = %v, want ErrCorrupt", tc.name, err)
		}
	}
}
