package bench

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/benchsuite"
)

// groupTestSettings: short sessions, so that a member cut off is
// removed in about two seconds.
var groupTestSettings = GroupSettings{SessionTimeout: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond}

// groupTestCluster is two brokers with a Kafka listener that give
// KIP-848 members groupTestSettings, with topic of partitions, a client
// of theirs, and a context of timeout.
func groupTestCluster(t *testing.T, topic string, partitions int32, timeout time.Duration) (*brokertest.Cluster, *client.Client, context.Context) {
	c := brokertest.Start(t, brokertest.Options{Brokers: 2, Kafka: true, Configure: func(_ int, cfg *broker.Config) {
		cfg.GroupSessionTimeout, cfg.GroupMinSessionTimeout = groupTestSettings.SessionTimeout, time.Second
		cfg.GroupHeartbeatInterval, cfg.GroupTickInterval = groupTestSettings.HeartbeatInterval, 50*time.Millisecond
	}})
	c.CreateTopic(topic, partitions, nil)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	cl, err := client.New(ctx, client.Config{Brokers: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return c, cl, ctx
}

// TestGroupReads: four members of a Strata group, and four franz-go
// members of a classic group, each read exactly what was written, every
// record once, and stop at the ends long before their duration; the time
// to the first record is stated.
func TestGroupReads(t *testing.T) {
	const topic, partitions = "gread", 8
	c, cl, ctx := groupTestCluster(t, topic, partitions, 2*time.Minute)
	o := validOptions()
	o.Topic, o.Partitions, o.Duration = topic, partitions, 300*time.Millisecond
	produce := NewRun(ModeProduce, topic, partitions)
	if err := Execute(ctx, io.Discard, cl, &o, client.ProducerConfig{}, produce); err != nil || produce.Err() != nil {
		t.Fatalf("produce: %v, %v", err, produce.Err())
	}
	written := produce.records.Load()

	o.Duration = time.Minute
	for _, tc := range []struct {
		name string
		read func(run *Run) (*benchsuite.GroupRead, error)
	}{
		{benchsuite.WorkloadGroupCatchUp, func(run *Run) (*benchsuite.GroupRead, error) {
			return GroupConsume(ctx, io.Discard, cl, c.Addrs(), "g-strata", groupTestSettings, &o, run)
		}},
		{benchsuite.WorkloadKafkaGroupCatchUp, func(run *Run) (*benchsuite.GroupRead, error) {
			return KafkaGroupConsume(ctx, io.Discard, c.KafkaAddrs(), "g-kafka", groupTestSettings, &o, run)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := NewRun(ModeConsume, topic, partitions)
			g, err := tc.read(run)
			if err != nil {
				t.Fatal(err)
			}
			if err := run.Err(); err != nil || run.records.Load() != written || run.bytes.Load() != written*int64(o.RecordSize) {
				t.Fatalf("read %d records, %d bytes (%v); want the %d written", run.records.Load(), run.bytes.Load(), err, written)
			}
			if run.End.IsZero() || run.Elapsed() > 30*time.Second {
				t.Fatalf("read until %v (%s): it did not stop at the ends", run.End, run.Elapsed())
			}
			if g.Members != benchsuite.GroupMembers || g.JoinSeconds <= 0 || g.JoinSeconds > run.Elapsed().Seconds() || g.Assignments < 1 {
				t.Fatalf("group read %+v over %s", g, run.Elapsed())
			}
		})
	}
}

// TestGroupRebalance: every scenario is measured once per group; a clean
// leave is seen well within the session timeout, and a member cut off
// only once its session expired (so the cut held: no heartbeat got
// through), and then within the session and a few heartbeats.
func TestGroupRebalance(t *testing.T) {
	const topic, partitions = "greb", 8
	c, cl, ctx := groupTestCluster(t, topic, partitions, 3*time.Minute)
	o := validOptions()
	o.Topic, o.Partitions = topic, partitions
	run := NewRun(ModeProduce, topic, partitions)
	const repeats = 2
	r, err := GroupRebalance(ctx, io.Discard, cl, c.KafkaAddrs(), groupTestSettings, repeats, &o, run)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Err(); err != nil || run.records.Load() == 0 {
		t.Fatalf("feed: %d records, %v", run.records.Load(), err)
	}
	if len(r.Scenarios) != len(rebalanceScenarios) || r.Repeats != repeats || r.Partitions != partitions {
		t.Fatalf("rebalance %+v", r)
	}
	session := benchsuite.Millis(groupTestSettings.SessionTimeout)
	heartbeat := benchsuite.Millis(groupTestSettings.HeartbeatInterval)
	for _, s := range r.Scenarios {
		t.Logf("%s %s: %v ms, moved %v", s.Protocol, s.Event, s.SamplesMs, s.Moved)
		if len(s.SamplesMs) != repeats || s.TimedOut != 0 || s.MedianMs <= 0 || s.MaxMs < s.MedianMs {
			t.Errorf("%s %s: %+v", s.Protocol, s.Event, s)
			continue
		}
		for i, ms := range s.SamplesMs {
			// Eight partitions, four members: two each.
			if s.Moved[i] != partitions/benchsuite.GroupMembers {
				t.Errorf("%s %s: repeat %d moved %d partitions", s.Protocol, s.Event, i, s.Moved[i])
			}
			switch s.Event {
			case benchsuite.EventLeave:
				if ms >= session {
					t.Errorf("%s leave: %.0f ms, not within the %.0f ms session", s.Protocol, ms, session)
				}
			case benchsuite.EventKill:
				if ms < session-2*heartbeat || ms > session+10*heartbeat+1000 {
					t.Errorf("%s kill: %.0f ms, want about the %.0f ms session", s.Protocol, ms, session)
				}
			}
		}
	}
}
