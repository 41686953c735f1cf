package partlog

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/tiering/compact"
)

// Kafka aborts a log's cleaning when its cleanup.policy stops containing
// compact (LogManager.updateTopicConfig -> abortCleaning). A pass that
// began under compact and reaches its CAS after the topic was switched to
// delete must not swap in: the topic now keeps every record until
// retention, and the pass would remove superseded ones after the switch.
// The outputs are deleted and the log stays healthy (P7).
func TestCompactAbandonedWhenPolicyStopsCompacting(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(1)
	cfg.SegmentAge = time.Minute
	cfg.RetentionCheckInterval = time.Hour
	cfg.Policy = compactPolicy
	l := f.open(cfg)
	var m keyedModel
	for range 3 {
		m.appendKeyed(t, f, l, -1, 0, "a", "1", "b", "2")
		rollByAge(t, f, l)
	}
	before := l.Describe().Segments
	all := describeAll(fetchAll(t, l, 0))

	// The topic is switched to cleanup.policy=delete while the pass writes
	// its outputs (between their index write and the CAS).
	deletePolicy := compactPolicy
	deletePolicy.Compact, deletePolicy.Delete = false, true
	fired := false
	f.store.setBeforePut(func(key string) error {
		if !fired && strings.HasPrefix(key, LedgerIndexPrefix) {
			fired = true
			l.SetPolicy(deletePolicy)
		}
		return nil
	})
	res, err := l.Compact(testCtx(t), CompactOptions{Map: compact.NewOffsetMap(1 << 20)})
	f.store.setBeforePut(nil)
	if !fired {
		t.Fatal("the pass wrote no output index")
	}
	if !errors.Is(err, ErrCompactionStale) || res.Ran {
		t.Fatalf("Compact after the switch to delete: %+v, %v; want ErrCompactionStale", res, err)
	}
	if l.Err() != nil {
		t.Fatalf("log failed: %v", l.Err())
	}
	if got := describeAll(fetchAll(t, l, 0)); strings.Join(got, " ") != strings.Join(all, " ") {
		t.Fatalf("a delete topic lost records to a pass begun under compact:\n got %v\nwant %v", got, all)
	}
	if d := l.Describe(); d.CleanedOffset != 0 {
		t.Fatalf("cleaned offset %d after an abandoned pass", d.CleanedOffset)
	}
	checkNoLeftovers(t, f, l, before)
}
