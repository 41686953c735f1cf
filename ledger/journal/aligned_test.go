package journal

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"github.com/strata-log/strata/vfs"
)

// walked is one record found by walking a file from its header.
type walked struct {
	off int64
	rh  recordHeader
}

// walkFile decodes every record of file b (sequence seq) from the header on,
// pads included; it fails the test on anything that does not decode.
func walkFile(t *testing.T, b []byte, seq uint64) (uint32, []walked) {
	t.Helper()
	fseq, version, ok := decodeFileHeader(b)
	if !ok || fseq != seq {
		t.Fatalf("file %d: header %x", seq, b[:min(len(b), FileHeaderSize)])
	}
	var out []walked
	for off := int64(FileHeaderSize); off < int64(len(b)); {
		_, rh, err := decodeRecord(b[off:], seq, off)
		if err != nil {
			t.Fatalf("file %d offset %d: %v", seq, off, err)
		}
		out = append(out, walked{off, rh})
		off += int64(rh.length)
	}
	return version, out
}

// TestAlignedLayout checks invariant 6 on every file the journal writes:
// version 2, the header padded to 4 KiB, every group starting on a 4 KiB
// boundary and ending, with a pad when needed, on one; a pad is the last
// record of its group. (MemFS's direct files also refuse any unaligned
// write, so every test on MemFS checks the writes themselves.)
func TestAlignedLayout(t *testing.T) {
	fsys := vfs.NewMem()
	opts := testOptions(fsys)
	opts.MaxFileBytes = 64 << 10
	j, _, _ := openReplayed(t, opts)
	if !j.DirectIO() {
		t.Fatal("MemFS supports direct I/O, the journal says it does not use it")
	}
	// Groups ending at every distance from a boundary around the record
	// header size, where the pad must reach the boundary after next.
	var appended int
	for _, size := range []int{0, 1, 4096 - 2*RecordHeaderSize, 4096 - 2*RecordHeaderSize - 1, 4096 - 2*RecordHeaderSize + 1,
		4096 - RecordHeaderSize - 30, 4096 - RecordHeaderSize, 5000, 9000} {
		mustAppend(t, j, addRecord(1, uint64(size), size))
		appended++
	}
	var group []Record
	for i := range 5 {
		group = append(group, addRecord(2, uint64(i), 700))
	}
	appendGroup(t, j, fsys, group)
	appended += 6
	appendGroup(t, j, fsys, []Record{{Type: TypeFence, LedgerID: 3}, {Type: TypeLAC, LedgerID: 3, LAC: 1}})
	appended += 3
	mustClose(t, j)

	var records int
	for _, f := range j.Files() {
		b := readFile(t, fsys, filePath(f.Seq))
		version, recs := walkFile(t, b, f.Seq)
		if version != versionAligned || len(b)%alignBytes != 0 {
			t.Fatalf("file %d: version %d, %d bytes", f.Seq, version, len(b))
		}
		if recs[0].rh.typ != TypePad || recs[0].off+int64(recs[0].rh.length) != alignBytes {
			t.Fatalf("file %d: header not padded to %d: %+v", f.Seq, alignBytes, recs[0])
		}
		for i, r := range recs {
			group := r.off - int64(r.rh.groupOffset)
			end := r.off + int64(r.rh.length)
			last := i == len(recs)-1 || recs[i+1].rh.groupOffset == 0
			switch {
			case i > 0 && group%alignBytes != 0:
				t.Fatalf("file %d: group at %d is not aligned", f.Seq, group)
			case last && end%alignBytes != 0:
				t.Fatalf("file %d: group ends at %d, not on a boundary", f.Seq, end)
			case r.rh.typ == TypePad && !last:
				t.Fatalf("file %d: pad at %d is not the last record of its group", f.Seq, r.off)
			case r.rh.typ != TypePad:
				records++
			}
		}
	}
	if records != appended {
		t.Fatalf("walked %d records, appended %d", records, appended)
	}
	j, recs, res := openReplayed(t, opts)
	defer mustClose(t, j)
	if len(recs) != appended || res.TruncatedBytes != 0 || len(res.Corrupt) != 0 {
		t.Fatalf("replayed %d records, %+v", len(recs), res)
	}
}

// lastGroupPad appends n records one group each and returns the location
// of the last one's pad.
func lastGroupPad(t *testing.T, j *Journal, n int) ([]Location, Location) {
	t.Helper()
	locs := appendEach(t, j, n, 100)
	last := locs[len(locs)-1]
	off := last.Offset + int64(last.Length)
	return locs, Location{File: last.File, Offset: off, Length: uint32(padLength(off))}
}

// TestTornPad: a pad belongs to its group (its group offset says so), so
// damage to the last group's pad is a torn tail: cut, not corruption, and
// the group's intact records stay (invariants 3, 4).
func TestTornPad(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(b []byte, pad Location) []byte
	}{
		{"cut mid-pad", func(b []byte, pad Location) []byte { return b[:pad.Offset+100] }},
		{"pad header cut", func(b []byte, pad Location) []byte { return b[:pad.Offset+10] }},
		{"pad payload flipped", func(b []byte, pad Location) []byte { b[pad.Offset+500] ^= 1; return b }},
		{"pad header zeroed", func(b []byte, pad Location) []byte { clear(b[pad.Offset : pad.Offset+RecordHeaderSize]); return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			opts := testOptions(fsys)
			opts.MaxFileBytes = 1 << 20
			j, _, _ := openReplayed(t, opts)
			_, pad := lastGroupPad(t, j, 5)
			mustClose(t, j)
			var size int64
			damage(t, fsys, pad.File, func(b []byte) []byte {
				b = tc.fn(b, pad)
				size = int64(len(b))
				return b
			})
			j, recs, res := openReplayed(t, opts)
			if len(res.Corrupt) != 0 || res.TruncatedBytes != size-pad.Offset || len(recs) != 5 {
				t.Fatalf("%d records, %+v; want 5, none corrupt, %d bytes cut", len(recs), res, size-pad.Offset)
			}
			mustClose(t, j)
			j, recs, res = openReplayed(t, opts)
			defer mustClose(t, j)
			if len(res.Corrupt) != 0 || res.TruncatedBytes != 0 || len(recs) != 5 {
				t.Fatalf("second restart: %d records, %+v", len(recs), res)
			}
		})
	}
}

// TestCorruptPad: damage to the pad of a synced group (a later group
// exists) is corruption like any other: reported, and the records around
// it are still replayed and read.
func TestCorruptPad(t *testing.T) {
	fsys := vfs.NewMem()
	opts := testOptions(fsys)
	opts.MaxFileBytes = 1 << 20
	j, _, _ := openReplayed(t, opts)
	locs, pad := lastGroupPad(t, j, 3)
	locs = append(locs, appendEach(t, j, 2, 100)...)
	mustClose(t, j)
	damage(t, fsys, pad.File, func(b []byte) []byte { b[pad.Offset+RecordHeaderSize+7] ^= 0x20; return b })

	j, recs, res := openReplayed(t, opts)
	defer mustClose(t, j)
	want := []CorruptRange{{File: pad.File, Offset: pad.Offset, Length: int64(pad.Length)}}
	if !reflect.DeepEqual(res.Corrupt, want) || res.TruncatedBytes != 0 || len(recs) != 5 {
		t.Fatalf("%d records, %+v; want all 5 and corrupt %+v", len(recs), res, want)
	}
	for _, loc := range locs {
		if _, err := j.Read(loc); err != nil {
			t.Fatalf("Read(%+v): %v", loc, err)
		}
	}
	if _, err := j.Read(pad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read of the damaged pad: %v", err)
	}
}

// copyFixture copies the files of testdata/dir into a MemFS journal dir.
func copyFixture(t *testing.T, fsys vfs.FS, dir string) {
	t.Helper()
	must(t, fsys.MkdirAll(testDir))
	names, err := filepath.Glob(filepath.Join("testdata", dir, "*.journal"))
	must(t, err)
	if len(names) == 0 {
		t.Fatal("no fixture files")
	}
	for _, name := range names {
		b, err := os.ReadFile(name)
		must(t, err)
		writeFile(t, fsys, filepath.Join(testDir, filepath.Base(name)), b)
	}
}

// formatReplayed renders records as testdata/v1/records.txt lists them.
func formatReplayed(recs []replayed) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d %d %d %v %d %d %d %t %d %08x", r.loc.File, r.loc.Offset, r.loc.Length, r.rec.Type,
			r.rec.LedgerID, r.rec.EntryID, r.rec.LAC, r.rec.Recovery, len(r.rec.Payload), crc32.Checksum(r.rec.Payload, castagnoli)))
	}
	return out
}

func readLines(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(name)
	must(t, err)
	defer f.Close()
	var lines []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	return lines
}

// TestReplayVersion1 replays testdata/v1, written by the journal before the
// aligned layout (format version 1: records back to back, a multi-record
// group, every record type, a rotation), and expects the records and
// locations that build replayed (records.txt). Appends then go to a new,
// aligned file, and a restart replays both versions.
func TestReplayVersion1(t *testing.T) {
	fsys := vfs.NewMem()
	copyFixture(t, fsys, "v1")
	want := readLines(t, filepath.Join("testdata", "v1", "records.txt"))
	j, recs, res := openReplayed(t, testOptions(fsys))
	if got := formatReplayed(recs); !reflect.DeepEqual(got, want) || res.TruncatedBytes != 0 || len(res.Corrupt) != 0 {
		t.Fatalf("replayed\n%s\n%+v\nwant\n%s", strings.Join(got, "\n"), res, strings.Join(want, "\n"))
	}
	for _, r := range recs {
		if got, err := j.Read(r.loc); err != nil || !reflect.DeepEqual(got, r.rec) {
			t.Fatalf("Read(%+v) = %+v, %v", r.loc, got, err)
		}
	}
	loc := mustAppend(t, j, addRecord(9, 9, 100))
	mustClose(t, j)
	if version, _ := walkFile(t, readFile(t, fsys, filePath(loc.File)), loc.File); version != versionAligned || loc.Offset != alignBytes {
		t.Fatalf("new file: version %d, first record at %d", version, loc.Offset)
	}
	j, recs, res = openReplayed(t, testOptions(fsys))
	defer mustClose(t, j)
	if got := formatReplayed(recs); !reflect.DeepEqual(got[:len(want)], want) || len(got) != len(want)+1 ||
		recs[len(want)].loc != loc || res.TruncatedBytes != 0 || len(res.Corrupt) != 0 {
		t.Fatalf("second replay: %d records (want %d), %+v", len(got), len(want)+1, res)
	}
}

// TestBufferedWrites: with Options.BufferedWrites the journal writes
// version 1 exactly as before (records back to back from the header), so
// builds before the aligned layout can read it; its files mix with aligned
// ones in either order.
func TestBufferedWrites(t *testing.T) {
	fsys := vfs.NewMem()
	packed := testOptions(fsys)
	packed.BufferedWrites = true
	j, _, _ := openReplayed(t, packed)
	if j.DirectIO() {
		t.Fatal("DirectIO with BufferedWrites")
	}
	a := mustAppend(t, j, addRecord(1, 1, 100))
	b := mustAppend(t, j, addRecord(1, 2, 100))
	if a.Offset != FileHeaderSize || b.Offset != a.Offset+int64(a.Length) {
		t.Fatalf("locations %+v %+v: want records back to back from the header", a, b)
	}
	mustClose(t, j)
	version, recs := walkFile(t, readFile(t, fsys, filePath(a.File)), a.File)
	if version != versionPacked || len(recs) != 2 {
		t.Fatalf("version %d, %d records", version, len(recs))
	}
	j, _, _ = openReplayed(t, testOptions(fsys)) // aligned
	c := mustAppend(t, j, addRecord(1, 3, 100))
	mustClose(t, j)
	j, _, _ = openReplayed(t, packed)
	d := mustAppend(t, j, addRecord(1, 4, 100))
	mustClose(t, j)
	j, got, res := openReplayed(t, packed)
	defer mustClose(t, j)
	var locs []Location
	for _, r := range got {
		locs = append(locs, r.loc)
	}
	if want := []Location{a, b, c, d}; !reflect.DeepEqual(locs, want) || res.TruncatedBytes != 0 || len(res.Corrupt) != 0 {
		t.Fatalf("replayed at %+v, %+v; want %+v", locs, res, want)
	}
}

// TestDirectWriteRefused: a file system that opens with O_DIRECT but
// refuses the direct write (EINVAL) gets the file made again for buffered
// writes, in the same aligned layout, and DirectIO says so.
func TestDirectWriteRefused(t *testing.T) {
	fsys := vfs.NewMem()
	refused := false
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpWrite && !refused {
			refused = true
			return syscall.EINVAL
		}
		return nil
	})
	j, _, _ := openReplayed(t, testOptions(fsys))
	if j.DirectIO() {
		t.Fatal("DirectIO after a refused direct write")
	}
	locs := appendEach(t, j, 10, 1000) // rotates
	mustClose(t, j)
	j, recs, res := openReplayed(t, testOptions(fsys))
	defer mustClose(t, j)
	if len(recs) != len(locs) || len(res.Corrupt) != 0 || res.TruncatedBytes != 0 {
		t.Fatalf("replayed %d records, %+v", len(recs), res)
	}
	for _, f := range j.Files() {
		if version, _ := walkFile(t, readFile(t, fsys, filePath(f.Seq)), f.Seq); version != versionAligned {
			t.Fatalf("file %d: version %d", f.Seq, version)
		}
	}
}

// TestDirectReadRefused: a file system that opens for direct reads but
// refuses them (EINVAL) gets the read made again through the page cache,
// and every later read too.
func TestDirectReadRefused(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	defer mustClose(t, j)
	locs := appendEach(t, j, 10, 1000) // rotates
	var refused atomic.Int32
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpRead && refused.Add(1) == 1 {
			return syscall.EINVAL
		}
		return nil
	})
	for _, l := range locs {
		if _, err := j.Read(l); err != nil {
			t.Fatalf("Read(%+v): %v", l, err)
		}
	}
	if refused.Load() != int32(len(locs))+1 {
		t.Fatalf("%d reads for %d records: want one refused and each read once after it", refused.Load(), len(locs))
	}
	if j.directReadsRefused.Load() != true {
		t.Fatal("direct reads still on")
	}
}

// TestDirectIOOnDisk runs the journal on the real file system: each group
// written with O_DIRECT must read back (with O_DIRECT too where the file
// system takes it, through handles opened before the group was written)
// right after its sync, and replay the same after a restart.
func TestDirectIOOnDisk(t *testing.T) {
	opts := Options{Dir: filepath.Join(t.TempDir(), "journal"), MaxFileBytes: 64 << 10}
	j, _, _ := openReplayed(t, opts)
	t.Logf("direct I/O: %v", j.DirectIO())
	var locs []Location
	var want []Record
	for i := range 60 {
		rec := addRecord(1, uint64(i), (i*997)%9000)
		loc, err := appendWait(t, j, rec)
		must(t, err)
		locs, want = append(locs, loc), append(want, normalise(rec))
		for k, l := range locs {
			got, err := j.Read(l)
			if err != nil || !reflect.DeepEqual(got, want[k]) {
				t.Fatalf("after append %d: Read(%+v) = %v, %v", i, l, got.EntryID, err)
			}
		}
	}
	if len(j.Files()) < 3 {
		t.Fatalf("files %+v: want rotations", j.Files())
	}
	mustClose(t, j)
	j, recs, res := openReplayed(t, opts)
	defer mustClose(t, j)
	if len(recs) != len(want) || len(res.Corrupt) != 0 || res.TruncatedBytes != 0 {
		t.Fatalf("replayed %d records, %+v", len(recs), res)
	}
}

// TestReadPooled: ReadPooled returns what Read returns, its payload inside
// held, a buffer of ReadBuffers aligned for direct reads; buffers given
// back and handed out again (to records of other sizes) read correctly;
// a failed read holds nothing.
func TestReadPooled(t *testing.T) {
	opts := Options{Dir: filepath.Join(t.TempDir(), "journal"), MaxFileBytes: 1 << 20}
	j, _, _ := openReplayed(t, opts)
	defer mustClose(t, j)
	var locs []Location
	for i := range 40 {
		loc, err := appendWait(t, j, addRecord(1, uint64(i), (i*7919)%200000))
		must(t, err)
		locs = append(locs, loc)
	}
	for round := range 3 {
		for i, l := range locs {
			want, err := j.Read(l)
			must(t, err)
			got, held, err := j.ReadPooled(l)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: ReadPooled(%+v) = entry %d, %v; want entry %d", round, l, got.EntryID, err, want.EntryID)
			}
			if held == nil {
				t.Fatalf("record %d: nothing held", i)
			}
			start := uintptr(unsafe.Pointer(unsafe.SliceData(*held)))
			if p := uintptr(unsafe.Pointer(unsafe.SliceData(got.Payload))); len(got.Payload) > 0 &&
				(p < start || p+uintptr(len(got.Payload)) > start+uintptr(len(*held))) {
				t.Fatalf("record %d: payload not in the held buffer", i)
			}
			if start%vfs.DirectAlign != 0 {
				t.Fatalf("record %d: held buffer at %#x, not aligned", i, start)
			}
			ReadBuffers.Put(held)
		}
	}
	if _, held, err := j.ReadPooled(Location{File: 999, Offset: FileHeaderSize, Length: RecordHeaderSize}); err == nil || held != nil {
		t.Fatalf("read of an unknown file: err %v, held %v", err, held)
	}
}
