package journal

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/strata-log/strata/vfs"
)

// FuzzReplay gives Replay two arbitrary journal files. It must not panic;
// every record it returns must read back identically with Read; and a
// second restart must find nothing to repair and return the same records
// and corruption: repairs are idempotent.
func FuzzReplay(f *testing.F) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(f, testOptions(fsys))
	for i := range 14 {
		mustAppend(f, j, addRecord(1, uint64(i), 60*i))
	}
	mustAppend(f, j, Record{Type: TypeFence, LedgerID: 1})
	mustClose(f, j)
	// Seeds from real files, renumbered 1 and 2 (the fuzz target's names).
	files := j.Files()
	if len(files) < 2 {
		f.Fatalf("files %+v: want a rotation", files)
	}
	one := readFile(f, fsys, filePath(files[0].Seq))
	two := readFile(f, fsys, filePath(files[1].Seq))
	if files[0].Seq != 1 || files[1].Seq != 2 {
		f.Fatalf("files %+v: want 1 and 2", files)
	}
	f.Add(one, two)
	f.Add(one[:len(one)-7], []byte{})
	f.Add(append(bytes.Clone(one), make([]byte, 300)...), two)
	bad := bytes.Clone(one)
	bad[100] ^= 1
	f.Add(bad, two)
	f.Add([]byte{}, two)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		fsys := vfs.NewMem()
		must(t, fsys.MkdirAll(testDir))
		writeFile(t, fsys, filePath(1), a)
		writeFile(t, fsys, filePath(2), b)
		j, err := Open(testOptions(fsys))
		if err != nil {
			return // a misplaced or future-version header
		}
		first, res1 := replayAll(t, j, Position{})
		for _, r := range first {
			got, err := j.Read(r.loc)
			if err != nil || !reflect.DeepEqual(got, normalise(r.rec)) {
				t.Fatalf("Read(%+v) = %+v, %v; Replay gave %+v", r.loc, got, err, r.rec)
			}
		}
		mustClose(t, j)
		j, second, res2 := openReplayed(t, testOptions(fsys))
		defer mustClose(t, j)
		if res2.TruncatedBytes != 0 || !reflect.DeepEqual(res1.Corrupt, res2.Corrupt) || !reflect.DeepEqual(first, second) {
			t.Fatalf("second replay differs:\nfirst  %+v %v\nsecond %+v %v", res1, first, res2, second)
		}
		if _, err := j.Read(Location{File: 1, Offset: FileHeaderSize, Length: RecordHeaderSize}); err != nil &&
			!errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound) {
			t.Fatalf("Read: %v", err)
		}
	})
}
