package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/testwait"
)

// TestOffsetsLoad1M (STRATA_LOAD_1M=1; real processes: 3 metad, 3
// bookies, one broker, one __consumer_offsets partition): 1,000,000
// commits by 100 groups, then the coordinator's load time after a kill -9
// and restart, uncompacted (every commit sits in the one ledger the dead
// owner left open: the topic's default segment.bytes is 1 GiB), then
// again once the compactor has compacted that ledger. The in-process
// TestOffsetsLoadAfterMillionCommits (broker) counts the records each
// load replays; this one reports the broker's own
// strata_broker_group_coordinator_load_duration_seconds.
//
// The coordinator writes a commit before it answers, holding its lock,
// so one partition commits one request per quorum write: to keep the
// test in minutes each request commits STRATA_LOAD_1M_PARTITIONS
// partitions (default 100: 10,000 live offsets, 10,000 requests).
func TestOffsetsLoad1M(t *testing.T) {
	if os.Getenv("STRATA_LOAD_1M") != "1" {
		t.Skip("STRATA_LOAD_1M=1 runs it (a few minutes)")
	}
	const groups, commits = 100, 1_000_000
	partitions := 100
	if s := os.Getenv("STRATA_LOAD_1M_PARTITIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || commits%(groups*n) != 0 {
			t.Fatalf("STRATA_LOAD_1M_PARTITIONS=%q: want a divisor of %d", s, commits/groups)
		}
		partitions = n
	}
	rounds := commits / (groups * partitions)
	c := startStrata(t, 1, "--offsets-partitions=1", "--compaction-check-interval=5s")
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "load-orders", int32(partitions), nil)
	admin := "http://" + c.brokers[0].AdminAddr + "/metrics"

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offsets := map[client.TopicPartition]int64{}
			for r := range rounds {
				for p := range partitions {
					offsets[client.TopicPartition{Topic: "load-orders", Partition: int32(p)}] = int64(r)
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := cl.CommitGroupOffsets(cctx, fmt.Sprintf("load-%03d", g), offsets)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("group %d round %d: %w", g, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wrote := time.Since(start)
	bytesOf := func() int64 {
		d, err := cl.DescribeTopic(ctx, "__consumer_offsets")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, p := range d.Partitions {
			n += p.Bytes
		}
		return n
	}
	before := bytesOf()
	t.Logf("wrote %d commits (%d requests of %d partitions) in %v: %.0f commits/s; __consumer_offsets holds %d bytes",
		commits, commits/partitions, partitions, wrote.Round(time.Millisecond), float64(commits)/wrote.Seconds(), before)

	// restartAndLoad kills the broker, restarts it and returns the load
	// time it reports once its coordinator is loaded.
	restartAndLoad := func() time.Duration {
		t.Helper()
		b := c.brokers[0]
		b.Kill()
		restarted := time.Now()
		b.Restart(t)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := b.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
		var took float64
		testwait.UntilNil(t, 2*time.Minute, "the coordinator loaded", func() error {
			n, err := metricValue(admin, "strata_broker_group_coordinator_load_duration_seconds_count")
			if err != nil || n < 1 {
				return errors.Join(err, errors.New("not loaded yet"))
			}
			took, err = metricValue(admin, "strata_broker_group_coordinator_load_duration_seconds_sum")
			return err
		})
		for _, g := range []int{0, groups - 1} {
			got, err := cl.FetchOffsets(wctx, fmt.Sprintf("load-%03d", g), client.TopicPartition{Topic: "load-orders", Partition: int32(partitions - 1)})
			if err != nil || len(got) != 1 || got[0].Offset != int64(rounds-1) {
				t.Fatalf("group %d after the load: %v, %v; want offset %d", g, got, err, rounds-1)
			}
		}
		t.Logf("restart to loaded coordinator: %v", time.Since(restarted).Round(time.Millisecond))
		return time.Duration(took * float64(time.Second))
	}

	uncompacted := restartAndLoad()
	// The new owner closed the dead one's ledger: the compactor takes it.
	testwait.UntilNil(t, 2*time.Minute, "a compaction pass", func() error {
		runs, err := metricValue(admin, "strata_broker_compaction_runs_total")
		if err != nil || runs < 1 {
			return errors.Join(err, errors.New("no pass yet"))
		}
		return nil
	})
	after := bytesOf()
	compacted := restartAndLoad()
	t.Logf("coordinator load after %d commits (%d live offsets): uncompacted %v (%d bytes), compacted %v (%d bytes): %.0fx faster",
		commits, groups*partitions, uncompacted.Round(time.Millisecond), before, compacted.Round(time.Millisecond), after,
		uncompacted.Seconds()/compacted.Seconds())
	if compacted >= uncompacted {
		t.Errorf("the compacted load (%v) is not faster than the uncompacted one (%v)", compacted, uncompacted)
	}
}
