package scrub_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/scrub"
	"github.com/strata-log/strata/tiering/segfile"
)

// TestMain fails the package if Run leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bg = context.Background()

// tierKey is the tests' cluster tier key.
var tierKey = func() *segfile.Key {
	k, err := segfile.NewKey(bytes.Repeat([]byte{3}, segfile.KeySize))
	if err != nil {
		panic(err)
	}
	return k
}()

// segment builds a valid segment object of n batches from offset base,
// authenticated with tierKey under key, and the TieredSegment the
// uploader would record for it.
func segment(t testing.TB, rng *rand.Rand, key string, base int64, n int) ([]byte, *brokerpb.TieredSegment) {
	t.Helper()
	return segmentOf(t, key, base, batchesFor(t, rng, base, n), tierKey)
}

// batchesFor is n random batches from offset base.
func batchesFor(t testing.TB, rng *rand.Rand, base int64, n int) [][]byte {
	t.Helper()
	var out [][]byte
	next, ts := base, int64(1_700_000_000_000)
	for range n {
		recs := make([]recordbatch.Record, 1+rng.Intn(5))
		for i := range recs {
			ts += int64(rng.Intn(1000))
			v := make([]byte, rng.Intn(200))
			rng.Read(v)
			recs[i] = recordbatch.Record{TimestampMs: ts, Key: fmt.Appendf(nil, "k%d", i), Value: v}
		}
		b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		recordbatch.SetBaseOffset(b, next)
		h, err := recordbatch.Verify(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
		next = h.LastOffset() + 1
	}
	return out
}

// segmentOf writes batches as the object named key, authenticated with
// tierKey (nil: unauthenticated, format version 1), and returns it with
// its record.
func segmentOf(t testing.TB, key string, base int64, batches [][]byte, tierKey *segfile.Key) ([]byte, *brokerpb.TieredSegment) {
	t.Helper()
	var buf bytes.Buffer
	w, err := segfile.NewWriter(&buf, segfile.Options{BaseOffset: base, IndexIntervalBytes: 256, Key: tierKey, Name: key, BlockBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if err := w.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), &brokerpb.TieredSegment{
		ObjectKey: key, BaseOffset: sum.BaseOffset, LastOffset: sum.LastOffset, SizeBytes: sum.Size,
		IndexPos: sum.IndexPos, DataBytes: sum.DataBytes, Records: sum.Records,
		MinTimestampMs: sum.MinTimestampMs, MaxTimestampMs: sum.MaxTimestampMs, Authenticated: sum.Authenticated,
	}
}

func put(t testing.TB, st objstore.Store, key string, b []byte) {
	t.Helper()
	if _, err := st.Put(bg, key, bytes.NewReader(b), int64(len(b)), nil); err != nil {
		t.Fatal(err)
	}
}

// fixture is a store holding one object of each kind of damage, and the
// segments metad would list for them, in partition "orders/0" order.
type fixture struct {
	store   *memstore.Store
	segs    []scrub.Segment
	want    map[string]scrub.Kind // by key; absent: sound
	batches map[string][][]byte   // by key
}

// damaged is how many of the problems f wants are damage.
func (f *fixture) damaged() int {
	n := 0
	for _, k := range f.want {
		if k.Damage() {
			n++
		}
	}
	return n
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	rng := rand.New(rand.NewSource(1))
	f := &fixture{store: memstore.New(memstore.Options{}), want: map[string]scrub.Kind{}, batches: map[string][][]byte{}}
	var base int64
	add := func(name string, kind scrub.Kind, damage func(obj []byte, rec *brokerpb.TieredSegment) []byte) {
		key := fmt.Sprintf("strata/c/t/topicid/0/%020d-%s.seg", base, name)
		f.batches[key] = batchesFor(t, rng, base, 20)
		obj, rec := segmentOf(t, key, base, f.batches[key], tierKey)
		if b := damage(obj, rec); b != nil {
			put(t, f.store, key, b)
		}
		f.segs = append(f.segs, scrub.Segment{Topic: "orders", Partition: 0, Tiered: rec})
		if kind != "" {
			f.want[key] = kind
		}
		base = rec.LastOffset + 1
	}
	keep := func(obj []byte, _ *brokerpb.TieredSegment) []byte { return obj }
	add("good", "", keep)
	add("old", scrub.KindUnauthenticated, func(_ []byte, rec *brokerpb.TieredSegment) []byte {
		obj, v1 := segmentOf(t, rec.ObjectKey, rec.BaseOffset, f.batches[rec.ObjectKey], nil)
		rec.SizeBytes, rec.IndexPos, rec.Authenticated = v1.SizeBytes, v1.IndexPos, false
		return obj
	})
	// The attacks of whoever can write the bucket: a batch rewritten
	// with a valid CRC; another authentic object of the same size put in
	// its place; an unauthenticated copy (valid CRCs) where an
	// authenticated object was written.
	add("forged", scrub.KindCorrupt, func(obj []byte, _ *brokerpb.TieredSegment) []byte {
		b := bytes.Clone(obj)
		first := b[segfile.HeaderSize:]
		h, err := recordbatch.ParseHeader(first)
		if err != nil {
			t.Fatal(err)
		}
		first[h.Size()-1] ^= 0x10
		binary.BigEndian.PutUint32(first[17:], crc32.Checksum(first[21:h.Size()], crc32.MakeTable(crc32.Castagnoli)))
		return b
	})
	add("swapped", scrub.KindCorrupt, func(_ []byte, rec *brokerpb.TieredSegment) []byte {
		obj, _ := segmentOf(t, rec.ObjectKey+".elsewhere", rec.BaseOffset, f.batches[rec.ObjectKey], tierKey)
		return obj
	})
	add("downgraded", scrub.KindCorrupt, func(_ []byte, rec *brokerpb.TieredSegment) []byte {
		obj, v1 := segmentOf(t, rec.ObjectKey, rec.BaseOffset, f.batches[rec.ObjectKey], nil)
		rec.SizeBytes, rec.IndexPos = v1.SizeBytes, v1.IndexPos // so that only the MAC is missing
		return obj
	})
	add("missing", scrub.KindMissing, func([]byte, *brokerpb.TieredSegment) []byte { return nil })
	add("truncated", scrub.KindTruncated, func(obj []byte, _ *brokerpb.TieredSegment) []byte { return obj[:len(obj)-100] })
	add("bitflip", scrub.KindCorrupt, func(obj []byte, _ *brokerpb.TieredSegment) []byte {
		b := bytes.Clone(obj)
		b[segfile.HeaderSize+30] ^= 0x04 // inside the first batch
		return b
	})
	add("size", scrub.KindSizeMismatch, func(obj []byte, rec *brokerpb.TieredSegment) []byte {
		rec.SizeBytes += 100 // the record is wrong, the object whole
		return obj
	})
	add("records", scrub.KindMetadataMismatch, func(obj []byte, rec *brokerpb.TieredSegment) []byte {
		rec.Records++
		return obj
	})
	add("good2", "", keep)
	return f
}

// Each damaged object is reported once, with its kind; sound ones are not.
func TestRunFindsEachProblemOnce(t *testing.T) {
	f := newFixture(t)
	rep, err := scrub.Run(bg, f.store, f.segs, scrub.Config{Parallel: 3, Key: tierKey})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Objects != len(f.segs) {
		t.Fatalf("checked %d objects, want %d", rep.Objects, len(f.segs))
	}
	got := map[string]scrub.Kind{}
	for _, p := range rep.Problems {
		key := p.Segment.Tiered.ObjectKey
		if _, dup := got[key]; dup {
			t.Errorf("%s reported twice", key)
		}
		got[key] = p.Kind
		t.Logf("%s", p)
	}
	for key, kind := range f.want {
		if got[key] != kind {
			t.Errorf("%s: reported %q, want %q", key, got[key], kind)
		}
	}
	for key, kind := range got {
		if _, ok := f.want[key]; !ok {
			t.Errorf("%s: reported %q, but it is sound", key, kind)
		}
	}
	if rep.Damaged() != f.damaged() {
		t.Errorf("Damaged() = %d, want %d", rep.Damaged(), f.damaged())
	}
	for i := 1; i < len(rep.Problems); i++ {
		if rep.Problems[i-1].Segment.Tiered.BaseOffset >= rep.Problems[i].Segment.Tiered.BaseOffset {
			t.Fatalf("problems not sorted by offset: %v", rep.Problems)
		}
	}
}

// The details say what an operator needs: segfile's message for
// corruption, both sizes for a size mismatch, the field for metadata.
func TestProblemDetails(t *testing.T) {
	f := newFixture(t)
	rep, err := scrub.Run(bg, f.store, f.segs, scrub.Config{Key: tierKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		var want string
		switch p.Kind {
		case scrub.KindCorrupt:
			key := p.Segment.Tiered.ObjectKey
			var cause error
			switch {
			case strings.HasSuffix(key, "-forged.seg"):
				want, cause = "does not match its tag", segfile.ErrMACMismatch
			case strings.HasSuffix(key, "-swapped.seg"):
				want, cause = "not written by this cluster under the name", segfile.ErrMACMismatch
			case strings.HasSuffix(key, "-downgraded.seg"):
				want, cause = "carries no MAC", segfile.ErrUnauthenticated
			default:
				want, cause = "segfile: corrupt segment: data", segfile.ErrCorrupt
			}
			if !errors.Is(p.Err, segfile.ErrCorrupt) || !errors.Is(p.Err, cause) || !corruption.Is(p.Err) {
				t.Errorf("corrupt: Err %v does not match segfile.ErrCorrupt and %v, or is not marked as corruption", p.Err, cause)
			}
		case scrub.KindUnauthenticated:
			want = "written before authentication"
		case scrub.KindTruncated:
			want = fmt.Sprintf("metad records %d", p.Segment.Tiered.SizeBytes)
		case scrub.KindSizeMismatch:
			want = fmt.Sprintf("whole segment of %d bytes, metad records %d", p.Segment.Tiered.SizeBytes-100, p.Segment.Tiered.SizeBytes)
		case scrub.KindMetadataMismatch:
			want = fmt.Sprintf("records: metad records %d, the object holds %d", p.Segment.Tiered.Records, p.Segment.Tiered.Records-1)
		case scrub.KindMissing:
			want = "no object"
		}
		if !strings.Contains(p.Detail, want) {
			t.Errorf("%s: detail %q does not say %q", p.Kind, p.Detail, want)
		}
		if s := p.String(); !strings.Contains(s, "orders/0 offsets ") || !strings.Contains(s, p.Segment.Tiered.ObjectKey) {
			t.Errorf("%q does not name the partition, offsets and key", s)
		}
	}
}

// Progress is reported after every object, one call at a time, and ends
// at the totals; problems are reported as found.
func TestProgress(t *testing.T) {
	f := newFixture(t)
	var (
		inCall   atomic.Int32
		calls    []scrub.Progress
		problems int
	)
	cfg := scrub.Config{Parallel: 4, Key: tierKey,
		Progress: func(p scrub.Progress) {
			if inCall.Add(1) != 1 {
				t.Error("callbacks called concurrently")
			}
			defer inCall.Add(-1)
			calls = append(calls, p)
		},
		Problem: func(scrub.Problem) {
			if inCall.Add(1) != 1 {
				t.Error("callbacks called concurrently")
			}
			defer inCall.Add(-1)
			problems++
		},
	}
	rep, err := scrub.Run(bg, f.store, f.segs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, s := range f.segs {
		total += s.Tiered.SizeBytes
	}
	if len(calls) != len(f.segs) {
		t.Fatalf("%d progress calls for %d objects", len(calls), len(f.segs))
	}
	for i, p := range calls {
		if p.Objects != i+1 || p.TotalObjects != len(f.segs) || p.TotalBytes != total || p.Bytes > total {
			t.Fatalf("progress call %d: %+v (total %d bytes)", i, p, total)
		}
	}
	if last := calls[len(calls)-1]; last.Bytes != total || last.Problems != len(f.want) || rep.Bytes != total {
		t.Fatalf("last progress %+v, report %d bytes; want %d bytes, %d problems", last, rep.Bytes, total, len(f.want))
	}
	if problems != len(f.want) {
		t.Fatalf("%d problem calls, want %d", problems, len(f.want))
	}
}

// Parallel objects are checked at once, and no more.
func TestParallel(t *testing.T) {
	f := newFixture(t)
	const parallel = 3
	var (
		inFlight, most atomic.Int32
		release        = make(chan struct{})
	)
	f.store.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op != objstore.OpStat {
			return memstore.Fault{}
		}
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inFlight.Add(-1)
		return memstore.Fault{}
	})
	done := make(chan error, 1)
	go func() {
		_, err := scrub.Run(bg, f.store, f.segs, scrub.Config{Parallel: parallel, Key: tierKey})
		done <- err
	}()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("%d objects in flight", parallel), func() bool { return inFlight.Load() >= parallel })
	close(release)
	if err := testwait.Recv(t, 10*time.Second, "the scrub to finish", done); err != nil {
		t.Fatal(err)
	}
	if m := most.Load(); m != parallel {
		t.Fatalf("at most %d objects in flight, want %d", m, parallel)
	}
}

// A transient error is tried again; a body cut short every time is
// unreadable, never corruption; a permanent error is unreadable at once.
func TestStoreErrors(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	st := memstore.New(memstore.Options{})
	obj, rec := segment(t, rng, "flaky", 0, 10)
	put(t, st, "flaky", obj)
	obj2, rec2 := segment(t, rng, "cut", rec.LastOffset+1, 10)
	put(t, st, "cut", obj2)
	obj3, rec3 := segment(t, rng, "denied", rec2.LastOffset+1, 10)
	put(t, st, "denied", obj3)
	var (
		mu    sync.Mutex
		calls = map[string]int{}
	)
	st.SetHook(func(c memstore.Call) memstore.Fault {
		mu.Lock()
		calls[c.Key+"/"+string(c.Op)]++
		n := calls[c.Key+"/"+string(c.Op)]
		mu.Unlock()
		switch {
		case c.Key == "flaky" && c.Op == objstore.OpGetRange && n == 1:
			return memstore.Fault{Err: errors.New("503 slow down")}
		case c.Key == "cut" && c.Op == objstore.OpGetRange:
			return memstore.Fault{Body: func(b []byte) []byte { return b[:len(b)/2] }}
		case c.Key == "denied" && c.Op == objstore.OpStat:
			return memstore.Fault{Err: fmt.Errorf("access denied: %w", objstore.ErrPermanent)}
		}
		return memstore.Fault{}
	})
	segs := []scrub.Segment{{Topic: "t", Tiered: rec}, {Topic: "t", Tiered: rec2}, {Topic: "t", Tiered: rec3}}
	rep, err := scrub.Run(bg, st, segs, scrub.Config{Attempts: 3, RetryBackoff: time.Millisecond, Key: tierKey})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 2 || rep.Damaged() != 0 {
		t.Fatalf("problems %v, want cut and denied, both unreadable", rep.Problems)
	}
	for _, p := range rep.Problems {
		if p.Kind != scrub.KindUnreadable || p.Segment.Tiered.ObjectKey == "flaky" {
			t.Errorf("%s", p)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["cut/stat"] != 3 || calls["denied/stat"] != 1 {
		t.Fatalf("tries: cut %d (want 3), denied %d (want 1)", calls["cut/stat"], calls["denied/stat"])
	}
}

// lyingStore reports every object longer than it is, so that reads run
// past its end.
type lyingStore struct{ *memstore.Store }

func (s lyingStore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	info, err := s.Store.Stat(ctx, key)
	info.Size += 1000
	return info, err
}

// A read past the end of an object (ErrInvalidRange, or a short body that
// ends cleanly) is a truncated object: corruption, as segfile requires of
// a RangeReader, not a store error.
func TestReadPastEndIsCorruption(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	st := memstore.New(memstore.Options{})
	obj, rec := segment(t, rng, "k", 0, 10)
	put(t, st, "k", obj)
	rec.SizeBytes += 1000
	p := scrub.Check(bg, lyingStore{st}, scrub.Segment{Topic: "t", Tiered: rec}, tierKey)
	if p == nil || p.Kind != scrub.KindCorrupt || !strings.Contains(p.Detail, "truncated") {
		t.Fatalf("got %v, want a corrupt (truncated) object", p)
	}
}

// When ctx ends Run stops, says so, and reports only what it checked.
func TestRunStopsWithContext(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(bg)
	f.store.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpStat && strings.Contains(c.Key, "bitflip") {
			cancel()
		}
		return memstore.Fault{}
	})
	rep, err := scrub.Run(ctx, f.store, f.segs, scrub.Config{Parallel: 1, Key: tierKey})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if rep.Objects >= len(f.segs) {
		t.Fatalf("checked %d of %d objects after cancel", rep.Objects, len(f.segs))
	}
	for _, p := range rep.Problems {
		if p.Kind == scrub.KindUnreadable {
			t.Fatalf("an object cut off by ctx reported as %s", p)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []scrub.Config{{Parallel: -1}, {Attempts: -2}, {RetryBackoff: -time.Second}} {
		if err := c.Validate(); !errors.Is(err, scrub.ErrInvalidConfig) {
			t.Errorf("%+v: Validate() = %v", c, err)
		}
		if _, err := scrub.Run(bg, memstore.New(memstore.Options{}), nil, c); !errors.Is(err, scrub.ErrInvalidConfig) {
			t.Errorf("%+v: Run() = %v", c, err)
		}
	}
	if err := (scrub.Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if rep, err := scrub.Run(bg, memstore.New(memstore.Options{}), nil, scrub.Config{}); err != nil || rep.Objects != 0 {
		t.Fatalf("nothing to check: %+v, %v", rep, err)
	}
}

// A segment its partition stopped listing while the run went on (retention
// or compaction unlinked it and its object went) is counted as gone, not
// reported as damage; one still listed is reported; a Listed error keeps
// the problem.
func TestUnlistedSegmentsAreNotProblems(t *testing.T) {
	f := newFixture(t)
	gone := func(s scrub.Segment) bool {
		return strings.Contains(s.Tiered.ObjectKey, "-missing") || strings.Contains(s.Tiered.ObjectKey, "-truncated")
	}
	var asked atomic.Int64
	rep, err := scrub.Run(bg, f.store, f.segs, scrub.Config{Parallel: 2, Key: tierKey, Listed: func(_ context.Context, s scrub.Segment) (bool, error) {
		asked.Add(1)
		if strings.Contains(s.Tiered.ObjectKey, "-bitflip") {
			return false, errors.New("metad unavailable")
		}
		return !gone(s), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Gone != 2 || rep.Objects != len(f.segs) || len(rep.Problems) != len(f.want)-2 {
		t.Fatalf("gone %d, objects %d of %d, %d problems (want %d)", rep.Gone, rep.Objects, len(f.segs), len(rep.Problems), len(f.want)-2)
	}
	for _, p := range rep.Problems {
		if gone(p.Segment) {
			t.Errorf("reported an unlisted segment: %s", p)
		}
	}
	if n := asked.Load(); n != int64(len(f.want)) {
		t.Errorf("Listed asked %d times, want once per problem (%d)", n, len(f.want))
	}
}

// Without the tier key, authenticated objects cannot be checked: they are
// unreadable, not damaged; an object written before authentication is
// still checked.
func TestWithoutKeyAuthenticatedObjectsAreUnreadable(t *testing.T) {
	f := newFixture(t)
	rep, err := scrub.Run(bg, f.store, f.segs, scrub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]scrub.Kind{}
	for _, p := range rep.Problems {
		kinds[p.Segment.Tiered.ObjectKey] = p.Kind
	}
	for _, s := range f.segs {
		key := s.Tiered.ObjectKey
		switch {
		case strings.HasSuffix(key, "-good.seg") && (kinds[key] != scrub.KindUnreadable || !errors.Is(problemOf(rep, key).Err, segfile.ErrNoKey)):
			t.Errorf("%s without the key: %q, want unreadable (ErrNoKey)", key, kinds[key])
		case strings.HasSuffix(key, "-old.seg") && kinds[key] != scrub.KindUnauthenticated:
			t.Errorf("%s without the key: %q, want unauthenticated", key, kinds[key])
		case strings.HasSuffix(key, "-missing.seg") && kinds[key] != scrub.KindMissing:
			t.Errorf("%s without the key: %q, want missing", key, kinds[key])
		}
	}
}

func problemOf(rep scrub.Report, key string) scrub.Problem {
	for _, p := range rep.Problems {
		if p.Segment.Tiered.ObjectKey == key {
			return p
		}
	}
	return scrub.Problem{}
}
