package journal

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/vfs"
)

func filePath(seq uint64) string { return testDir + "/" + fileName(seq) }

// damage rewrites file seq with fn applied to its bytes.
func damage(t *testing.T, fsys vfs.FS, seq uint64, fn func(b []byte) []byte) {
	t.Helper()
	writeFile(t, fsys, filePath(seq), fn(readFile(t, fsys, filePath(seq))))
}

// appendEach appends n records, each its own group, and returns their
// locations.
func appendEach(t *testing.T, j *Journal, n, size int) []Location {
	t.Helper()
	var locs []Location
	for i := range n {
		locs = append(locs, mustAppend(t, j, addRecord(1, uint64(i), size)))
	}
	return locs
}

// appendGroup appends recs so that they are written as one group: it holds
// the writer in the sync of a first record while recs queue. It returns the
// first record's location and theirs.
func appendGroup(t *testing.T, j *Journal, fsys *vfs.MemFS, recs []Record) (Location, []Location) {
	t.Helper()
	inSync, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpSync {
			once.Do(func() { close(inSync); <-release })
		}
		return nil
	})
	defer fsys.InjectError(nil)
	locs := make([]Location, len(recs)+1)
	var wg sync.WaitGroup
	add := func(i int, rec Record) {
		wg.Add(1)
		must(t, j.Append(context.Background(), rec, func(loc Location, err error) {
			if err != nil {
				t.Error(err)
			}
			locs[i] = loc
			wg.Done()
		}))
	}
	add(0, addRecord(2, 0, 10))
	<-inSync
	for i, rec := range recs {
		add(i+1, rec)
	}
	close(release)
	wg.Wait()
	return locs[0], locs[1:]
}

func entries(recs []replayed) []uint64 {
	var out []uint64
	for _, r := range recs {
		out = append(out, r.rec.EntryID)
	}
	return out
}

func without(locs []Location, skip ...int) []uint64 {
	var out []uint64
	for i := range locs {
		if !slices.Contains(skip, i) {
			out = append(out, uint64(i))
		}
	}
	return out
}

// TestCorruptMiddleRecord damages one record among later valid ones in
// several ways: each is reported, skipped, and never served.
func TestCorruptMiddleRecord(t *testing.T) {
	const victim = 5
	for _, tc := range []struct {
		name string
		fn   func(rec []byte)
	}{
		{"payload bit", func(rec []byte) { rec[RecordHeaderSize+7] ^= 0x08 }},
		{"header checksum", func(rec []byte) { rec[2] ^= 0x01 }},
		{"length", func(rec []byte) { rec[6] ^= 0x40 }},
		{"type", func(rec []byte) { rec[16] = 3 }},
		{"ledger id", func(rec []byte) { rec[21] ^= 0x01 }},
		{"zeroed", func(rec []byte) { clear(rec) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			j, _, _ := openReplayed(t, testOptions(fsys))
			locs := appendEach(t, j, 20, 100)
			mustClose(t, j)
			bad := locs[victim]
			damage(t, fsys, bad.File, func(b []byte) []byte {
				tc.fn(b[bad.Offset : bad.Offset+int64(bad.Length)])
				return b
			})

			j, recs, res := openReplayed(t, testOptions(fsys))
			defer mustClose(t, j)
			want := []CorruptRange{{File: bad.File, Offset: bad.Offset, Length: int64(bad.Length)}}
			if !reflect.DeepEqual(res.Corrupt, want) || res.TruncatedBytes != 0 {
				t.Fatalf("Corrupt %+v truncated %d, want %+v and 0", res.Corrupt, res.TruncatedBytes, want)
			}
			if got := entries(recs); !reflect.DeepEqual(got, without(locs, victim)) {
				t.Fatalf("replayed entries %v", got)
			}
			if _, err := j.Read(bad); !errors.Is(err, ErrCorrupt) || !corruption.Is(err) {
				t.Fatalf("Read of the damaged record: %v, want ErrCorrupt, marked as corruption", err)
			}
			for i, loc := range locs {
				if i == victim {
					continue
				}
				if rec, err := j.Read(loc); err != nil || rec.EntryID != uint64(i) {
					t.Fatalf("Read(%+v) = %+v, %v", loc, rec, err)
				}
			}
		})
	}
}

// TestDamageInsideAGroup checks the line between a torn tail and
// corruption: damage inside the last group (written, maybe not synced at
// the crash) is cut; the same damage with a later group after it is
// corruption.
func TestDamageInsideAGroup(t *testing.T) {
	for _, last := range []bool{true, false} {
		name := map[bool]string{true: "last group: torn", false: "earlier group: corrupt"}[last]
		t.Run(name, func(t *testing.T) {
			fsys := vfs.NewMem()
			opts := testOptions(fsys)
			opts.MaxFileBytes = 1 << 20
			j, _, _ := openReplayed(t, opts)
			before := mustAppend(t, j, addRecord(1, 100, 50))
			var group []Record
			for i := range 4 {
				group = append(group, addRecord(1, uint64(i), 50))
			}
			_, locs := appendGroup(t, j, fsys, group)
			if locs[3].Offset != locs[0].Offset+3*int64(locs[0].Length) {
				t.Fatalf("records not in one group: %+v", locs)
			}
			var after Location
			if !last {
				after = mustAppend(t, j, addRecord(1, 200, 50))
			}
			mustClose(t, j)
			// A hole over record 1 of the group, as out-of-order
			// write-back leaves.
			hole := locs[1]
			damage(t, fsys, hole.File, func(b []byte) []byte {
				clear(b[hole.Offset+10 : hole.Offset+30])
				return b
			})
			size := int64(len(readFile(t, fsys, filePath(hole.File))))

			j, recs, res := openReplayed(t, opts)
			defer mustClose(t, j)
			got := entries(recs)
			if last {
				if len(res.Corrupt) != 0 || res.TruncatedBytes != size-hole.Offset {
					t.Fatalf("Corrupt %+v truncated %d, want none and %d", res.Corrupt, res.TruncatedBytes, size-hole.Offset)
				}
				if want := []uint64{100, 0, 0}; !reflect.DeepEqual(got, want) {
					t.Fatalf("replayed %v, want %v", got, want)
				}
				if n := len(readFile(t, fsys, filePath(hole.File))); int64(n) != hole.Offset {
					t.Fatalf("file is %d bytes after the cut, want %d", n, hole.Offset)
				}
				return
			}
			want := []CorruptRange{{File: hole.File, Offset: hole.Offset, Length: int64(hole.Length)}}
			if !reflect.DeepEqual(res.Corrupt, want) || res.TruncatedBytes != 0 {
				t.Fatalf("Corrupt %+v truncated %d, want %+v", res.Corrupt, res.TruncatedBytes, want)
			}
			if want := []uint64{100, 0, 0, 2, 3, 200}; !reflect.DeepEqual(got, want) {
				t.Fatalf("replayed %v, want %v", got, want)
			}
			if recs[len(recs)-1].loc != after || recs[0].loc != before {
				t.Fatalf("locations %+v", recs)
			}
		})
	}
}

// TestTornTail damages the end of the last file in the ways a crash can:
// the tail is cut, counted, everything before it kept, and a second restart
// finds nothing to repair.
func TestTornTail(t *testing.T) {
	garbage := []byte("\x11\x22garbage that is not a record at all, long enough to hold a header")
	for _, tc := range []struct {
		name string
		fn   func(b []byte, last Location) []byte
		keep int // records kept of 10
		cut  func(b []byte, last Location) int64
	}{
		{"cut mid-record", func(b []byte, last Location) []byte { return b[:last.Offset+20] }, 9,
			func(b []byte, last Location) int64 { return 20 }},
		{"cut mid-header", func(b []byte, last Location) []byte { return b[:last.Offset+5] }, 9,
			func(b []byte, last Location) int64 { return 5 }},
		{"zero-filled tail (preallocated space)", func(b []byte, _ Location) []byte { return append(b, make([]byte, 4096)...) }, 10,
			func([]byte, Location) int64 { return 4096 }},
		{"garbage tail", func(b []byte, _ Location) []byte { return append(b, garbage...) }, 10,
			func([]byte, Location) int64 { return int64(len(garbage)) }},
		// The cut takes the record and its group's pad.
		{"last record garbled", func(b []byte, last Location) []byte { b[last.Offset+50] ^= 1; return b }, 9,
			func(b []byte, last Location) int64 { return int64(len(b)) - last.Offset }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			opts := testOptions(fsys)
			opts.MaxFileBytes = 1 << 20
			j, _, _ := openReplayed(t, opts)
			locs := appendEach(t, j, 10, 100)
			mustClose(t, j)
			last := locs[9]
			var cut int64
			damage(t, fsys, last.File, func(b []byte) []byte {
				cut = tc.cut(b, last)
				return tc.fn(b, last)
			})

			j, recs, res := openReplayed(t, opts)
			if len(res.Corrupt) != 0 || res.TruncatedBytes != cut {
				t.Fatalf("Corrupt %+v truncated %d, want none and %d", res.Corrupt, res.TruncatedBytes, cut)
			}
			if len(recs) != tc.keep {
				t.Fatalf("replayed %d records, want %d", len(recs), tc.keep)
			}
			mustAppend(t, j, addRecord(1, 50, 10))
			mustClose(t, j)
			j, recs, res = openReplayed(t, opts)
			defer mustClose(t, j)
			if len(res.Corrupt) != 0 || res.TruncatedBytes != 0 || len(recs) != tc.keep+1 {
				t.Fatalf("second restart: %d records, %+v", len(recs), res)
			}
		})
	}
}

// TestCorruptEndOfEarlierFile: damage at the end of a file that later files
// follow is corruption, not a tail to cut.
func TestCorruptEndOfEarlierFile(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	locs := appendEach(t, j, 40, 200) // several 4 KiB files
	mustClose(t, j)
	first := locs[0].File
	size := int64(len(readFile(t, fsys, filePath(first))))
	damage(t, fsys, first, func(b []byte) []byte { return append(b, "junk bytes here"...) })
	j, recs, res := openReplayed(t, testOptions(fsys))
	defer mustClose(t, j)
	want := []CorruptRange{{File: first, Offset: size, Length: 15}}
	if !reflect.DeepEqual(res.Corrupt, want) || res.TruncatedBytes != 0 || len(recs) != 40 {
		t.Fatalf("Corrupt %+v truncated %d records %d, want %+v, 0, 40", res.Corrupt, res.TruncatedBytes, len(recs), want)
	}
}

func TestDamagedFileHeader(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	locs := appendEach(t, j, 40, 200)
	mustClose(t, j)
	first := locs[0].File
	damage(t, fsys, first, func(b []byte) []byte { b[14] ^= 1; return b }) // the sequence number
	j, recs, res := openReplayed(t, testOptions(fsys))
	defer mustClose(t, j)
	want := []CorruptRange{{File: first, Offset: 0, Length: FileHeaderSize}}
	if !reflect.DeepEqual(res.Corrupt, want) || len(recs) != 40 {
		t.Fatalf("Corrupt %+v, %d records; want %+v and all 40", res.Corrupt, len(recs), want)
	}
}

// TestInterruptedFileCreation: a last file whose header never became
// durable is removed, not reported.
func TestInterruptedFileCreation(t *testing.T) {
	for _, content := range [][]byte{nil, appendFileHeader(nil, 9, versionAligned)[:10], make([]byte, 100)} {
		fsys := vfs.NewMem()
		j, _, _ := openReplayed(t, testOptions(fsys))
		appendEach(t, j, 3, 10)
		mustClose(t, j)
		next := j.Position().File + 1
		writeFile(t, fsys, filePath(next), content)

		j, recs, res := openReplayed(t, testOptions(fsys))
		if len(res.Corrupt) != 0 || res.TruncatedBytes != int64(len(content)) || len(recs) != 3 {
			t.Fatalf("%d-byte file: %d records, %+v", len(content), len(recs), res)
		}
		for _, f := range j.Files() {
			if f.Seq == next {
				t.Fatalf("file %d still listed", next)
			}
		}
		if _, err := fsys.Stat(filePath(next)); err == nil {
			t.Fatal("the incomplete file is still there")
		}
		if got := j.Position().File; got != next+1 {
			t.Fatalf("new file %d, want %d", got, next+1)
		}
		mustClose(t, j)
	}
}

// TestReplayFrom covers positions that are not record boundaries: they
// must not make Replay cut valid records.
func TestReplayFrom(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	locs := appendEach(t, j, 40, 200)
	mustClose(t, j)
	file := locs[3].File
	size := int64(len(readFile(t, fsys, filePath(file))))

	j = mustOpen(t, testOptions(fsys))
	recs, res := replayAll(t, j, Position{File: file, Offset: locs[3].Offset + 5})
	mustClose(t, j)
	if len(res.Corrupt) != 0 || res.TruncatedBytes != 0 || recs[0].loc != locs[4] || len(recs) != 36 {
		t.Fatalf("from mid-record: first %+v, %d records, %+v", recs[0].loc, len(recs), res)
	}

	j = mustOpen(t, testOptions(fsys))
	defer mustClose(t, j)
	_, res = replayAll(t, j, Position{File: file, Offset: size + 100})
	if want := []CorruptRange{{File: file, Offset: size, Length: 100}}; !reflect.DeepEqual(res.Corrupt, want) {
		t.Fatalf("from past the end of a file: %+v, want %+v", res.Corrupt, want)
	}
}

// TestReplayCallbackError: an error from fn stops Replay, repairs nothing,
// and Replay can run again.
func TestReplayCallbackError(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	appendEach(t, j, 5, 10)
	mustClose(t, j)
	j = mustOpen(t, testOptions(fsys))
	defer mustClose(t, j)
	stop := errors.New("stop")
	if _, err := j.Replay(Position{}, func(Record, Location) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Replay: %v", err)
	}
	if err := j.Append(context.Background(), addRecord(1, 1, 1), func(Location, error) {}); !errors.Is(err, ErrNotReplayed) {
		t.Fatalf("Append after a failed Replay: %v", err)
	}
	if recs, _ := replayAll(t, j, Position{}); len(recs) != 5 {
		t.Fatalf("second Replay: %d records", len(recs))
	}
}
