package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/vfs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testDir = "/bookie/journal"

// testOptions are small enough that tests rotate files: a file holds its
// header block and at most three 4 KiB groups.
func testOptions(fsys vfs.FS) Options {
	return Options{FS: fsys, Dir: testDir, MaxFileBytes: 16 << 10, PreallocateBytes: 4 << 10}
}

func mustOpen(t testing.TB, opts Options) *Journal {
	t.Helper()
	j, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// replayed is one record seen by Replay, payload copied.
type replayed struct {
	rec Record
	loc Location
}

func replayAll(t testing.TB, j *Journal, from Position) ([]replayed, ReplayResult) {
	t.Helper()
	var out []replayed
	res, err := j.Replay(from, func(rec Record, loc Location) error {
		if rec.Type == TypePad {
			t.Fatalf("Replay passed a pad at %+v", loc)
		}
		rec.Payload = bytes.Clone(rec.Payload)
		out = append(out, replayed{rec, loc})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != len(out) {
		t.Fatalf("ReplayResult.Records = %d, fn saw %d", res.Records, len(out))
	}
	return out, res
}

// openReplayed opens and replays a journal, returning what Replay saw.
func openReplayed(t testing.TB, opts Options) (*Journal, []replayed, ReplayResult) {
	t.Helper()
	j := mustOpen(t, opts)
	recs, res := replayAll(t, j, Position{})
	return j, recs, res
}

// appendWait appends rec and waits for its completion.
func appendWait(t testing.TB, j *Journal, rec Record) (Location, error) {
	t.Helper()
	type result struct {
		loc Location
		err error
	}
	ch := make(chan result, 1)
	if err := j.Append(context.Background(), rec, func(loc Location, err error) { ch <- result{loc, err} }); err != nil {
		return Location{}, err
	}
	r := <-ch
	return r.loc, r.err
}

func mustAppend(t testing.TB, j *Journal, rec Record) Location {
	t.Helper()
	loc, err := appendWait(t, j, rec)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func addRecord(ledger, entry uint64, size int) Record {
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(entry + uint64(i)*7)
	}
	return Record{Type: TypeAdd, LedgerID: ledger, EntryID: entry, LAC: int64(entry) - 1, Payload: payload}
}

func mustClose(t testing.TB, j *Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAppendReadReplay(t *testing.T) {
	fsys := vfs.NewMem()
	j, recs, res := openReplayed(t, testOptions(fsys))
	if len(recs) != 0 || res.TruncatedBytes != 0 || len(res.Corrupt) != 0 {
		t.Fatalf("fresh journal replayed %v %+v", recs, res)
	}
	if got := j.Position(); got != (Position{File: 1, Offset: alignBytes}) {
		t.Fatalf("Position of a fresh journal = %+v", got)
	}
	var want []replayed
	for i := range 50 {
		var rec Record
		switch i % 4 {
		case 0, 1:
			rec = addRecord(uint64(i%3), uint64(i), i*13)
			rec.Recovery = i%8 == 1
		case 2:
			rec = Record{Type: TypeFence, LedgerID: uint64(i)}
		case 3:
			rec = Record{Type: TypeLAC, LedgerID: uint64(i), LAC: int64(i * 2)}
		}
		if i == 49 {
			rec = Record{Type: TypeDelete, LedgerID: 3}
		}
		loc := mustAppend(t, j, rec)
		// The group of one record ends with its pad (invariant 6).
		if got, end := j.Position(), loc.Offset+int64(loc.Length); got.File != loc.File || got.Offset != end+int64(padLength(end)) {
			t.Fatalf("Position %+v after a record at %+v", got, loc)
		}
		want = append(want, replayed{rec, loc})
	}
	for _, w := range want {
		got, err := j.Read(w.loc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, normalise(w.rec)) {
			t.Fatalf("Read(%+v) = %+v, want %+v", w.loc, got, w.rec)
		}
	}
	files := j.Files()
	if len(files) < 3 {
		t.Fatalf("expected rotations with MaxFileBytes 16 KiB, got files %+v", files)
	}
	for _, f := range files {
		if f.Size > testOptions(nil).MaxFileBytes {
			t.Fatalf("file %+v exceeds MaxFileBytes", f)
		}
	}
	mustClose(t, j)

	j, got, res := openReplayed(t, testOptions(fsys))
	if res.TruncatedBytes != 0 || len(res.Corrupt) != 0 {
		t.Fatalf("clean reopen: %+v", res)
	}
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i].rec, normalise(want[i].rec)) || got[i].loc != want[i].loc {
			t.Fatalf("record %d: replayed %+v at %+v, want %+v at %+v", i, got[i].rec, got[i].loc, want[i].rec, want[i].loc)
		}
	}
	// After a restart appends go to a new file.
	last := want[len(want)-1].loc.File
	if loc := mustAppend(t, j, addRecord(1, 1, 10)); loc.File != last+1 || loc.Offset != alignBytes {
		t.Fatalf("first append after restart at %+v, want the start of file %d", loc, last+1)
	}
	mustClose(t, j)
	// Replay from a position skips what is before it.
	from := Position{File: want[10].loc.File, Offset: want[10].loc.Offset}
	j = mustOpen(t, testOptions(fsys))
	defer mustClose(t, j)
	recs, _ = replayAll(t, j, from)
	if len(recs) != len(want)-10+1 || recs[0].loc != want[10].loc {
		t.Fatalf("replay from %+v returned %d records starting at %+v", from, len(recs), recs[0].loc)
	}
}

// normalise maps an empty payload to nil, as decoding does.
func normalise(rec Record) Record {
	if len(rec.Payload) == 0 {
		rec.Payload = nil
	}
	return rec
}

func TestAppendErrors(t *testing.T) {
	fsys := vfs.NewMem()
	j := mustOpen(t, testOptions(fsys))
	if _, err := appendWait(t, j, addRecord(1, 1, 1)); !errors.Is(err, ErrNotReplayed) {
		t.Fatalf("Append before Replay: %v", err)
	}
	replayAll(t, j, Position{})
	if _, err := j.Replay(Position{}, nil); err == nil {
		t.Fatal("second Replay succeeded")
	}
	for _, tc := range []struct {
		rec  Record
		want error
	}{
		{Record{Type: 9}, ErrInvalidRecord},
		{Record{Type: TypeFence, EntryID: 3}, ErrInvalidRecord},
		{Record{Type: TypeAdd, Payload: make([]byte, MaxPayloadBytes+1)}, ErrTooLarge},
	} {
		if err := j.Append(context.Background(), tc.rec, func(Location, error) { t.Error("done called") }); !errors.Is(err, tc.want) {
			t.Errorf("Append(%v): %v, want %v", tc.rec.Type, err, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := j.Append(ctx, addRecord(1, 1, 1), func(Location, error) { t.Error("done called") }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a cancelled context: %v", err)
	}
	mustClose(t, j)
	if err := j.Append(context.Background(), addRecord(1, 1, 1), func(Location, error) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if _, err := j.Read(Location{File: 1, Offset: FileHeaderSize, Length: 50}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if err := j.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// TestGroupCommit holds the writer inside a sync while records queue up,
// then checks that they are written as one group with one sync, acked in
// order.
func TestGroupCommit(t *testing.T) {
	fsys := vfs.NewMem()
	opts := testOptions(fsys)
	opts.MaxFileBytes = 1 << 20
	type group struct{ bytes, records int }
	var mu sync.Mutex
	var groups []group
	opts.OnGroupCommit = func(b, n int, _ time.Duration) {
		mu.Lock()
		groups = append(groups, group{b, n})
		mu.Unlock()
	}
	j, _, _ := openReplayed(t, opts)
	defer mustClose(t, j)

	inSync, release := make(chan struct{}), make(chan struct{})
	var syncs int
	var once sync.Once
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpSync {
			once.Do(func() { close(inSync); <-release })
			syncs++ // only the writer syncs
		}
		return nil
	})
	var order []int
	var orderMu sync.Mutex
	done := make(chan struct{}, 11)
	appendN := func(i int) {
		rec := addRecord(1, uint64(i), 100)
		if err := j.Append(context.Background(), rec, func(_ Location, err error) {
			if err != nil {
				t.Error(err)
			}
			orderMu.Lock()
			order = append(order, i)
			orderMu.Unlock()
			done <- struct{}{}
		}); err != nil {
			t.Fatal(err)
		}
	}
	appendN(0)
	<-inSync // the writer is syncing record 0; queue 10 more
	for i := 1; i <= 10; i++ {
		appendN(i)
	}
	close(release)
	for range 11 {
		<-done
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !reflect.DeepEqual(order, want) {
		t.Fatalf("ack order %v", order)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []group{{144, 1}, {1440, 10}}; !reflect.DeepEqual(groups, want) || syncs != 2 {
		t.Fatalf("groups %v with %d syncs, want %v with 2", groups, syncs, want)
	}
}

// TestBackPressure fills the queue while the writer is held, and checks
// that Append then waits, honours its context, and resumes when space
// frees.
func TestBackPressure(t *testing.T) {
	fsys := vfs.NewMem()
	opts := testOptions(fsys)
	opts.MaxQueueBytes = 1000
	opts.MaxFileBytes = 1 << 20
	j, _, _ := openReplayed(t, opts)
	defer mustClose(t, j)

	inSync, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpSync {
			once.Do(func() { close(inSync); <-release })
		}
		return nil
	})
	var wg sync.WaitGroup
	appendAsync := func(rec Record) error {
		wg.Add(1)
		err := j.Append(context.Background(), rec, func(_ Location, err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
		if err != nil {
			wg.Done()
		}
		return err
	}
	must(t, appendAsync(addRecord(1, 0, 400))) // 444 bytes, being synced
	<-inSync
	must(t, appendAsync(addRecord(1, 1, 400))) // 888 queued
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := j.Append(ctx, addRecord(1, 2, 400), func(Location, error) { t.Error("done called") }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append into a full queue: %v, want DeadlineExceeded", err)
	}
	blocked := make(chan error, 1)
	go func() { blocked <- appendAsync(addRecord(1, 3, 400)) }()
	select {
	case err := <-blocked:
		t.Fatalf("Append into a full queue returned %v", err)
	default:
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// A record larger than the queue is accepted when nothing is pending.
	mustAppend(t, j, addRecord(1, 4, 5000))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCloseDrainsQueue(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	var acked sync.WaitGroup
	var mu sync.Mutex
	var locs []Location
	for i := range 100 {
		acked.Add(1)
		must(t, j.Append(context.Background(), addRecord(1, uint64(i), 10), func(loc Location, err error) {
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			locs = append(locs, loc)
			mu.Unlock()
			acked.Done()
		}))
	}
	mustClose(t, j)
	acked.Wait() // Close returned: every done has run
	if len(locs) != 100 {
		t.Fatalf("%d acks", len(locs))
	}
	// Everything acked survives a crash right after Close.
	crashed := fsys.Crash(vfs.CrashOptions{})
	j, recs, _ := openReplayed(t, testOptions(crashed))
	defer mustClose(t, j)
	if len(recs) != 100 {
		t.Fatalf("replayed %d records after close + crash", len(recs))
	}
}

func TestRemoveFile(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	var locs []Location
	for i := range 30 {
		locs = append(locs, mustAppend(t, j, addRecord(1, uint64(i), 300)))
	}
	files := j.Files()
	first, current := files[0].Seq, j.Position().File
	if _, err := j.Read(locs[0]); err != nil { // caches a read handle
		t.Fatal(err)
	}
	must(t, j.RemoveFile(context.Background(), first, nil))
	if err := j.RemoveFile(context.Background(), first, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second RemoveFile: %v", err)
	}
	if err := j.RemoveFile(context.Background(), current, nil); !errors.Is(err, ErrFileInUse) {
		t.Fatalf("RemoveFile(current): %v", err)
	}
	if _, err := j.Read(locs[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read from a removed file: %v", err)
	}
	if got := j.Files(); len(got) != len(files)-1 || got[0].Seq == first {
		t.Fatalf("Files after removal: %+v", got)
	}
	mustClose(t, j)
	// The removal was synced: it survives a crash.
	j, recs, _ := openReplayed(t, testOptions(fsys.Crash(vfs.CrashOptions{})))
	defer mustClose(t, j)
	for _, r := range recs {
		if r.loc.File == first {
			t.Fatalf("record from removed file %d replayed", first)
		}
	}
}

// TestRemoveFileInSteps: RemoveFile renames the file out of the journal,
// cuts it RemoveStepBytes at a time with a sync after each cut, then
// unlinks it; a removal cut short by a crash is finished by Open, and the
// file's records never come back.
func TestRemoveFileInSteps(t *testing.T) {
	fsys := vfs.NewMem()
	opts := testOptions(fsys)
	opts.RemoveStepBytes = 4 << 10
	j, _, _ := openReplayed(t, opts)
	for i := range 90 {
		mustAppend(t, j, addRecord(1, uint64(i), 300))
	}
	files := j.Files()
	if len(files) < 3 {
		t.Fatalf("%d files, want at least 3", len(files))
	}
	var ops []string
	fsys.InjectError(func(op vfs.Op, name string) error {
		ops = append(ops, op.String()+" "+filepath.Base(name))
		return nil
	})
	must(t, j.RemoveFile(context.Background(), files[0].Seq, nil))
	fsys.InjectError(nil)
	removing := fileName(files[0].Seq) + removingSuffix
	cuts := int((files[0].Size + opts.RemoveStepBytes - 1) / opts.RemoveStepBytes)
	dir := filepath.Base(testDir)
	want := []string{"rename " + fileName(files[0].Seq), "syncdir " + dir, "open " + removing, "stat " + removing}
	for range cuts {
		want = append(want, "truncate "+removing, "sync "+removing)
	}
	want = append(want, "close "+removing, "remove "+removing, "syncdir "+dir)
	if !slices.Equal(ops, want) {
		t.Fatalf("file operations of RemoveFile (%d bytes):\n got %q\nwant %q", files[0].Size, ops, want)
	}

	// The second removal stops after its first cut, as a crash would stop it.
	second := fileName(files[1].Seq)
	cut := 0
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpTruncate && filepath.Base(name) == second+removingSuffix {
			if cut++; cut == 2 {
				return errors.New("stopped")
			}
		}
		return nil
	})
	if err := j.RemoveFile(context.Background(), files[1].Seq, nil); err == nil {
		t.Fatal("RemoveFile with a failing cut succeeded")
	}
	fsys.InjectError(nil)
	mustClose(t, j)
	crashed := fsys.Crash(vfs.CrashOptions{})
	if names, err := crashed.List(testDir); err != nil || !slices.Contains(names, second+removingSuffix) {
		t.Fatalf("before reopening: %v %v, want %s in it", names, err, second+removingSuffix)
	}
	j, recs, _ := openReplayed(t, testOptions(crashed))
	defer mustClose(t, j)
	names, err := crashed.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, removingSuffix) {
			t.Fatalf("Open left %s", n)
		}
	}
	for _, r := range recs {
		if r.loc.File == files[0].Seq || r.loc.File == files[1].Seq {
			t.Fatalf("record of removed file %d replayed", r.loc.File)
		}
	}
	if len(recs) == 0 {
		t.Fatal("the other files' records were not replayed")
	}
	if got := j.Files(); slices.ContainsFunc(got, func(f FileInfo) bool { return f.Seq <= files[1].Seq }) {
		t.Fatalf("files after reopening: %+v", got)
	}
}

func TestReadErrors(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	defer mustClose(t, j)
	loc := mustAppend(t, j, addRecord(1, 1, 100))
	padOff := loc.Offset + int64(loc.Length)
	pad := Location{File: loc.File, Offset: padOff, Length: uint32(padLength(padOff))}
	for _, tc := range []struct {
		loc  Location
		want error
	}{
		{Location{File: 99, Offset: FileHeaderSize, Length: loc.Length}, ErrNotFound},
		{Location{File: loc.File, Offset: j.Position().Offset, Length: 60}, ErrNotFound}, // past the durable end
		{pad, ErrCorrupt}, // Read never returns a pad
		{Location{File: loc.File, Offset: loc.Offset, Length: loc.Length - 1}, ErrCorrupt},
		{Location{File: loc.File, Offset: loc.Offset + 1, Length: loc.Length - 1}, ErrCorrupt},
		{Location{File: loc.File, Offset: 0, Length: loc.Length}, ErrCorrupt},
		{Location{File: loc.File, Offset: loc.Offset, Length: 3}, ErrCorrupt},
		{Location{File: loc.File, Offset: loc.Offset, Length: MaxRecordBytes + 1}, ErrCorrupt},
	} {
		if _, err := j.Read(tc.loc); !errors.Is(err, tc.want) {
			t.Errorf("Read(%+v) = %v, want %v", tc.loc, err, tc.want)
		}
	}
}

func TestOpenRefusesForeignFiles(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	mustAppend(t, j, addRecord(1, 1, 10))
	mustClose(t, j)
	// Copy file 1 to the name of file 7: its header says 1.
	src := testDir + "/" + fileName(1)
	data := readFile(t, fsys, src)
	writeFile(t, fsys, testDir+"/"+fileName(7), data)
	if _, err := Open(testOptions(fsys)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a misplaced file: %v, want ErrCorrupt", err)
	}
	// An unknown format version is refused too.
	must(t, fsys.Remove(testDir+"/"+fileName(7)))
	writeFile(t, fsys, testDir+"/"+fileName(7), fileHeaderWithVersion(7, 3))
	if _, err := Open(testOptions(fsys)); err == nil {
		t.Fatal("Open with an unknown format version succeeded")
	}
	// Other names are ignored.
	must(t, fsys.Remove(testDir+"/"+fileName(7)))
	writeFile(t, fsys, testDir+"/notes.txt", []byte("hi"))
	writeFile(t, fsys, testDir+"/00000000000000AB.journal", []byte("hi"))
	j, recs, _ := openReplayed(t, testOptions(fsys))
	defer mustClose(t, j)
	if len(recs) != 1 {
		t.Fatalf("replayed %d records", len(recs))
	}
}

func TestOptions(t *testing.T) {
	if err := (Options{}).Validate(); err == nil {
		t.Fatal("Options without Dir validated")
	}
	for _, o := range []Options{
		{Dir: "x", MaxFileBytes: 10},
		{Dir: "x", MaxQueueBytes: -1},
		{Dir: "x", MaxGroupBytes: 2 << 30},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%v validated", o)
		}
	}
	o := Options{Dir: "x"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := o.String(); got != fmt.Sprintf(`journal.Options{Dir: "x", MaxFileBytes: %d, PreallocateBytes: %d, MaxQueueBytes: %d, MaxGroupBytes: %d, BufferedWrites: false, RemoveStepBytes: %d}`,
		DefaultMaxFileBytes, DefaultPreallocateBytes, DefaultMaxQueueBytes, DefaultMaxGroupBytes, DefaultRemoveStepBytes) {
		t.Fatalf("String() = %s", got)
	}
}

func readFile(t testing.TB, fsys vfs.FS, name string) []byte {
	t.Helper()
	f, err := fsys.Open(name)
	must(t, err)
	defer f.Close()
	info, err := f.Stat()
	must(t, err)
	b := make([]byte, info.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// writeFile replaces name with data, durably.
func writeFile(t testing.TB, fsys vfs.FS, name string, data []byte) {
	t.Helper()
	if _, err := fsys.Stat(name); err == nil {
		must(t, fsys.Remove(name))
	}
	f, err := fsys.Create(name)
	must(t, err)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	must(t, f.Sync())
	must(t, f.Close())
	must(t, fsys.SyncDir(testDir))
}

// fileHeaderWithVersion is a valid file header with any version.
func fileHeaderWithVersion(seq uint64, version uint32) []byte {
	b := []byte(fileMagic)
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint64(b, seq)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// TestReadWhileAppending reads acked records from other goroutines while
// appends rotate files and old files are removed; run with -race.
func TestReadWhileAppending(t *testing.T) {
	fsys := vfs.NewMem()
	j, _, _ := openReplayed(t, testOptions(fsys))
	defer mustClose(t, j)
	locs := make(chan Location, 1000)
	var readers sync.WaitGroup
	for range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for loc := range locs {
				rec, err := j.Read(loc)
				if errors.Is(err, ErrNotFound) { // its file was removed
					continue
				}
				if err != nil || len(rec.Payload) != 200 || rec.Payload[1] != byte(rec.EntryID+7) {
					t.Errorf("Read(%+v) = %v, %v", loc, rec.EntryID, err)
				}
			}
		}()
	}
	var acks sync.WaitGroup
	for i := range 300 {
		acks.Add(1)
		must(t, j.Append(context.Background(), addRecord(1, uint64(i), 200), func(loc Location, err error) {
			if err != nil {
				t.Error(err)
			}
			locs <- loc
			acks.Done()
		}))
		if i%50 == 49 {
			if files := j.Files(); len(files) > 3 {
				must(t, j.RemoveFile(context.Background(), files[0].Seq, nil))
			}
		}
	}
	acks.Wait()
	close(locs)
	readers.Wait()
}

// TestRemoveLeftovers: a removal an I/O error cut short leaves a
// .removing file, which RemoveLeftovers removes without a restart.
func TestRemoveLeftovers(t *testing.T) {
	fsys := vfs.NewMem()
	opts := testOptions(fsys)
	opts.RemoveStepBytes = 4 << 10
	j, _, _ := openReplayed(t, opts)
	defer mustClose(t, j)
	for i := range 60 {
		mustAppend(t, j, addRecord(1, uint64(i), 300))
	}
	first := j.Files()[0].Seq
	removing := fileName(first) + removingSuffix
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpTruncate && filepath.Base(name) == removing {
			return errors.New("disk error")
		}
		return nil
	})
	if err := j.RemoveFile(context.Background(), first, nil); err == nil {
		t.Fatal("RemoveFile with a failing cut succeeded")
	}
	fsys.InjectError(nil)
	if names, _ := fsys.List(testDir); !slices.Contains(names, removing) {
		t.Fatalf("%s not left: %v", removing, names)
	}
	if n, err := j.RemoveLeftovers(context.Background(), nil); n != 1 || err != nil {
		t.Fatalf("RemoveLeftovers: %d, %v", n, err)
	}
	if names, _ := fsys.List(testDir); slices.Contains(names, removing) {
		t.Fatalf("%s still there: %v", removing, names)
	}
	if n, err := j.RemoveLeftovers(context.Background(), nil); n != 0 || err != nil {
		t.Fatalf("RemoveLeftovers again: %d, %v", n, err)
	}
	if _, ok := parseRemovingName(fileName(first)); ok {
		t.Fatal("a journal file's name parsed as a removing one")
	}
}

// TestRemoveFilePaced: RemoveFile spaces its cuts out to its pacer's rate,
// and a ctx that ends between cuts leaves a .removing file that
// RemoveLeftovers finishes.
func TestRemoveFilePaced(t *testing.T) {
	fsys := vfs.NewMem()
	opts := testOptions(fsys)
	opts.RemoveStepBytes = 4 << 10
	j, _, _ := openReplayed(t, opts)
	defer mustClose(t, j)
	for i := range 90 {
		mustAppend(t, j, addRecord(1, uint64(i), 300))
	}
	files := j.Files()
	if len(files) < 3 {
		t.Fatalf("want 3 files, have %d", len(files))
	}
	var cuts atomic.Int64
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpTruncate {
			cuts.Add(1)
		}
		return nil
	})
	size := files[0].Size
	steps := (size + opts.RemoveStepBytes - 1) / opts.RemoveStepBytes
	if steps < 3 {
		t.Fatalf("file of %d bytes: %d cuts, want at least 3", size, steps)
	}
	// The last cut is due when all the file's bytes have been counted.
	rate := float64(size) * 5 // 200 ms for the file
	began := time.Now()
	must(t, j.RemoveFile(context.Background(), files[0].Seq, ctxtime.NewPacer(rate, nil)))
	if took, least := time.Since(began), time.Duration(float64(size)/rate*float64(time.Second))-ctxtime.PacerMinSleep; took < least {
		t.Errorf("paced removal of %d bytes at %.0f B/s took %v, less than %v", size, rate, took, least)
	}
	if got := cuts.Load(); got != steps {
		t.Errorf("%d cuts, want %d", got, steps)
	}

	ctx, cancel := context.WithCancel(context.Background())
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpTruncate {
			cancel() // the wait before the next cut ends
		}
		return nil
	})
	removing := fileName(files[1].Seq) + removingSuffix
	if err := j.RemoveFile(ctx, files[1].Seq, ctxtime.NewPacer(float64(opts.RemoveStepBytes)*50, nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("RemoveFile with its ctx canceled: %v", err)
	}
	fsys.InjectError(nil)
	if names, _ := fsys.List(testDir); !slices.Contains(names, removing) {
		t.Fatalf("%s not left: %v", removing, names)
	}
	if n, err := j.RemoveLeftovers(context.Background(), nil); n != 1 || err != nil {
		t.Fatalf("RemoveLeftovers: %d, %v", n, err)
	}
	for _, f := range j.Files() {
		if f.Seq == files[1].Seq {
			t.Fatalf("file %016x still listed", f.Seq)
		}
	}
}

// TestSlowGroupLogged: a group whose write and sync take longer than
// slowGroup is logged as a warning, at most once per slowGroupLogEvery.
func TestSlowGroupLogged(t *testing.T) {
	fsys := vfs.NewMem()
	// Written by the writer goroutine before it completes the appends,
	// read after they returned: no lock needed.
	var logs bytes.Buffer
	opts := testOptions(fsys)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	j, _, _ := openReplayed(t, opts)
	defer mustClose(t, j)
	mustAppend(t, j, addRecord(1, 0, 100))
	fsys.InjectError(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, fileSuffix) {
			time.Sleep(slowGroup + 10*time.Millisecond) // a slow disk: time passing, not a wait for a condition
		}
		return nil
	})
	mustAppend(t, j, addRecord(1, 1, 100))
	mustAppend(t, j, addRecord(1, 2, 100)) // within a second: counted, not logged
	fsys.InjectError(nil)
	if n := strings.Count(logs.String(), "slow journal group"); n != 1 {
		t.Fatalf("%d slow-group lines, want 1:\n%s", n, logs.String())
	}
}
