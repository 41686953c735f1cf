package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A classic group of franz-go consumers (cooperative-sticky, its default)
// shares a topic's partitions and reads every record once between them;
// a second client of the same group resumes at the committed offsets.
func TestClassicGroupConsumes(t *testing.T) {
	c := kafkaCluster(t, 1)
	c.CreateTopic("grouped", 4, nil)
	ctx := testCtx(t)
	p := kgoClient(t, c)
	const n = 400
	for i := range n {
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: "grouped", Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	consume := func(cl *kgo.Client, until func() bool) {
		for !until() && ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := cl.PollFetches(pctx)
			cancel()
			if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("poll: %v", err)
				return
			}
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
			mu.Unlock()
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	opts := []kgo.Opt{kgo.ConsumerGroup("readers"), kgo.ConsumeTopics("grouped"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond)}
	a, b := kgoClient(t, c, opts...), kgoClient(t, c, opts...)
	var wg sync.WaitGroup
	for _, cl := range []*kgo.Client{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); consume(cl, func() bool { return count() >= n }) }()
	}
	wg.Wait()
	for v, k := range seen {
		if k != 1 {
			t.Errorf("%s read %d times", v, k)
		}
	}
	if err := a.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
}
