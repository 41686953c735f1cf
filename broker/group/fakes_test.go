package group

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// memLog is an in-memory OffsetsLog. failNext makes the next appends fail
// (without storing anything); gate, when set, blocks Replay until closed.
type memLog struct {
	mu       sync.Mutex
	records  []recordbatch.Record
	batches  int
	failNext int
	gate     chan struct{}
	// poison: base offsets of undecodable batches Replay reports first.
	poison []int64
	// maxBatch, when set, is the batch bound the log reports
	// (BatchLimiter) and enforces on the encoded batch; largestBatch is
	// the largest encoded batch appended.
	maxBatch, largestBatch int
	// epoch: the owner's; appends through a view of an older owner fail
	// (a partition log is fenced when its ownership moves).
	epoch int
}

// errFenced: an append of a coordinator whose partition moved on.
var errFenced = errors.New("log fenced: the partition has a new owner")

// logView is memLog as one owner (coordinator) sees it.
type logView struct {
	*memLog
	epoch int
}

func (v *logView) Append(ctx context.Context, records []recordbatch.Record) error {
	return v.appendAs(v.epoch, records)
}

func (l *memLog) MaxBatchBytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxBatch
}

var (
	errInjected = errors.New("injected append failure")
	errTooLarge = errors.New("batch larger than max.message.bytes")
)

func (l *memLog) Append(ctx context.Context, records []recordbatch.Record) error {
	return l.appendAs(-1, records)
}

// appendAs appends for the owner of epoch (-1: any).
func (l *memLog) appendAs(epoch int, records []recordbatch.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if epoch >= 0 && epoch != l.epoch {
		return errFenced
	}
	if l.failNext > 0 {
		l.failNext--
		return errInjected
	}
	buf, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: records})
	if err != nil {
		return err
	}
	if l.maxBatch > 0 && len(buf) > l.maxBatch {
		return fmt.Errorf("%w: batch of %d bytes > %d", errTooLarge, len(buf), l.maxBatch)
	}
	l.largestBatch = max(l.largestBatch, len(buf))
	for _, r := range records {
		r.Offset = int64(len(l.records))
		r.Key, r.Value = slices.Clone(r.Key), cloneValue(r.Value)
		l.records = append(l.records, r)
	}
	l.batches++
	return nil
}

func cloneValue(v []byte) []byte {
	if v == nil {
		return nil
	}
	return append([]byte{}, v...)
}

func (l *memLog) Replay(ctx context.Context, fn func(recordbatch.Record) error) error {
	return l.ReplaySkipping(ctx, fn, func(off int64, err error) {
		panic(fmt.Sprintf("Replay cannot skip: batch at %d: %v", off, err))
	})
}

func (l *memLog) ReplaySkipping(ctx context.Context, fn func(recordbatch.Record) error, skip func(int64, error)) error {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.mu.Lock()
	records, poison := slices.Clone(l.records), slices.Clone(l.poison)
	l.mu.Unlock()
	for _, off := range poison {
		skip(off, errors.New("recordbatch: corrupt batch: 1 records cannot fit in 3 bytes"))
	}
	for _, r := range records {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (l *memLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.records)
}

// fakeTopics is a TopicSource backed by a map.
type fakeTopics struct {
	mu     sync.Mutex
	counts map[string]int32
}

func newTopics(kv ...any) *fakeTopics {
	t := &fakeTopics{counts: map[string]int32{}}
	for i := 0; i < len(kv); i += 2 {
		t.counts[kv[i].(string)] = int32(kv[i+1].(int))
	}
	return t
}

func (t *fakeTopics) Partitions(ctx context.Context, topic string) (int32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.counts[topic]
	if !ok {
		return 0, ErrUnknownTopic
	}
	return n, nil
}

func (t *fakeTopics) TopicNames(ctx context.Context) ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.counts)), nil
}

func (t *fakeTopics) remove(topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.counts, topic)
}

func (t *fakeTopics) set(topic string, n int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[topic] = n
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const (
	testSession   = 10 * time.Second
	testRebalance = 20 * time.Second
)

type env struct {
	t *testing.T
	// configure, when set, changes the config of every coordinator open
	// starts.
	configure func(*Config)
	log       *memLog
	topics    *fakeTopics
	clock     *fakeClock
	c         *Coordinator
}

func testConfig(log *memLog, topics *fakeTopics, clock *fakeClock) Config {
	return Config{
		Partition:         3,
		CoordinatorID:     "b1",
		Log:               log,
		Topics:            topics,
		Now:               clock.Now,
		SessionTimeout:    testSession,
		MinSessionTimeout: time.Second,
		MaxSessionTimeout: time.Minute,
		HeartbeatInterval: time.Second,
		RebalanceTimeout:  testRebalance,
		TickInterval:      -1,
		// Classic rounds complete as soon as every member joined; the
		// delay has its own tests.
		InitialRebalanceDelay: -1,
	}
}

func newEnv(t *testing.T, topics *fakeTopics) *env {
	t.Helper()
	e := &env{t: t, log: &memLog{}, topics: topics, clock: newClock()}
	e.c = e.open()
	return e
}

// open starts a coordinator on e.log and loads it.
func (e *env) open() *Coordinator {
	e.t.Helper()
	cfg := testConfig(e.log, e.topics, e.clock)
	e.log.mu.Lock()
	cfg.Log = &logView{e.log, e.log.epoch}
	e.log.mu.Unlock()
	if e.configure != nil {
		e.configure(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		e.t.Fatal(err)
	}
	c := New(cfg)
	if err := c.Load(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// failover closes the coordinator and opens a new one on the same log,
// fencing the old one's appends still in flight.
func (e *env) failover() {
	e.t.Helper()
	_ = e.c.Close()
	e.log.mu.Lock()
	e.log.epoch++
	e.log.mu.Unlock()
	e.c = e.open()
}

func (e *env) hb(group, id string, epoch int32, subs []string, owned tpSet) (*brokerpb.GroupHeartbeatResponse, error) {
	return e.c.Heartbeat(context.Background(), &brokerpb.GroupHeartbeatRequest{
		GroupId: group, MemberId: id, MemberEpoch: epoch, SubscribedTopics: subs, Owned: owned.toProto(),
	})
}

func (e *env) mustHB(group, id string, epoch int32, subs []string, owned tpSet) *brokerpb.GroupHeartbeatResponse {
	e.t.Helper()
	resp, err := e.hb(group, id, epoch, subs, owned)
	if err != nil {
		e.t.Fatalf("heartbeat %s/%s epoch %d: %v", group, id, epoch, err)
	}
	return resp
}

// tps builds a set from "topic:partition" pairs given as topic, p, p, ...
// groups: tps("a", 0, 1, "b", 2).
func tps(args ...any) tpSet {
	s := tpSet{}
	topic := ""
	for _, a := range args {
		switch v := a.(type) {
		case string:
			topic = v
		case int:
			s[TopicPartition{topic, int32(v)}] = struct{}{}
		}
	}
	return s
}
