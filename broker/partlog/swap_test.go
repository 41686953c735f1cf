package partlog_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// hookStore is a Store whose Get of one key runs a hook, once, before it
// answers: the place to swap a compaction in between a read's snapshot of
// the list and its read of a ledger index.
type hookStore struct {
	*partlog.MemStore
	mu   sync.Mutex
	key  string
	hook func() error
	gets int // Gets of key
}

func (s *hookStore) arm(key string, hook func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key, s.hook, s.gets = key, hook, 0
}

func (s *hookStore) Get(ctx context.Context, key string) ([]byte, int64, error) {
	s.mu.Lock()
	var hook func() error
	if key == s.key {
		s.gets++
		hook, s.hook = s.hook, nil
	}
	s.mu.Unlock()
	if hook != nil {
		if err := hook(); err != nil {
			return nil, 0, err
		}
	}
	return s.MemStore.Get(ctx, key)
}

func (s *hookStore) getsOf() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// hookMeta is ledger metadata whose Get of one ledger runs a hook, once,
// before it answers (ledger.OpenReader starts there).
type hookMeta struct {
	ledger.MetadataStore
	mu   sync.Mutex
	id   uint64
	hook func()
}

func (m *hookMeta) arm(id uint64, hook func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.id, m.hook = id, hook
}

func (m *hookMeta) Get(ctx context.Context, id uint64) (*ledgerpb.LedgerMetadata, int64, error) {
	m.mu.Lock()
	var hook func()
	if id == m.id {
		hook, m.hook = m.hook, nil
	}
	m.mu.Unlock()
	if hook != nil {
		hook()
	}
	return m.MetadataStore.Get(ctx, id)
}

// swapFixture is a compacted log of six closed segments of keyed
// records (timestamps rising by 1 ms a batch) and an open one, read
// without a tail cache so that a lookup reads the ledgers; seg2Ts is the
// timestamp of segment 2's first record.
type swapFixture struct {
	f      *partlog.Fixture
	l      *partlog.Log
	store  *hookStore
	meta   *hookMeta
	seg2Ts int64
}

func newSwapFixture(t *testing.T) *swapFixture {
	f := partlog.NewFixture(t)
	sf := &swapFixture{f: f, store: &hookStore{MemStore: f.Store}}
	cfg := compactConfig(f, 1)
	cfg.Cache = nil
	cfg.Store = sf.store
	env := f.Cluster.Env()
	sf.meta = &hookMeta{MetadataStore: env.Meta}
	env.Meta = sf.meta
	cfg.Env = env
	sf.l = f.Open(cfg)
	rng := rand.New(rand.NewPCG(5, 6))
	var m keyedModel
	for seg := range 6 {
		if seg == 2 {
			sf.seg2Ts = f.Clock.Now().UnixMilli()
		}
		for range 5 {
			var kv []string
			for range 1 + rng.IntN(4) {
				kv = append(kv, fmt.Sprintf("k%d", rng.IntN(6)), fmt.Sprintf("v%d", rng.IntN(1000)))
			}
			m.appendKeyed(t, f, sf.l, -1, 0, kv...)
			f.Clock.Advance(time.Millisecond)
		}
		partlog.RollByAge(t, f, sf.l)
	}
	m.appendKeyed(t, f, sf.l, -1, 0, "open", "tail")
	return sf
}

// wantOffsetForTime is the answer of a lookup of ts over what the log
// holds now: its first record at or after ts, or the high watermark.
func (sf *swapFixture) wantOffsetForTime(t *testing.T, ts int64) (int64, int64) {
	t.Helper()
	for _, r := range partlog.FetchAll(t, sf.l, 0) {
		if r.TimestampMs >= ts {
			return r.Offset, r.TimestampMs
		}
	}
	return sf.l.HighWatermark(), -1
}

// TestListOffsetAcrossSwap: a ListOffset by timestamp that took its
// snapshot of the list before a compaction swapped in (P7) and then reads
// a replaced ledger (its index, or its entries from the bookies), both
// deleted after the swap, looks up again in the new list and answers
// instead of failing with a read error. An error of a ledger still listed is returned as
// is, not retried.
func TestListOffsetAcrossSwap(t *testing.T) {
	compactInputs := func(t *testing.T, sf *swapFixture) func() {
		return func() {
			res := compactNow(t, sf.l, 1<<20)
			if !res.Ran || res.InputLedgers != 6 {
				t.Fatalf("the pass during the lookup: %+v", res)
			}
		}
	}
	check := func(t *testing.T, sf *swapFixture, replaced []*brokerpb.LedgerSegment) {
		t.Helper()
		off, ts, err := sf.l.ListOffset(partlog.Ctx(t), sf.seg2Ts)
		if err != nil {
			t.Fatalf("ListOffset(%d) across a swap: %v", sf.seg2Ts, err)
		}
		if sf.l.Describe().Segments[0].LedgerId == replaced[0].LedgerId {
			t.Fatal("no compaction was swapped in during the lookup")
		}
		wantOff, wantTs := sf.wantOffsetForTime(t, sf.seg2Ts)
		if off != wantOff || ts != wantTs {
			t.Fatalf("ListOffset(%d) = %d, %d; want %d, %d", sf.seg2Ts, off, ts, wantOff, wantTs)
		}
		checkNoLeftovers(t, sf.f, sf.l, replaced)
	}

	t.Run("index of a replaced ledger", func(t *testing.T) {
		sf := newSwapFixture(t)
		before := sf.l.Describe().Segments
		// Segments 0 and 1 end before seg2Ts: the lookup starts with
		// segment 2's index, read from metad (a cold cache, as on a new
		// owner), which the swap deletes.
		sf.l.ForgetCached(before[2].LedgerId)
		sf.store.arm(partlog.IndexKey(before[2].LedgerId), func() error { compactInputs(t, sf)(); return nil })
		check(t, sf, before[:6])
		if n := sf.store.getsOf(); n != 1 {
			t.Fatalf("segment 2's index read %d times, want once (then the new list)", n)
		}
	})

	t.Run("entries of a replaced ledger", func(t *testing.T) {
		sf := newSwapFixture(t)
		before := sf.l.Describe().Segments
		// The index is cached: the lookup goes on to open segment 2's
		// ledger, which the swap deletes.
		if _, err := sf.l.CachedIndex(partlog.Ctx(t), before[2].LedgerId); err != nil {
			t.Fatal(err)
		}
		sf.meta.arm(before[2].LedgerId, compactInputs(t, sf))
		check(t, sf, before[:6])
	})

	t.Run("error of a listed ledger", func(t *testing.T) {
		sf := newSwapFixture(t)
		before := sf.l.Describe().Segments
		injected := errors.New("injected: metad unavailable")
		sf.l.ForgetCached(before[2].LedgerId)
		sf.store.arm(partlog.IndexKey(before[2].LedgerId), func() error { return injected })
		if _, _, err := sf.l.ListOffset(partlog.Ctx(t), sf.seg2Ts); !errors.Is(err, injected) {
			t.Fatalf("ListOffset with segment 2's index unreadable: %v, want the injected error", err)
		}
		if n := sf.store.getsOf(); n != 1 {
			t.Fatalf("segment 2's index read %d times: a read error of a listed ledger was retried", n)
		}
	})
}
