package ctxtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPacer(t *testing.T) {
	now := time.Unix(1000, 0)
	var slept []time.Duration
	p := NewPacer(1000, func() time.Time { return now })
	p.sleep = func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		now = now.Add(d)
		return nil
	}
	ctx := context.Background()
	steps := []struct {
		read    int
		elapsed time.Duration // the clock moves this much before the read
		want    time.Duration // sleep; 0: none
	}{
		{1000, 0, time.Second},           // 1 s of budget read at once: wait it out
		{5, 0, 0},                        // 5 ms ahead: below PacerMinSleep, go on
		{20, 0, 25 * time.Millisecond},   // 25 ms ahead
		{100, 200 * time.Millisecond, 0}, // behind the rate: no wait
		{400, 0, 300 * time.Millisecond}, // due at 1.525 s, now 1.225 s
	}
	for i, s := range steps {
		now = now.Add(s.elapsed)
		slept = nil
		if err := p.Wait(ctx, s.read); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		var got time.Duration
		if len(slept) > 0 {
			got = slept[0]
		}
		if got != s.want {
			t.Errorf("step %d (read %d after %s): slept %s, want %s", i, s.read, s.elapsed, got, s.want)
		}
	}

	// No rate, or no pacer: never waits.
	for _, q := range []*Pacer{NewPacer(0, time.Now), nil} {
		if err := q.Wait(ctx, 1<<30); err != nil {
			t.Fatal(err)
		}
	}
	// A wait ends with the context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := NewPacer(1, time.Now).Wait(cctx, 1000); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}
