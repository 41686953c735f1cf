package partlog_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/compaction"
	"github.com/strata-log/strata/broker/partlog/retention"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/compact"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
)

// Kafka aborts a log's cleaning when its cleanup.policy stops containing
// compact (LogManager.updateTopicConfig -> abortCleaning). A pass that
// began under compact and reaches its CAS after the topic was switched to
// delete must not swap in: the topic now keeps every record until
// retention, and the pass would remove superseded ones after the switch.
// The outputs are deleted and the log stays healthy (P7).
func TestCompactAbandonedWhenPolicyStopsCompacting(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := compactConfig(f, 1)
	l := f.Open(cfg)
	var m keyedModel
	for range 3 {
		m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "2")
		partlog.RollByAge(t, f, l)
	}
	before := l.Describe().Segments
	all := partlog.DescribeAll(partlog.FetchAll(t, l, 0))

	// The topic is switched to cleanup.policy=delete while the pass writes
	// its outputs (between their index write and the CAS).
	deletePolicy := compactPolicy
	deletePolicy.Compact, deletePolicy.Delete = false, true
	fired := false
	f.Store.SetBeforePut(func(key string) error {
		if !fired && strings.HasPrefix(key, partlog.LedgerIndexPrefix) {
			fired = true
			l.SetPolicy(deletePolicy)
		}
		return nil
	})
	res, err := compaction.Compact(partlog.Ctx(t), l, compaction.Options{Map: compact.NewOffsetMap(1 << 20)})
	f.Store.SetBeforePut(nil)
	if !fired {
		t.Fatal("the pass wrote no output index")
	}
	if !errors.Is(err, compaction.ErrStale) || res.Ran {
		t.Fatalf("Compact after the switch to delete: %+v, %v; want compaction.ErrStale", res, err)
	}
	if l.Err() != nil {
		t.Fatalf("log failed: %v", l.Err())
	}
	if got := partlog.DescribeAll(partlog.FetchAll(t, l, 0)); strings.Join(got, " ") != strings.Join(all, " ") {
		t.Fatalf("a delete topic lost records to a pass begun under compact:\n got %v\nwant %v", got, all)
	}
	if d := l.Describe(); d.CleanedOffset != 0 {
		t.Fatalf("cleaned offset %d after an abandoned pass", d.CleanedOffset)
	}
	checkNoLeftovers(t, f, l, before)
}

// max.compaction.lag.ms bounds how long a record stays ineligible for
// compaction (KIP-354), and the open ledger never is eligible (C9): a
// partition that takes a record now and then (never idle for IdleRoll)
// and stays below segment.bytes must still roll once its open ledger is
// max.compaction.lag.ms old, as Kafka rolls its active segment at
// min(segment.ms, max.compaction.lag.ms). Without that roll its records
// wait for segment.ms (7 days by default) whatever max.compaction.lag.ms
// says.
func TestMaxCompactionLagRollsTheOpenLedger(t *testing.T) {
	f := partlog.NewFixture(t)
	cfg := f.Config(1)
	cfg.SegmentAge = 24 * time.Hour
	cfg.IdleRoll = 24 * time.Hour
	cfg.Policy = compactPolicy
	cfg.Policy.Compaction = compact.Policy{MaxCompactionLagMs: time.Minute.Milliseconds(), MinCleanableDirtyRatio: 0.5}
	l := f.Open(cfg)
	var m keyedModel
	m.appendKeyed(t, f, l, -1, 0, "a", "1")
	for range 3 { // a record every 30 s: never idle
		f.Clock.Advance(30 * time.Second)
		m.appendKeyed(t, f, l, -1, 0, "a", "2")
	}
	// run's timer follows the deadline, so it may have rolled at 60 s,
	// before the third append, which then opened a younger ledger that
	// stays open; else this roll finds the first ledger 90 s old. Either
	// way no open ledger is older than the lag.
	partlog.RollNow(t, l)
	lagged := f.Clock.Now().Add(-time.Minute).UnixMilli()
	segs := l.Describe().Segments
	if len(segs) == 0 || !segs[0].Closed || slices.ContainsFunc(segs, func(s *brokerpb.LedgerSegment) bool {
		return !s.Closed && s.CreatedAtMs <= lagged
	}) {
		t.Fatalf("open ledger %v old with max.compaction.lag.ms=1m did not roll: segments %v", 90*time.Second, segs)
	}
	// Past the lag every ledger has rolled and is cleanable, and a pass runs.
	f.Clock.Advance(2 * time.Minute)
	partlog.RollNow(t, l)
	if segs := l.Describe().Segments; slices.ContainsFunc(segs, func(s *brokerpb.LedgerSegment) bool { return !s.Closed }) {
		t.Fatalf("a ledger %v old is still open: segments %v", 2*time.Minute, segs)
	}
	res := compactNow(t, l, 1<<20)
	if !res.Ran {
		t.Fatalf("no pass after max.compaction.lag.ms: %+v", res)
	}
	if got := partlog.DescribeAll(partlog.FetchAll(t, l, 0)); strings.Join(got, " ") != "3:a=2" {
		t.Fatalf("records %v, want only the latest", got)
	}

	// The default (never) leaves the roll to segment.ms.
	p := cfg.Policy
	p.Compaction = compact.DefaultPolicy()
	l.SetPolicy(p)
	m.appendKeyed(t, f, l, -1, 0, "b", "1")
	f.Clock.Advance(2 * time.Hour)
	m.appendKeyed(t, f, l, -1, 0, "b", "2")
	before := len(l.Describe().Segments)
	partlog.RollNow(t, l)
	if got := len(l.Describe().Segments); got != before {
		t.Fatalf("rolled without a max.compaction.lag.ms: %d segments, want %d", got, before)
	}
}

// An object retention or a compaction swap unlinked waits in the garbage
// queue for DeleteDelay, so that a fetch that chose it just before the
// CAS still reads it (T6). The orphan sweep must not take it for an
// orphan: it is not in the tiered list, and an object uploaded more than
// OrphanGrace ago was deleted by the next sweep, DeleteDelay or not.
func TestOrphanSweepLeavesQueuedGarbageToItsDelay(t *testing.T) {
	f := partlog.NewFixture(t)
	// Every object looks two hours old to the sweep (real clock).
	store := memstore.New(memstore.Options{Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	tier := &partlog.Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "p/", SegmentBytes: 1,
		OrphanGrace: time.Hour, DeleteDelay: time.Hour}
	l, pol, first := openWithTwoObjects(t, f, tier)
	pol.Delete, pol.RetentionBytes = true, l.Describe().Tiered[1].DataBytes
	l.SetPolicy(pol)
	if cut, err := retention.Enforce(partlog.Ctx(t), l); err != nil || cut.Pieces != 1 {
		t.Fatalf("retention: %+v, %v", cut, err)
	}
	if err := tierpass.Run(partlog.Ctx(t), l, true); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Stat(partlog.Ctx(t), first.ObjectKey); err != nil {
		t.Fatalf("the orphan sweep deleted a queued object before DeleteDelay: %v", err)
	}
	if g := l.Describe().Garbage; len(g) != 1 || g[0].ObjectKey != first.ObjectKey {
		t.Fatalf("garbage %v", g)
	}
	// The queue deletes it once the delay has passed.
	f.Clock.Advance(tier.DeleteDelay)
	if err := tierpass.Run(partlog.Ctx(t), l, true); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Stat(partlog.Ctx(t), first.ObjectKey); !errors.Is(err, objstore.ErrNotFound) || len(l.Describe().Garbage) != 0 {
		t.Fatalf("after DeleteDelay: the object %v, garbage %v", err, l.Describe().Garbage)
	}
}
