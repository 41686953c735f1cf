package partlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/retention"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad/kv"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/ledgerpb"
	"github.com/strata-log/strata/proto/metadpb"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
)

// Retention of a partition with 10,000 pieces finishes in seconds, not
// minutes. These tests build a partition whose list already
// holds 10,000 pieces (closed ledgers, tiered objects or both; building
// them by 10,000 rolls would cost 10,000 CASes of a growing list and
// measure the rolls), let retention remove all but the newest few, and
// count the work: ONE CAS of the list (P6), plus one for the garbage queue
// when objects go (T6), then the ledgers' metadata and their indexes in
// one metad transaction per ledger.DeleteBatch ledgers each (a metadata
// read and the bookies' deletes per ledger), and the objects in one
// multi-object delete. Time is reported, not asserted:
// in memory, and with every metad write held for this machine's fsync
// latency, measured in the same run (a metad write is a Raft entry on
// disk), which is what makes per-piece work cost seconds or minutes.

// scaleStore is the in-memory Store with counters, metad's value bound
// (a Put over kv.MaxValueBytes fails as metad would) and, when writeDelay
// is set, every write (Put, Delete) held that long: a metad round trip.
type scaleStore struct {
	inner      *partlog.MemStore
	writeDelay time.Duration

	mu struct {
		sync.Mutex
		scaleCounts
	}
}

type scaleCounts struct {
	gets, puts, partitionPuts, deletes, indexDeletes int
	maxPartitionBytes                                int
}

func (s *scaleStore) Get(ctx context.Context, key string) ([]byte, int64, error) {
	s.mu.Lock()
	s.mu.gets++
	s.mu.Unlock()
	return s.inner.Get(ctx, key)
}

func (s *scaleStore) Put(ctx context.Context, key string, value []byte, expected int64) (int64, error) {
	if err := s.countPut(key, value); err != nil {
		return 0, err
	}
	hold(s.writeDelay)
	return s.inner.Put(ctx, key, value, expected)
}

func (s *scaleStore) PutWith(ctx context.Context, key string, value []byte, expected int64, with []partlog.Record) (int64, []*metadpb.KeyValue, error) {
	if err := s.countPut(key, value); err != nil {
		return 0, nil, err
	}
	hold(s.writeDelay)
	return s.inner.PutWith(ctx, key, value, expected, with)
}

// countPut counts a write of key and refuses a value metad would.
func (s *scaleStore) countPut(key string, value []byte) error {
	s.mu.Lock()
	s.mu.puts++
	if strings.HasPrefix(key, partlog.PartitionPrefix) {
		s.mu.partitionPuts++
		s.mu.maxPartitionBytes = max(s.mu.maxPartitionBytes, len(value))
	}
	s.mu.Unlock()
	if len(value) > kv.MaxValueBytes {
		return fmt.Errorf("%w: %s: %d bytes > %d", kv.ErrValueTooLarge, key, len(value), kv.MaxValueBytes)
	}
	return nil
}

func (s *scaleStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	s.mu.deletes++
	if strings.HasPrefix(key, partlog.LedgerIndexPrefix) {
		s.mu.indexDeletes++
	}
	s.mu.Unlock()
	hold(s.writeDelay)
	return s.inner.Delete(ctx, key)
}

func (s *scaleStore) DeleteKeys(ctx context.Context, keys []string) error {
	s.mu.Lock()
	s.mu.deletes++
	for _, k := range keys {
		if strings.HasPrefix(k, partlog.LedgerIndexPrefix) {
			s.mu.indexDeletes++
		}
	}
	s.mu.Unlock()
	hold(s.writeDelay)
	return s.inner.DeleteKeys(ctx, keys)
}

func (s *scaleStore) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.scaleCounts = scaleCounts{}
}

// scaleMeta counts the ledger metadata calls of deletions (Get, and the
// ledgers deleted one by one or in batches) and holds each Delete and
// each batch for writeDelay, like scaleStore.
type scaleMeta struct {
	ledger.MetadataStore
	writeDelay             time.Duration
	gets, deletes, batches atomic.Int64
}

var _ ledger.MetadataBatchDeleter = (*scaleMeta)(nil)

func (m *scaleMeta) Get(ctx context.Context, id uint64) (*ledgerpb.LedgerMetadata, int64, error) {
	m.gets.Add(1)
	return m.MetadataStore.Get(ctx, id)
}

func (m *scaleMeta) Delete(ctx context.Context, id uint64) error {
	m.deletes.Add(1)
	hold(m.writeDelay)
	return m.MetadataStore.Delete(ctx, id)
}

func (m *scaleMeta) DeleteMany(ctx context.Context, ids []uint64) error {
	m.deletes.Add(int64(len(ids)))
	m.batches.Add(1)
	hold(m.writeDelay)
	return m.MetadataStore.(ledger.MetadataBatchDeleter).DeleteMany(ctx, ids)
}

// hold simulates a round trip's latency (not a wait for a condition).
func hold(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// fsyncLatency is the median time of a 4 KiB write + fsync in dir: the
// floor of one metad write on this machine.
func fsyncLatency(t testing.TB, dir string) time.Duration {
	t.Helper()
	f, err := os.CreateTemp(dir, "fsync")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	var d []time.Duration
	for range 40 {
		start := time.Now()
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// scaleShape is the partition a scale test builds: tiered objects, then
// old closed ledgers, then keep young closed ledgers and the open one.
type scaleShape struct {
	tiered, ledgers, keep int
	// configure, if set, adjusts the Log's Config before it opens.
	configure func(*partlog.Config)
}

type scaleLog struct {
	l       *partlog.Log
	store   *scaleStore
	meta    *scaleMeta
	objects *memstore.Store
	// objectDeletes counts keys the object store was asked to delete;
	// firstKept is the first offset retention must keep.
	objectDeletes atomic.Int64
	firstKept     int64
}

const scaleKeyPrefix = "strata/0b5c1a8e-6d1f-4f5e-9a43-3c1de0f7a2b1/t/6f8b2d7c-1e9a-4c3b-8d5f-2a7e9c0b4d16/3/"

// buildScaleLog writes the PartitionLog of shape straight into the store
// (with each ledger's metadata and index, and each object), then opens
// it. Old pieces' newest records are 2 h old, the kept ones 1 min.
func buildScaleLog(t testing.TB, shape scaleShape, writeDelay time.Duration) *scaleLog {
	t.Helper()
	ctx := context.Background()
	f := partlog.NewFixture(t)
	s := &scaleLog{
		store:   &scaleStore{inner: f.Store},
		meta:    &scaleMeta{MetadataStore: f.Cluster.Meta},
		objects: memstore.New(memstore.Options{Now: f.Clock.Now}),
	}
	s.objects.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpDelete {
			s.objectDeletes.Add(1)
		}
		return memstore.Fault{}
	})
	now := f.Clock.Now().UnixMilli()
	old, young := now-2*time.Hour.Milliseconds(), now-time.Minute.Milliseconds()
	const recordsPerPiece, bytesPerPiece = 100, 64 << 10
	pl := &brokerpb.PartitionLog{}
	offset := int64(0)
	for i := range shape.tiered {
		last := offset + recordsPerPiece - 1
		key := fmt.Sprintf("%s%020d-%020d-%016x.seg", scaleKeyPrefix, offset, last, uint64(i)*0x9e3779b97f4a7c15)
		if _, err := s.objects.Put(ctx, key, bytes.NewReader([]byte("x")), 1, nil); err != nil {
			t.Fatal(err)
		}
		pl.Tiered = append(pl.Tiered, &brokerpb.TieredSegment{
			ObjectKey: key, BaseOffset: offset, LastOffset: last, SizeBytes: bytesPerPiece, IndexPos: bytesPerPiece - 200,
			DataBytes: bytesPerPiece - 300, Records: recordsPerPiece, MinTimestampMs: old - 1000, MaxTimestampMs: old,
			SourceLedgers: []uint64{uint64(1_000_000 + i)}, CommittedAtMs: old + 1000,
		})
		offset = last + 1
	}
	idx, err := proto.Marshal(&brokerpb.LedgerIndex{Points: []*brokerpb.IndexPoint{{}}})
	if err != nil {
		t.Fatal(err)
	}
	bookies := []string{"bookie-0", "bookie-1", "bookie-2"}
	for i := range shape.ledgers + shape.keep {
		id := uint64(10_000 + i)
		ts := old
		if i >= shape.ledgers {
			ts = young
		}
		f.Cluster.Meta.Set(&ledgerpb.LedgerMetadata{Id: id, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2,
			State: ledgerpb.LedgerState_CLOSED, LastEntryId: 0, Length: bytesPerPiece, CreatedAtMs: ts,
			Fragments: []*ledgerpb.Fragment{{FirstEntryId: 0, Bookies: bookies}}})
		if _, err := f.Store.Put(ctx, partlog.IndexKey(id), idx, -1); err != nil {
			t.Fatal(err)
		}
		last := offset + recordsPerPiece - 1
		pl.Segments = append(pl.Segments, &brokerpb.LedgerSegment{LedgerId: id, FirstOffset: offset, LastOffset: last,
			LastEntryId: 0, Bytes: bytesPerPiece, MaxTimestampMs: ts, CreatedAtMs: ts, Closed: true})
		if i == shape.ledgers {
			s.firstKept = offset
		}
		offset = last + 1
	}
	val, err := proto.Marshal(pl)
	if err != nil {
		t.Fatal(err)
	}
	if len(val) > kv.MaxValueBytes {
		t.Fatalf("a list of %d tiered segments and %d ledgers is %d bytes, over metad's %d: it cannot exist",
			shape.tiered, shape.ledgers+shape.keep, len(val), kv.MaxValueBytes)
	}
	if _, err := f.Store.Put(ctx, partlog.PartitionKey("orders", 3), val, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("built a list of %d objects and %d ledgers: %d bytes", shape.tiered, shape.ledgers+shape.keep, len(val))

	cfg := f.Config(1)
	env := f.Cluster.Env()
	env.Meta = s.meta
	cfg.Env, cfg.Store = env, s.store
	cfg.Policy = partlog.Policy{Delete: true, RetentionMs: time.Hour.Milliseconds(), RetentionBytes: -1, MaxTimestampAheadMs: -1,
		LocalRetentionMs: -1, RemoteStorage: shape.tiered > 0}
	if shape.tiered > 0 {
		cfg.Tier = &partlog.Tier{Store: s.objects, Reader: segfileReader{s.objects}, KeyPrefix: scaleKeyPrefix, TopicID: "topic-id", OrphanGrace: time.Hour}
	}
	if shape.configure != nil {
		shape.configure(&cfg)
	}
	s.l = f.Open(cfg)
	s.store.reset()
	s.store.writeDelay, s.meta.writeDelay = writeDelay, writeDelay
	s.meta.gets.Store(0)
	s.meta.deletes.Store(0)
	s.meta.batches.Store(0)
	return s
}

// enforce runs retention once and checks what it must have done: every
// old piece gone in one list CAS (two with objects: the garbage queue's),
// the log start at the first kept offset, one ledger and one index
// deletion per removed ledger, every removed object deleted and
// unqueued, nothing else touched.
func (s *scaleLog) enforce(t testing.TB, shape scaleShape) (retention.Cut, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cut, err := retention.Enforce(ctx, s.l)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("EnforceRetention: %v", err)
	}
	if want := shape.tiered + shape.ledgers; cut.Pieces != want || cut.Start != s.firstKept || cut.Reason != "time" {
		t.Fatalf("cut %+v, want %d pieces by time up to %d", cut, want, s.firstKept)
	}
	if got := s.l.LogStartOffset(); got != s.firstKept {
		t.Fatalf("log start %d, want %d", got, s.firstKept)
	}
	if err := s.l.Err(); err != nil {
		t.Fatalf("the log failed: %v", err)
	}
	s.store.mu.Lock()
	st := s.store.mu.scaleCounts
	s.store.mu.Unlock()
	wantCAS := 1
	if shape.tiered > 0 {
		wantCAS = 2 // the retention CAS queues the objects, a second unqueues them once deleted (T6)
	}
	if st.partitionPuts != wantCAS {
		t.Errorf("%d CASes of the list, want %d: retention must not write the list per piece", st.partitionPuts, wantCAS)
	}
	batches := (shape.ledgers + ledger.DeleteBatch - 1) / ledger.DeleteBatch
	if st.indexDeletes != shape.ledgers || st.deletes != batches || st.puts != wantCAS || st.gets != 0 {
		t.Errorf("metad calls: %d index deletes in %d transactions, %d puts, %d gets; want %d in %d, %d, 0",
			st.indexDeletes, st.deletes, st.puts, st.gets, shape.ledgers, batches, wantCAS)
	}
	if g, d, b := s.meta.gets.Load(), s.meta.deletes.Load(), s.meta.batches.Load(); g != int64(shape.ledgers) ||
		d != int64(shape.ledgers) || b != int64(batches) {
		t.Errorf("ledger metadata: %d gets, %d deletes in %d batches; want %d, %d in %d", g, d, b, shape.ledgers, shape.ledgers, batches)
	}
	if got := s.objectDeletes.Load(); got != int64(shape.tiered) {
		t.Errorf("%d object deletions, want %d", got, shape.tiered)
	}
	left, err := s.meta.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != shape.keep { // the kept ledgers (no open one: P8)
		t.Errorf("%d ledgers left, want %d", len(left), shape.keep)
	}
	var objects int
	if err := s.objects.List(ctx, scaleKeyPrefix, "", func(objstore.ObjectInfo) bool { objects++; return true }); err != nil {
		t.Fatal(err)
	}
	pl := s.l.Describe()
	if objects != 0 || len(pl.Tiered) != 0 || len(pl.Garbage) != 0 || len(pl.Segments) != shape.keep {
		t.Errorf("left: %d objects, %d tiered, %d queued, %d segments; want 0, 0, 0, %d",
			objects, len(pl.Tiered), len(pl.Garbage), len(pl.Segments), shape.keep)
	}
	t.Logf("retention of %d pieces (%d objects, %d ledgers, keeping %d): %v; %d list CASes (largest written %d bytes), "+
		"%d index deletes in %d transactions, %d ledger metadata gets + %d deletes in %d, %d objects deleted",
		cut.Pieces, shape.tiered, shape.ledgers, shape.keep, took.Round(time.Millisecond), st.partitionPuts, st.maxPartitionBytes,
		st.indexDeletes, st.deletes, s.meta.gets.Load(), s.meta.deletes.Load(), s.meta.batches.Load(), s.objectDeletes.Load())
	return cut, took
}

// TestRetentionScale: 10,000 pieces go in one list CAS (two with objects)
// and batched deletions; with metad's latency the whole takes seconds.
func TestRetentionScale(t *testing.T) {
	t.Run("ledgers", func(t *testing.T) {
		shape := scaleShape{ledgers: 10_000, keep: 3}
		buildScaleLog(t, shape, 0).enforce(t, shape)
	})
	// 10,000 objects would not fit in metad: see the test below. Half
	// and half is the most pieces with objects a list can hold.
	t.Run("objects and ledgers", func(t *testing.T) {
		shape := scaleShape{tiered: 4_000, ledgers: 6_000, keep: 3}
		buildScaleLog(t, shape, 0).enforce(t, shape)
	})
	t.Run("ledgers with metad latency", func(t *testing.T) {
		if testing.Short() {
			t.Skip("holds 20,000 metad writes for the fsync latency")
		}
		fsync := fsyncLatency(t, t.TempDir())
		// A metad write is at least a Raft entry fsynced; 1 ms is a floor
		// for 3 nodes over a network, whichever is more.
		delay := max(fsync, time.Millisecond)
		shape := scaleShape{ledgers: 10_000, keep: 3}
		s := buildScaleLog(t, shape, delay)
		cpu0 := cpuTime()
		_, took := s.enforce(t, shape)
		serial := time.Duration(2*shape.ledgers) * delay
		t.Logf("fsync (4 KiB, median) %v; each metad write held %v; retention took %v (CPU %v), "+
			"a write per ledger and per index, one at a time, would hold %v", fsync, delay, took.Round(time.Millisecond),
			(cpuTime() - cpu0).Round(time.Millisecond), serial.Round(time.Second))
		if took > serial/2 {
			t.Errorf("retention took %v with %v per metad write: its %d deletions are neither batched nor concurrent (serial: %v)",
				took, delay, 2*shape.ledgers, serial)
		}
	})
}

// TestRetentionDeletionsStopAtClose: Close does not wait for thousands
// of retention deletions (they ran on the log's goroutine, which Close
// waits for): the ones not started are left, unlisted, to the orphan
// sweeper.
func TestRetentionDeletionsStopAtClose(t *testing.T) {
	shape := scaleShape{ledgers: 10_000, keep: 3}
	s := buildScaleLog(t, shape, 5*time.Millisecond) // all of them: 157 batches x 2 x 5 ms, and the bookies
	done := make(chan error, 1)
	go func() {
		_, err := retention.Enforce(context.Background(), s.l)
		done <- err
	}()
	testwait.Until(t, partlog.WaitTimeout, "100 ledger deletions", func() bool { return s.meta.deletes.Load() >= 100 })
	start := time.Now()
	if err := s.l.Close(partlog.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := testwait.Recv(t, partlog.WaitTimeout, "retention to return after Close", done); err != nil {
		t.Fatalf("EnforceRetention: %v", err)
	}
	took, deleted := time.Since(start), s.meta.deletes.Load()
	t.Logf("Close, then retention returned %v later, after %d of %d ledger deletions", took.Round(time.Millisecond), deleted, shape.ledgers)
	if deleted > int64(shape.ledgers)/2 {
		t.Fatalf("retention deleted %d of %d ledgers after Close: it does not stop", deleted, shape.ledgers)
	}
	stored, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), s.store.inner, "orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	// Close dropped the empty open segment.
	if stored.LogStartOffset != s.firstKept || len(stored.Segments) != shape.keep {
		t.Fatalf("stored list: start %d, %d segments; want %d, %d (the rest unlisted for the sweeper)",
			stored.LogStartOffset, len(stored.Segments), s.firstKept, shape.keep)
	}
}

// TestRetentionScaleListBound: how many pieces a partition's list can
// name before metad refuses it (kv.MaxValueBytes), with object keys as
// the broker names them. Reported, and checked against the 4,000 objects
// above.
func TestRetentionScaleListBound(t *testing.T) {
	key := fmt.Sprintf("%s%020d-%020d-%016x.seg", scaleKeyPrefix, int64(1)<<40, int64(1)<<40+99, uint64(1)<<63)
	tiered := &brokerpb.TieredSegment{ObjectKey: key, BaseOffset: 1 << 40, LastOffset: 1<<40 + 99, SizeBytes: 256 << 20,
		IndexPos: 256<<20 - 4096, DataBytes: 256<<20 - 8192, Records: 1 << 20, MinTimestampMs: 1_700_000_000_000,
		MaxTimestampMs: 1_700_000_600_000, SourceLedgers: []uint64{1 << 20, 1<<20 + 1}, CommittedAtMs: 1_700_000_700_000}
	seg := &brokerpb.LedgerSegment{LedgerId: 1 << 20, FirstOffset: 1 << 40, LastOffset: 1<<40 + 99, LastEntryId: 1 << 16,
		Bytes: 1 << 30, MaxTimestampMs: 1_700_000_600_000, CreatedAtMs: 1_700_000_000_000, Closed: true}
	perTiered := len(mustMarshal(t, &brokerpb.PartitionLog{Tiered: []*brokerpb.TieredSegment{tiered}}))
	perLedger := len(mustMarshal(t, &brokerpb.PartitionLog{Segments: []*brokerpb.LedgerSegment{seg}}))
	maxTiered, maxLedgers := kv.MaxValueBytes/perTiered, kv.MaxValueBytes/perLedger
	t.Logf("a list holds at most ~%d tiered segments (%d bytes each) or ~%d ledgers (%d bytes each) in metad's %d bytes",
		maxTiered, perTiered, maxLedgers, perLedger, kv.MaxValueBytes)
	if maxLedgers < 10_000 {
		t.Errorf("a list cannot name 10,000 ledgers (%d at most)", maxLedgers)
	}
	if maxTiered < 4_000 {
		t.Errorf("a list cannot name the 4,000 objects TestRetentionScale uses (%d at most)", maxTiered)
	}
}

// TestRollDeferredWhileListFull (L1): with a list too full to take one
// more segment and still fit in metad with a full producer table, a due
// roll is deferred (the open segment grows past segment.bytes), an append
// past MaxSegmentEntries fails with ErrListFull and nothing is written,
// and once retention shortens the list the log rolls and appends again.
// Without L1 rolls went on until the list outgrew metad's bound; then the
// roll's CAS failed, the log with it, and every takeover after it.
func TestRollDeferredWhileListFull(t *testing.T) {
	if partlog.MetadValueBytes != kv.MaxValueBytes {
		t.Fatalf("metadValueBytes %d, metad's bound %d", partlog.MetadValueBytes, kv.MaxValueBytes)
	}
	shape := scaleShape{ledgers: 18_000, keep: 1, configure: func(c *partlog.Config) { c.SegmentBytes, c.MaxSegmentEntries = 1, 3 }}
	s := buildScaleLog(t, shape, 0)
	segments := func() int {
		return len(s.l.Snapshot().List.Segments)
	}
	partlog.MustAppend(t, s.l, partlog.Batch(t, 1, "v0"), partlog.AcksQuorum) // lists the open segment (P8)
	before := segments()
	for i := 1; i < 3; i++ { // each over segment.bytes: a roll is due before each
		partlog.MustAppend(t, s.l, partlog.Batch(t, 1, fmt.Sprint("v", i)), partlog.AcksQuorum)
	}
	if got := segments(); got != before {
		t.Fatalf("%d segments after appends to a full list, want %d (no roll)", got, before)
	}
	if _, err := s.l.Append(partlog.Ctx(t), partlog.Batch(t, 1, "refused"), partlog.AcksQuorum); !errors.Is(err, partlog.ErrListFull) {
		t.Fatalf("append past MaxSegmentEntries on a full list: %v, want ErrListFull", err)
	}
	if err := s.l.Err(); err != nil {
		t.Fatalf("the log failed: %v", err)
	}
	if _, err := retention.Enforce(partlog.Ctx(t), s.l); err != nil {
		t.Fatal(err)
	}
	r := partlog.MustAppend(t, s.l, partlog.Batch(t, 1, "after retention"), partlog.AcksQuorum)
	// kept, full, the new one with the append; run may already have rolled
	// that one too (it is over segment.bytes) and opened one more, empty.
	segs := slices.Clone(s.l.Snapshot().List.Segments)
	if n := len(segs); n < shape.keep+2 || n > shape.keep+3 ||
		segs[shape.keep+1].FirstOffset != r.BaseOffset || (n == shape.keep+3 && segs[n-1].FirstOffset != r.BaseOffset+1) {
		t.Fatalf("segments after retention and an append: %v; want %d kept, the full one, one from offset %d (and maybe an empty one after it)",
			segs, shape.keep, r.BaseOffset)
	}
	recs := partlog.FetchAll(t, s.l, r.BaseOffset-3)
	if len(recs) != 4 || string(recs[3].Value) != "after retention" {
		t.Fatalf("read back %d records, want the 3 appended before retention and the one after", len(recs))
	}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkRetention10k: one retention of 10,000 closed ledgers (in
// memory), the list and ledgers rebuilt outside the timer.
func BenchmarkRetention10k(b *testing.B) {
	shape := scaleShape{ledgers: 10_000, keep: 3}
	for range b.N {
		b.StopTimer()
		s := buildScaleLog(b, shape, 0)
		b.StartTimer()
		s.enforce(b, shape)
	}
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
