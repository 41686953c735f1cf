package broker

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/group"
	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/compaction"
	"github.com/strata-log/strata/internal/racedetect"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
)

// A group coordinator loading a __consumer_offsets partition after
// 1,000,000 commits by 100 groups loads in time proportional to the live
// state. TestOffsetsLoadAfterMillionCommits writes 1,000,000 offset
// commits (100 groups x 10 partitions x 1,000 rounds, one CommitOffsets
// of 10 partitions per group and round) through a coordinator into one
// __consumer_offsets partition (partlog over in-memory bookies and metad),
// and loads a new coordinator over it:
//
//   - uncompacted: the load replays every one of the 1,000,000 records;
//   - after a compaction pass (partlog.Compact, as the broker's compactor
//     runs it) while the log is served: the 1,000 live offsets plus what
//     the open ledger holds (compaction never touches it);
//   - after a takeover (Close seals the open ledger, a new owner opens)
//     and one more pass: about the 1,000 live offsets, like
//   - a partition that only ever held the live state (1,000 commits).
//
// The assertions count records handed to the coordinator's replay (a
// count is robust, time is not); times (the fastest of 5 loads, but one
// of the uncompacted log) and CPU are logged. Every load
// must rebuild exactly the offsets the writer holds.
//
// Under the race detector it writes 200,000 commits;
// STRATA_OFFSETS_COMMITS=n sets the number (a multiple of 1,000).

const (
	loadGroups     = 100
	loadPartitions = 10
	// loadSegmentBytes is the segment.bytes of the partition. The topic
	// the broker creates keeps the 1 GiB default: see the report in
	// TestOffsetsLoadAfterMillionCommits.
	loadSegmentBytes = 1 << 20
)

// offsetsStore is an in-memory partlog.Store with metad's versions.
type offsetsStore struct {
	mu sync.Mutex
	kv map[string]offsetsValue
}

type offsetsValue struct {
	val     []byte
	version int64
}

func (s *offsetsStore) Get(_ context.Context, key string) ([]byte, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kv[key]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", metaclient.ErrNotFound, key)
	}
	return v.val, v.version, nil
}

func (s *offsetsStore) Put(_ context.Context, key string, value []byte, expected int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.kv[key]
	if expected >= 0 && cur.version != expected {
		return 0, fmt.Errorf("%w: %s at version %d, expected %d", metaclient.ErrVersionConflict, key, cur.version, expected)
	}
	v := offsetsValue{val: slices.Clone(value), version: cur.version + 1}
	s.kv[key] = v
	return v.version, nil
}

// PutWith is Put, then the records of with (one partition's takeover at
// a time here: nothing else writes between them).
func (s *offsetsStore) PutWith(ctx context.Context, key string, value []byte, expected int64, with []partlog.Record) (int64, []*metadpb.KeyValue, error) {
	v, err := s.Put(ctx, key, value, expected)
	if err != nil {
		return 0, nil, err
	}
	var written []*metadpb.KeyValue
	for _, r := range with {
		rv, err := s.Put(ctx, r.Key, r.Value, -1)
		if err != nil {
			return 0, nil, err
		}
		written = append(written, &metadpb.KeyValue{Key: r.Key, Value: r.Value, Version: rv, Lease: r.Lease})
	}
	return v, written, nil
}

func (s *offsetsStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.kv, key)
	return nil
}

func (s *offsetsStore) DeleteKeys(_ context.Context, keys []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.kv, k)
	}
	return nil
}

// countingLog is the broker's offsetsLog with the records its replay
// hands to the coordinator counted.
type countingLog struct {
	offsetsLog
	replayed atomic.Int64
}

func (c *countingLog) Replay(ctx context.Context, fn func(recordbatch.Record) error) error {
	return c.offsetsLog.Replay(ctx, c.count(fn))
}

func (c *countingLog) ReplaySkipping(ctx context.Context, fn func(recordbatch.Record) error, skip func(int64, error)) error {
	return c.offsetsLog.ReplaySkipping(ctx, c.count(fn), skip)
}

func (c *countingLog) count(fn func(recordbatch.Record) error) func(recordbatch.Record) error {
	return func(r recordbatch.Record) error {
		c.replayed.Add(1)
		return fn(r)
	}
}

// anyTopic says every topic has loadPartitions partitions.
type anyTopic struct{}

func (anyTopic) Partitions(context.Context, string) (int32, error) { return loadPartitions, nil }
func (anyTopic) TopicNames(context.Context) ([]string, error)      { return nil, nil }

// offsetsFixture is the bookies and metad one test's offsets partitions
// share.
type offsetsFixture struct {
	t       *testing.T
	cluster *ledgertest.Cluster
	store   *offsetsStore
	topic   TopicConfig
}

func newOffsetsFixture(t *testing.T) *offsetsFixture {
	// The configs the broker gives __consumer_offsets (ensureOffsetsTopic),
	// with a segment size that lets compaction reach the data.
	tc, err := ParseTopicConfig(map[string]string{"cleanup.policy": "compact", "segment.bytes": strconv.Itoa(loadSegmentBytes)})
	if err != nil {
		t.Fatal(err)
	}
	return &offsetsFixture{t: t, cluster: ledgertest.NewCluster(3), store: &offsetsStore{kv: map[string]offsetsValue{}}, topic: tc}
}

// open takes partition over with epoch, as a broker does (partlogConfig).
func (f *offsetsFixture) open(partition int32, epoch int64) *partlog.Log {
	f.t.Helper()
	tc := f.topic
	l, err := partlog.Open(context.Background(), partlog.Config{
		Topic: OffsetsTopic, Partition: partition, Epoch: epoch,
		Env: f.cluster.Env(), Store: f.store, Scheduler: f.cluster.Scheduler,
		Ensemble: tc.Ensemble, WriteQuorum: tc.WriteQuorum, AckQuorum: tc.AckQuorum,
		SegmentBytes: tc.SegmentBytes, SegmentAge: time.Duration(tc.SegmentMs) * time.Millisecond,
		MaxBatchBytes: tc.MaxMessageBytes, Policy: tc.Policy(),
		RollCheckInterval: time.Hour,
	})
	if err != nil {
		f.t.Fatalf("open %s/%d: %v", OffsetsTopic, partition, err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.Close(ctx)
	})
	return l
}

// coordinator returns a coordinator over l, not loaded yet.
func (f *offsetsFixture) coordinator(partition int32, l *partlog.Log) (*group.Coordinator, *countingLog) {
	f.t.Helper()
	log := &countingLog{offsetsLog: offsetsLog{l}}
	cfg := group.Config{Partition: partition, CoordinatorID: "b1", Log: log, Topics: anyTopic{}, TickInterval: -1}
	if err := cfg.Validate(); err != nil {
		f.t.Fatal(err)
	}
	c := group.New(cfg)
	f.t.Cleanup(func() { _ = c.Close() })
	return c, log
}

// commitRounds commits offset r for every partition of every group, for
// each round r in [from, to): one request of loadPartitions offsets per
// group and round, as a consumer commits what it consumed.
func commitRounds(t *testing.T, c *group.Coordinator, from, to int) {
	t.Helper()
	ctx := context.Background()
	req := &brokerpb.CommitOffsetsRequest{}
	for r := from; r < to; r++ {
		for g := range loadGroups {
			req.GroupId = fmt.Sprintf("group-%03d", g)
			req.Offsets = req.Offsets[:0]
			for p := range loadPartitions {
				req.Offsets = append(req.Offsets, &brokerpb.OffsetCommit{Topic: "orders", Partition: int32(p), Offset: int64(r)})
			}
			resp, err := c.Commit(ctx, req)
			if err != nil {
				t.Fatalf("commit round %d of %s: %v", r, req.GroupId, err)
			}
			for _, res := range resp.Results {
				if res.Error != nil {
					t.Fatalf("commit round %d of %s: %v", r, req.GroupId, res.Error)
				}
			}
		}
	}
}

// loadStats is one measured load.
type loadStats struct {
	replayed int64
	took     time.Duration
	cpu      time.Duration
}

func (s loadStats) String() string {
	return fmt.Sprintf("%d records replayed in %v (CPU %v)", s.replayed, s.took.Round(10*time.Microsecond), s.cpu.Round(10*time.Microsecond))
}

// load loads a new coordinator over l, times times, and returns the
// fastest (small loads take milliseconds: the first pays for warming
// up); each must hold want.
func (f *offsetsFixture) load(partition int32, l *partlog.Log, want []group.GroupOffset, times int) loadStats {
	f.t.Helper()
	best := f.loadOnce(partition, l, want)
	for range times - 1 {
		if st := f.loadOnce(partition, l, want); st.took < best.took {
			best = st
		}
	}
	return best
}

func (f *offsetsFixture) loadOnce(partition int32, l *partlog.Log, want []group.GroupOffset) loadStats {
	f.t.Helper()
	c, log := f.coordinator(partition, l)
	cpu0, start := processCPU(), time.Now()
	if err := c.Load(context.Background()); err != nil {
		f.t.Fatalf("load: %v", err)
	}
	st := loadStats{replayed: log.replayed.Load(), took: time.Since(start), cpu: processCPU() - cpu0}
	if got := c.Offsets(); !slices.Equal(got, want) {
		f.t.Fatalf("the load holds %d offsets, not the %d the writer holds (first: %v / %v)", len(got), len(want),
			firstOr(got), firstOr(want))
	}
	_ = c.Close()
	return st
}

func firstOr(o []group.GroupOffset) any {
	if len(o) == 0 {
		return nil
	}
	return o[0]
}

// compactAll runs compaction passes on l as the broker's compactor does
// (its map size and time bound) until one has nothing to do.
func compactAll(t *testing.T, l *partlog.Log, m *compact.OffsetMap) []compaction.Result {
	t.Helper()
	var out []compaction.Result
	for range 10 {
		res, err := compaction.Compact(context.Background(), l, compaction.Options{Map: m, MaxDuration: DefaultConfig().OrphanLedgerGrace / 2})
		if err != nil {
			t.Fatalf("compact: %v", err)
		}
		if !res.Ran {
			return out
		}
		out = append(out, res)
	}
	t.Fatalf("compaction still running after 10 passes")
	return nil
}

// offsetsDefaultSegmentBytes is the segment.bytes of the
// __consumer_offsets the broker creates (ensureOffsetsTopic).
func offsetsDefaultSegmentBytes(t *testing.T) int64 {
	tc, err := ParseTopicConfig(map[string]string{"cleanup.policy": "compact"})
	if err != nil {
		t.Fatal(err)
	}
	return tc.SegmentBytes
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestOffsetsLoadAfterMillionCommits(t *testing.T) {
	commits := 1_000_000
	if racedetect.Enabled {
		// 1,000,000 commits take 45 s and 2 GB under the race detector
		// (make test): a fifth shows the same.
		commits = 200_000
	}
	if s := os.Getenv("STRATA_OFFSETS_COMMITS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < loadGroups*loadPartitions {
			t.Fatalf("STRATA_OFFSETS_COMMITS=%q: want a number >= %d", s, loadGroups*loadPartitions)
		}
		commits = n
	}
	rounds := commits / (loadGroups * loadPartitions)
	live := int64(loadGroups * loadPartitions)
	f := newOffsetsFixture(t)

	// The live state alone: one round, on partition 1.
	base := f.open(1, 1)
	writer, _ := f.coordinator(1, base)
	if err := writer.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	commitRounds(t, writer, 0, 1)
	baseline := f.load(1, base, writer.Offsets(), 5)
	if baseline.replayed != live {
		t.Fatalf("the live-state partition replays %d records, want %d", baseline.replayed, live)
	}

	// The history: every round, on partition 0.
	l := f.open(0, 1)
	writer, _ = f.coordinator(0, l)
	if err := writer.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	cpu0, start := processCPU(), time.Now()
	commitRounds(t, writer, 0, rounds)
	wrote, wroteCPU := time.Since(start), processCPU()-cpu0
	want := writer.Offsets()
	if len(want) != int(live) {
		t.Fatalf("the writer holds %d offsets, want %d", len(want), live)
	}
	pl := l.Describe()
	var logBytes int64
	for _, s := range pl.Segments {
		logBytes += s.Bytes
	}
	t.Logf("wrote %d commits (%d batches) in %v (CPU %v): %d ledgers of segment.bytes %d, %d bytes in closed ledgers; "+
		"with the topic's default segment.bytes (%d) it would all be in the open ledger",
		commits, commits/loadPartitions, wrote.Round(time.Millisecond), wroteCPU.Round(time.Millisecond),
		len(pl.Segments), loadSegmentBytes, logBytes, offsetsDefaultSegmentBytes(t))

	uncompacted := f.load(0, l, want, 1)
	if uncompacted.replayed != int64(commits) {
		t.Fatalf("the uncompacted load replays %d records, want all %d", uncompacted.replayed, commits)
	}

	// The broker's compactor, while the log is served.
	m := compact.NewOffsetMap(int(DefaultConfig().CompactionMapBytes))
	cpu0, start = processCPU(), time.Now()
	passes := compactAll(t, l, m)
	compacted, compactedCPU := time.Since(start), processCPU()-cpu0
	if len(passes) == 0 {
		t.Fatal("compaction did not run")
	}
	var in, out int64
	for _, p := range passes {
		in, out = in+p.Stats.BytesIn, out+p.Stats.BytesOut
	}
	open := l.Describe().Segments
	openFirst := open[len(open)-1].FirstOffset
	tail := l.HighWatermark() - openFirst // the open ledger: dense, never compacted
	served := f.load(0, l, want, 5)
	if limit := 2*live + tail; served.replayed > limit {
		t.Errorf("after compaction the load replays %d records, more than 2 x %d live + %d in the open ledger",
			served.replayed, live, tail)
	}

	// A takeover: the old owner seals its ledger, the new one compacts.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := f.open(0, 2)
	passes2 := compactAll(t, l2, m)
	takenOver := f.load(0, l2, want, 5)
	if limit := 2 * live; takenOver.replayed > limit {
		t.Errorf("after a takeover and compaction the load replays %d records, more than 2 x %d live", takenOver.replayed, live)
	}

	t.Logf("compaction: %d passes, %v (CPU %v), %d bytes in, %d out; then %d more after the takeover",
		len(passes), compacted.Round(time.Millisecond), compactedCPU.Round(time.Millisecond), in, out, len(passes2))
	t.Logf("load, live state only (%d commits):       %v", live, baseline)
	t.Logf("load, %d commits, uncompacted:        %v", commits, uncompacted)
	t.Logf("load, compacted, served (open ledger %d): %v", tail, served)
	t.Logf("load, compacted after a takeover:         %v", takenOver)
	t.Logf("compacted load / live-state load: %.1fx time, %.2fx records; uncompacted: %.1fx time",
		takenOver.took.Seconds()/baseline.took.Seconds(), float64(takenOver.replayed)/float64(baseline.replayed),
		uncompacted.took.Seconds()/baseline.took.Seconds())
}
