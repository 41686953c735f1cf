package partlog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/metadpb"
	"github.com/strata-log/strata/recordbatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const WaitTimeout = 10 * time.Second

func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// memStore is an in-memory Store with versions (metad's semantics:
// version 1 at creation, +1 per write). beforePut, when set, runs before
// every Put (outside the lock) and may fail it; afterPut runs after a Put
// stored its value and may fail it anyway (an answer lost on the way).
type MemStore struct {
	mu                  sync.Mutex
	kv                  map[string]memValue
	beforePut, afterPut func(key string) error
}

type memValue struct {
	val     []byte
	version int64
}

func NewMemStore() *MemStore { return &MemStore{kv: make(map[string]memValue)} }

func (s *MemStore) Get(ctx context.Context, key string) ([]byte, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kv[key]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", metaclient.ErrNotFound, key)
	}
	return v.val, v.version, nil
}

func (s *MemStore) Put(ctx context.Context, key string, value []byte, expected int64) (int64, error) {
	v, _, err := s.PutWith(ctx, key, value, expected, nil)
	return v, err
}

// PutWith runs the hooks for key only and writes the
// records of with with it, all under the lock.
func (s *MemStore) PutWith(ctx context.Context, key string, value []byte, expected int64, with []Record) (int64, []*metadpb.KeyValue, error) {
	s.mu.Lock()
	hook := s.beforePut
	s.mu.Unlock()
	if hook != nil {
		if err := hook(key); err != nil {
			return 0, nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.kv[key]
	if expected >= 0 && cur.version != expected {
		return 0, nil, fmt.Errorf("%w: %s at version %d, expected %d", metaclient.ErrVersionConflict, key, cur.version, expected)
	}
	v := memValue{val: append([]byte(nil), value...), version: cur.version + 1}
	s.kv[key] = v
	var written []*metadpb.KeyValue
	for _, r := range with {
		w := memValue{val: append([]byte(nil), r.Value...), version: s.kv[r.Key].version + 1}
		s.kv[r.Key] = w
		written = append(written, &metadpb.KeyValue{Key: r.Key, Value: w.val, Version: w.version, Lease: r.Lease})
	}
	if s.afterPut != nil {
		if err := s.afterPut(key); err != nil {
			return 0, nil, err
		}
	}
	return v.version, written, nil
}

func (s *MemStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.kv, key)
	return nil
}

func (s *MemStore) DeleteKeys(_ context.Context, keys []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.kv, k)
	}
	return nil
}

func (s *MemStore) SetBeforePut(f func(string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforePut = f
}

func (s *MemStore) SetAfterPut(f func(string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterPut = f
}

type ledgerInFlight = ledgertest.InFlightAdd

// fakeClock is a settable clock.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func NewFakeClock() *FakeClock { return &FakeClock{now: time.UnixMilli(1_700_000_000_000)} }

func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fixture is a cluster, a store and a clock shared by the logs of a test.
type Fixture struct {
	t       testing.TB
	Cluster *ledgertest.Cluster
	Store   *MemStore
	Clock   *FakeClock
	Cache   *TailCache
}

// quorumAndSpares returns two of the bookies of l's open ledger and every
// bookie outside its ensemble: with them failed the writer has no ack
// quorum and no spare.
func (f *Fixture) quorumAndSpares(l *Log) []string {
	l.mu.Lock()
	w := l.mu.writer
	l.mu.Unlock()
	ensemble := w.Metadata().Fragments[0].Bookies
	out := []string{ensemble[0], ensemble[1]}
	for _, b := range f.Cluster.Bookies.Addrs() {
		if !slices.Contains(ensemble, b) {
			out = append(out, b)
		}
	}
	return out
}

// failBookies crashes bookies and lists them read-only.
func (f *Fixture) failBookies(bookies []string) {
	for _, b := range bookies {
		f.Cluster.Bookies.Crash(b)
		f.Cluster.Registry.SetState(b, bookiepb.BookieState_READ_ONLY)
	}
}

// restoreBookies restarts bookies and lists them writable again.
func (f *Fixture) restoreBookies(bookies []string) {
	for _, b := range bookies {
		f.Cluster.Bookies.Restart(b)
		f.Cluster.Registry.SetState(b, bookiepb.BookieState_WRITABLE)
	}
}

// logValues is the value of every record of l, in offset order.
func logValues(t testing.TB, l *Log) []string {
	var out []string
	for _, rec := range FetchAll(t, l, 0) {
		out = append(out, string(rec.Value))
	}
	return out
}

func NewFixture(t testing.TB) *Fixture {
	return &Fixture{t: t, Cluster: ledgertest.NewCluster(4), Store: NewMemStore(), Clock: NewFakeClock(),
		Cache: NewTailCache(64<<20, nil)}
}

func (f *Fixture) Config(epoch int64) Config {
	return Config{
		Topic: "orders", Partition: 3, Epoch: epoch,
		Env: f.Cluster.Env(), Store: f.Store,
		Cache: f.Cache, Now: f.Clock.Now, SequenceGapWait: 50 * time.Millisecond, Scheduler: f.Cluster.Scheduler,
		RollCheckInterval: time.Hour, // tests roll explicitly
	}
}

func (f *Fixture) Open(cfg Config) *Log {
	f.t.Helper()
	l, err := Open(Ctx(f.t), cfg)
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Close(ctx)
	})
	return l
}

// batch encodes a non-idempotent batch of values; record i has timestamp
// ts+i.
func Batch(t testing.TB, ts int64, values ...string) []byte {
	return IdemBatch(t, -1, -1, -1, ts, values...)
}

func IdemBatch(t testing.TB, pid int64, epoch int16, seq int32, ts int64, values ...string) []byte {
	t.Helper()
	recs := make([]recordbatch.Record, len(values))
	for i, v := range values {
		recs[i] = recordbatch.Record{TimestampMs: ts + int64(i), Value: []byte(v)}
	}
	b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func MustAppend(t testing.TB, l *Log, b []byte, acks Acks) AppendResult {
	t.Helper()
	r, err := l.Append(Ctx(t), b, acks)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return r
}

// decodeAll decodes fetched batches into records.
func DecodeAll(t testing.TB, records []byte) []recordbatch.Record {
	t.Helper()
	batches, err := recordbatch.Split(records)
	if err != nil {
		t.Fatalf("Split: %v", err)
	}
	var out []recordbatch.Record
	for _, b := range batches {
		if _, err := recordbatch.Verify(b); err != nil {
			t.Fatalf("fetched batch: %v", err)
		}
		_, recs, err := recordbatch.Decode(b)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		out = append(out, recs...)
	}
	return out
}

// fetchAll reads every record from offset to the high watermark.
func FetchAll(t testing.TB, l *Log, from int64) []recordbatch.Record {
	t.Helper()
	var out []recordbatch.Record
	for off := from; off < l.HighWatermark(); {
		res, err := l.Fetch(Ctx(t), off, 1000, 0)
		if err != nil {
			t.Fatalf("Fetch(%d): %v", off, err)
		}
		recs := DecodeAll(t, res.Records())
		n := 0
		for _, r := range recs {
			if r.Offset >= off {
				out = append(out, r)
				n++
			}
		}
		if n == 0 {
			t.Fatalf("Fetch(%d) returned no record at or after it (hw %d)", off, l.HighWatermark())
		}
		off = out[len(out)-1].Offset + 1
	}
	return out
}

// IsRunning reports whether the log's run goroutine is started (start)
// and has not ended (stopIfIdle).
func (l *Log) IsRunning() bool {
	l.appendSem <- struct{}{}
	defer l.release()
	return l.rolls.running
}

// rollByAge makes the open segment older than its SegmentAge and rolls
// it: it is sealed, and no segment is open until the next append (P8).
func RollByAge(t *testing.T, f *Fixture, l *Log) {
	t.Helper()
	f.Clock.Advance(l.Limits().SegmentAge + time.Second)
	before := len(l.Describe().Segments)
	RollNow(t, l)
	segs := l.Describe().Segments
	if got := len(segs); got != before || got == 0 || !segs[got-1].Closed {
		t.Fatalf("segments after a roll: %v, want the %d there were with the last sealed", segs, before)
	}
}

func DescribeRecord(r recordbatch.Record) string {
	v := "<tombstone>"
	if r.Value != nil {
		v = string(r.Value)
	}
	return fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, v)
}

func DescribeAll(recs []recordbatch.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = DescribeRecord(r)
	}
	return out
}

// Keys are the keys the store holds under prefix.
func (s *MemStore) Keys(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k := range s.kv {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	return keys
}
