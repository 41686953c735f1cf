package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/failpoint"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
)

// TestCompactionOwnershipMove: the partition moves while a compaction
// pass is under way: the move must lose nothing and leave no duplicates.
// The owner pauses (SIGSTOP, at its failpoint) with its pass's outputs
// written and its swap not yet made; its session expires and the other broker takes the partition
// over, takes more writes and compacts it itself; when the old owner
// resumes, its swap is refused (its log is fenced or the list's version
// moved: P1, P3, P7) and its outputs are deleted, never listed. A
// consumer from the earliest offset then reads exactly the latest value
// of each key (reference model) at its original offset, no offset twice,
// and the new owner goes on compacting as usual.
func TestCompactionOwnershipMove(t *testing.T) {
	skipShort(t)
	// A pass may last half of --orphan-ledger-grace at its swap: 15 s, so
	// that the paused pass reaches its CAS (and is refused there) rather
	// than giving up on its age; what the sweeper must collect goes within
	// the test's patience.
	args := append(slices.Clone(compactionArgs), "--orphan-ledger-grace", "30s")
	c := startStrata(t, 0)
	// Only the first broker pauses at the failpoint; it is alone when the
	// topic is created, so it owns the partition.
	t.Setenv(failpoint.EnvVar, "compaction.before_cas=stop")
	zombie := proctest.StartBroker(t, bins["broker"], c.meta, "k1", args...)
	c.brokers = append(c.brokers, zombie)
	cl := c.client(t)
	const topic = "compact-move"
	createTopic(t, cl, topic, 1, map[string]string{"segment.bytes": "16384", "delete.retention.ms": "3600000"})
	t.Setenv(failpoint.EnvVar, "")
	other := proctest.StartBroker(t, bins["broker"], c.meta, "k2", args...)
	c.brokers = append(c.brokers, other)
	cl = c.client(t) // bootstrapped from both: the first one will hang
	ctx := context.Background()
	env, _ := realLedgerEnv(t, c.meta)

	// Written with compaction off, so that the one pass that pauses covers
	// many ledgers; every ledger closed (idle roll) before it starts, so
	// that the pass's outputs are the only unlisted ledgers of the topic.
	rng := rand.New(rand.NewPCG(41, 42))
	var m compactionModel
	m.produceKeyed(t, cl, topic, rng, 2000, 300, 300, 8)
	testwait.UntilNil(t, 30*time.Second, "every ledger closed", func() error {
		p, hw, err := describeLive(t, cl, topic)
		if err != nil {
			return err
		}
		if last := p.Ledgers[len(p.Ledgers)-1]; !last.Closed || last.LastOffset+1 != hw {
			return fmt.Errorf("the last ledger ends at %d (closed %t), high watermark %d", last.LastOffset, last.Closed, hw)
		}
		return nil
	})
	before := describePartition0(t, cl, topic)
	if before.OwnerId != zombie.ID {
		t.Fatalf("the partition is owned by %q, want %s (the broker with the failpoint)", before.OwnerId, zombie.ID)
	}
	if _, err := cl.AlterTopicConfigs(ctx, topic, map[string]string{"cleanup.policy": "compact",
		"min.cleanable.dirty.ratio": "0"}, nil); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 60*time.Second, "the owner to pause before its swap", func() error {
		if state := procState(zombie.Pid()); state != "T" {
			return fmt.Errorf("state %q", state)
		}
		return nil
	})
	paused := true
	defer func() {
		if paused {
			zombie.Resume()
		}
	}()
	// The paused pass's outputs: the ledgers of the partition made since
	// (nobody else writes it now), written and indexed.
	inputs, outputs := map[uint64]bool{}, map[uint64]bool{}
	for _, l := range before.Ledgers { // all closed: no ledger is open until the next write
		inputs[l.LedgerId] = true
	}
	for id := range topicLedgers(t, env, topic) {
		if !inputs[id] {
			outputs[id] = true
		}
	}
	if len(outputs) == 0 {
		t.Fatal("the paused pass wrote no output ledger")
	}

	testwait.UntilNil(t, 30*time.Second, "the other broker to serve the partition", func() error {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		owner, err := ownerOf(octx, cl, topic, 0)
		if err != nil || owner != other.Listen {
			return fmt.Errorf("owner %q, %v", owner, err)
		}
		return nil
	})
	// The takeover's CAS is done: the old owner's swap is in the list now
	// or never. The failpoint's SIGSTOP does not hold the calling
	// goroutine until the whole process stops, so the pass may have got
	// its CAS out first: then the swap was simply done before the move
	// and its replaced inputs are what must go (swept: the old owner
	// never heard the answer). Otherwise its outputs must go, never
	// listed.
	swappedBefore := false
	for _, s := range storedPartitionLog(t, c, topic).Segments {
		swappedBefore = swappedBefore || outputs[s.LedgerId]
	}
	gone := outputs
	if swappedBefore {
		gone = inputs
		t.Logf("%s's pass over %d ledgers got its swap in before it paused (the failpoint's stop raced past the CAS)", zombie.ID, len(inputs))
	} else {
		t.Logf("%s paused before its swap over %d ledgers, %d outputs written: %v", zombie.ID, len(inputs), len(outputs), outputs)
	}
	m.produceKeyed(t, cl, topic, rng, 1000, 300, 300, 8)
	zombie.Resume()
	paused = false

	// The old owner's swap is refused (its log is fenced, or the list's
	// version moved): its outputs are never listed, and are deleted (by
	// itself at once, or by the orphan sweeper after its grace when the
	// CAS's outcome was unknown to it).
	testwait.UntilNil(t, 90*time.Second, "the paused pass's leftovers deleted, never listed", func() error {
		for _, s := range storedPartitionLog(t, c, topic).Segments {
			if gone[s.LedgerId] {
				t.Fatalf("ledger %d is listed: the paused pass's stale swap was applied", s.LedgerId)
			}
		}
		for id := range gone {
			if _, _, err := env.Meta.Get(ctx, id); !errors.Is(err, ledger.ErrNoSuchLedger) {
				return fmt.Errorf("ledger %d: %v, want deleted", id, err)
			}
		}
		return nil
	})
	if log, err := os.ReadFile(zombie.LogPath); err == nil {
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "compaction failed") {
				t.Logf("%s after it resumed: %s", zombie.ID, line)
			}
		}
	}

	// The owner now (the controller may give the partition back to the
	// resumed broker, a healthy member again) compacts what came since.
	mid := waitCleanedLive(t, cl, topic, 0)
	m.produceKeyed(t, cl, topic, rng, 500, 300, 300, 8)
	p := waitCleanedLive(t, cl, topic, mid.LastCompactionMs)
	got := readCompacted(t, cl, topic)
	for i := 1; i < len(got); i++ {
		if got[i].Offset <= got[i-1].Offset {
			t.Fatalf("offset %d read after offset %d: an offset twice or out of order", got[i].Offset, got[i-1].Offset)
		}
	}
	checkAgainstModel(t, got, m.latest(true))
	testwait.UntilNil(t, 60*time.Second, "no unlisted ledger of the partition", func() error {
		if left := unlistedLedgers(t, c, env, topic); len(left) > 0 {
			return fmt.Errorf("unlisted ledgers %v", left)
		}
		return nil
	})
	t.Logf("3500 records acknowledged across the move; %d read back (the latest per key) from %d ledgers, owner %s, cleaned to %d",
		len(got), len(p.Ledgers), p.OwnerId, p.CleanedOffset)
}

// topicLedgers are the ledgers of topic's partition 0 that exist.
func topicLedgers(t *testing.T, env ledger.Env, topic string) map[uint64]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := ledger.ListAll(ctx, env.Meta)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]bool{}
	for _, md := range all {
		if md.Properties["topic"] == topic && md.Properties["partition"] == "0" {
			out[md.Id] = true
		}
	}
	return out
}

// unlistedLedgers are the ledgers of topic's partition 0 that exist but
// that its list in metad does not name.
func unlistedLedgers(t *testing.T, c *strataCluster, env ledger.Env, topic string) map[uint64]bool {
	t.Helper()
	out := topicLedgers(t, env, topic)
	for _, s := range storedPartitionLog(t, c, topic).Segments {
		delete(out, s.LedgerId)
	}
	return out
}

// describeLive is partition 0's description and its high watermark asked
// of its owner (ListOffsets -1): a broker that does not own a partition
// describes it from the stored list, whose end is the last closed
// ledger's, so its description says nothing of the open ledger's records.
func describeLive(t *testing.T, cl *client.Client, topic string) (*brokerpb.PartitionDescription, int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	end, err := cl.ListOffsets(ctx, client.TopicPartition{Topic: topic, Partition: 0}, -1)
	if err != nil {
		return nil, 0, err
	}
	d, err := cl.DescribeTopic(ctx, topic)
	if err != nil {
		return nil, 0, err
	}
	return d.Partitions[0], end.Offset, nil
}

// waitCleanedLive is waitCleaned against the owner's high watermark: with
// two brokers the description may come from the one that does not own the
// partition.
func waitCleanedLive(t *testing.T, cl *client.Client, topic string, since int64) *brokerpb.PartitionDescription {
	t.Helper()
	var p *brokerpb.PartitionDescription
	testwait.UntilNil(t, 60*time.Second, topic+" compacted to its end", func() error {
		var hw int64
		var err error
		if p, hw, err = describeLive(t, cl, topic); err != nil {
			return err
		}
		if p.CleanedOffset != hw || p.LastCompactionMs <= since {
			return fmt.Errorf("cleaned to %d at %d, high watermark %d", p.CleanedOffset, p.LastCompactionMs, hw)
		}
		return nil
	})
	return p
}
