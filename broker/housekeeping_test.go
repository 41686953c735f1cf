package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

// sweepEvery skips an item whose last call has not returned (the others
// go on round after round), never runs more than workers calls at once,
// and returns only after the calls it started.
func TestSweepEverySkipsBusyItems(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	var mu sync.Mutex
	calls := map[string][]int{}
	running, most := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweepEvery(ctx, 5*time.Millisecond, 2, func() []string { return []string{"slow", "a", "b"} }, func(item string, round int) {
			mu.Lock()
			calls[item] = append(calls[item], round)
			running++
			most = max(most, running)
			mu.Unlock()
			if item == "slow" {
				<-release
			}
			mu.Lock()
			running--
			mu.Unlock()
		})
	}()
	testwait.Until(t, 10*time.Second, "ten rounds of the others while slow is busy", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls["a"]) >= 10 && len(calls["b"]) >= 10
	})
	mu.Lock()
	if n := len(calls["slow"]); n != 1 {
		t.Errorf("slow called %d times while its first call was running, want 1", n)
	}
	if most > 2 {
		t.Errorf("%d calls at once, want at most 2 workers", most)
	}
	mu.Unlock()
	close(release)
	testwait.Until(t, 10*time.Second, "slow called again once its call returned", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls["slow"]) >= 2
	})
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if running != 0 {
		t.Errorf("sweepEvery returned with %d calls running", running)
	}
}
