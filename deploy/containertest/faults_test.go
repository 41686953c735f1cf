package containertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// TestContainers runs the fault scenarios one after another on one
// cluster (starting a cluster costs more than a scenario); each leaves the
// cluster whole for the next.
func TestContainers(t *testing.T) {
	start := time.Now()
	c := startCluster(t)
	t.Logf("cluster ready in %s (network %s, %s.0/24)", time.Since(start).Round(time.Millisecond), c.network, c.prefix)
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *cluster)
	}{
		{"CLIInContainer", testCLIInContainer},
		{"BrokerCutOff", testBrokerCutOff},
		{"MetadLeaderCutOff", testMetadLeaderCutOff},
		{"BookieCutOff", testBookieCutOff},
		{"KillEachRole", testKillEachRole},
		{"RollingRestart", testRollingRestart},
		{"KafkaProtocol", testKafkaProtocol},
		{"MonitoringNamesExistingMetrics", testMonitoringNamesExistingMetrics},
	} {
		// Each scenario starts from a whole cluster: after a cut the
		// nodes' metad sessions may still be coming back (a bookie
		// whose keepalives went to a cut-off metad leader registers
		// again seconds later), and a scenario that started then found
		// 2 writable bookies of 4.
		c.waitHealthy(t, 90*time.Second)
		t.Run(sc.name, func(t *testing.T) { sc.run(t, c) })
	}
}

// waitHealthy waits until `strata cluster status` (run in broker-1) says
// the whole cluster is healthy: every metad member, broker and bookie up
// and registered, every partition served, no ledger under-replicated.
func (c *cluster) waitHealthy(t *testing.T, timeout time.Duration) {
	t.Helper()
	var out string
	if err := testwait.Poll(timeout, "the cluster to be healthy", func() (err error) {
		out, err = c.exec("broker-1", "cluster", "status")
		return err
	}); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// The images' promise: `strata` inside any container finds the cluster
// with no flags. `cluster status` there is waited for, not run once: right
// after the cluster first reports healthy, the controller may still move
// a partition to a broker that registered last, and while it moves the
// status says "without an owner" (exit 2).
func testCLIInContainer(t *testing.T, c *cluster) {
	c.waitHealthy(t, 60*time.Second)
	out, err := c.exec("metad-2", "node", "health")
	if err != nil {
		t.Fatalf("strata node health in metad-2: %v\n%s", err, out)
	}
}

// owners maps each partition of topic to its owner's broker id, as the
// broker at addr sees it ("" while a partition has none).
func owners(ctx context.Context, addr, topic string) (map[int32]string, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := brokerpb.NewBrokerClient(conn).Metadata(ctx, &brokerpb.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	out := map[int32]string{}
	for _, tm := range resp.GetTopics() {
		for _, p := range tm.GetPartitions() {
			out[p.GetPartition()] = p.GetOwnerId()
		}
	}
	return out, nil
}

// Cut the owning broker off the network while producing: its partitions
// move to the other broker within 10 s, produce goes on; when it comes back
// it serves nothing stale; every acknowledged record is read exactly once.
func testBrokerCutOff(t *testing.T, c *cluster) {
	const topic, partitions = "cut-broker", 4
	cl := c.client(context.Background())
	l := startLoad(t, cl, topic, partitions, 200)
	l.AwaitAcks(t, 200, "before the cut")

	b2 := c.nodes["broker-2"].grpcAddr()
	before, err := owners(context.Background(), b2, topic)
	if err != nil {
		t.Fatal(err)
	}
	victim, victimID := "broker-1", "k1"
	if n := countOwned(before, "k1"); n == 0 {
		victim, victimID, b2 = "broker-2", "k2", c.nodes["broker-1"].grpcAddr()
	}
	t.Logf("owners before: %v; cutting %s off", before, victim)
	cut := time.Now()
	reconnect := c.disconnect(victim)
	other := b2
	testwait.Until(t, 10*time.Second, "the cut broker's partitions to move", func() bool {
		o, err := owners(context.Background(), other, topic)
		if err != nil || len(o) != partitions {
			return false
		}
		for _, id := range o {
			if id == "" || id == victimID {
				return false
			}
		}
		return true
	})
	t.Logf("partitions moved in %s", time.Since(cut).Round(time.Millisecond))
	l.AwaitAcks(t, 200, "after the partitions moved")
	reconnect()
	testwait.Until(t, 30*time.Second, victim+" ready again", func() bool { return ready(c.nodes[victim].adminAddr()) })
	l.AwaitAcks(t, 100, "after the cut broker came back")

	// Nothing stale: for every partition, the returned broker either
	// refuses (not the owner) or answers with a high watermark that covers
	// everything acknowledged so far.
	maxAcked := map[int32]int64{}
	for _, a := range l.Acks() {
		maxAcked[a.Partition] = max(maxAcked[a.Partition], a.Offset)
	}
	conn, err := grpc.NewClient(c.nodes[victim].grpcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for p := int32(0); p < partitions; p++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := brokerpb.NewBrokerClient(conn).Fetch(ctx, &brokerpb.FetchRequest{
			Partitions: []*brokerpb.FetchPartition{{Topic: topic, Partition: p, Offset: 0}}, MaxBytes: 1 << 16,
		})
		cancel()
		if err != nil {
			continue // refused outright: not stale
		}
		for _, r := range resp.GetPartitions() {
			if r.GetError() != nil && r.GetError().GetCode() != 0 {
				continue
			}
			if r.GetHighWatermark() <= maxAcked[p] {
				t.Errorf("%s serves partition %d with high watermark %d, but offset %d was acknowledged", victim, p, r.GetHighWatermark(), maxAcked[p])
			}
		}
	}
	res := l.Stop(t)
	t.Logf("producer: %d acknowledged, %d failed %v", len(res.Acks), res.Failed, res.Errs)
	if res.Failed > 0 {
		t.Errorf("%d records failed (idempotent producer with a 90 s delivery timeout should retry through a cut): %v", res.Failed, res.Errs)
	}
	loadtest.Verify(t, cl, topic, partitions, res.Acks)
}

func countOwned(o map[int32]string, id string) int {
	n := 0
	for _, v := range o {
		if v == id {
			n++
		}
	}
	return n
}

// metadLeader is the service name of the metad member that reports itself
// leader on /metrics, or "".
func (c *cluster) metadLeader() string {
	for i := 1; i <= 3; i++ {
		s := fmt.Sprintf("metad-%d", i)
		m, err := scrape(c.nodes[s].adminAddr())
		if err == nil && m["strata_metad_is_leader"] == 1 {
			return s
		}
	}
	return ""
}

// Cut the metad leader off: a new leader is elected, produce goes on, the
// old leader rejoins.
func testMetadLeaderCutOff(t *testing.T, c *cluster) {
	const topic, partitions = "cut-metad", 3
	cl := c.client(context.Background())
	l := startLoad(t, cl, topic, partitions, 100)
	l.AwaitAcks(t, 100, "before the cut")
	var leader string
	testwait.Until(t, 10*time.Second, "a metad leader", func() bool { leader = c.metadLeader(); return leader != "" })
	t.Logf("cutting the metad leader %s off", leader)
	reconnect := c.disconnect(leader)
	testwait.Until(t, 20*time.Second, "a new metad leader", func() bool {
		l := c.metadLeader()
		return l != "" && l != leader
	})
	l.AwaitAcks(t, 200, "with the old metad leader cut off")
	reconnect()
	testwait.Until(t, 30*time.Second, "the old leader to rejoin as a follower", func() bool {
		m, err := scrape(c.nodes[leader].adminAddr())
		return err == nil && m["strata_metad_is_leader"] == 0 && m["strata_metad_raft_last_contact_seconds"] < 2 && ready(c.nodes[leader].adminAddr())
	})
	out, err := c.exec("broker-1", "meta", "status")
	if err != nil {
		t.Fatalf("meta status: %v\n%s", err, out)
	}
	t.Logf("meta status after the rejoin:\n%s", out)
	loadtest.Verify(t, cl, topic, partitions, l.Finish(t).Acks)
}

// docker kill each role in turn under load, then start it again: nothing
// acknowledged is lost.
func testKillEachRole(t *testing.T, c *cluster) {
	const topic, partitions = "kill-each", 3
	cl := c.client(context.Background())
	l := startLoad(t, cl, topic, partitions, 100)
	l.AwaitAcks(t, 100, "before the kills")
	for _, s := range []string{"metad-1", "bookie-1", "broker-1"} {
		c.kill(s)
		l.AwaitAcks(t, 100, "with "+s+" killed")
		c.start(s)
		testwait.Until(t, 60*time.Second, s+" ready after restart", func() bool { return ready(c.nodes[s].adminAddr()) })
		l.AwaitAcks(t, 50, "after "+s+" restarted")
	}
	loadtest.Verify(t, cl, topic, partitions, l.Finish(t).Acks)
}

// replicationState is what the elected replicator reported at its last
// audit, from the bookie that holds the election.
type replicationState struct {
	leader                   string
	underReplicated, missing float64
	lastAudit                time.Time
}

func (c *cluster) replication(skip string) (replicationState, bool) {
	for i := 1; i <= 4; i++ {
		s := fmt.Sprintf("bookie-%d", i)
		if s == skip {
			continue
		}
		m, err := scrape(c.nodes[s].adminAddr())
		if err != nil || m["strata_replication_leader"] != 1 {
			continue
		}
		return replicationState{leader: s, underReplicated: m["strata_replication_under_replicated_ledgers"],
			missing: m["strata_replication_missing_bookies"], lastAudit: time.Unix(int64(m["strata_replication_last_audit_timestamp_seconds"]), 0)}, true
	}
	return replicationState{}, false
}

// Cut one bookie off while producing: writes go on (the writers change
// ensembles), and once the bookie is declared dead re-replication copies
// its ledgers until no ledger names it: 3 copies again.
func testBookieCutOff(t *testing.T, c *cluster) {
	const topic, partitions = "cut-bookie", 3
	cl := c.client(context.Background())
	l := startLoad(t, cl, topic, partitions, 100)
	l.AwaitAcks(t, 200, "before the cut")
	const victim = "bookie-1"
	cut := time.Now()
	reconnect := c.disconnect(victim)
	l.AwaitAcks(t, 200, "with "+victim+" cut off")
	var st replicationState
	testwait.Until(t, 90*time.Second, "re-replication to leave no ledger on the cut bookie", func() bool {
		var ok bool
		st, ok = c.replication(victim)
		// An audit that started after the bookie's grace ran out (5 s)
		// found nothing under-replicated and no ledger naming a missing
		// bookie.
		return ok && st.lastAudit.After(cut.Add(6*time.Second)) && st.underReplicated == 0 && st.missing == 0
	})
	t.Logf("re-replicated %s's ledgers in %s (replicator %s)", victim, time.Since(cut).Round(time.Second), st.leader)
	reconnect()
	testwait.Until(t, 60*time.Second, victim+" ready again", func() bool { return ready(c.nodes[victim].adminAddr()) })
	loadtest.Verify(t, cl, topic, partitions, l.Finish(t).Acks)
}

// Restart every container, one at a time, under produce and consume load:
// zero records lost, zero consumer errors; produce errors only as retries
// (counted and logged).
func testRollingRestart(t *testing.T, c *cluster) {
	const topic, partitions = "rolling", 3
	cl := c.client(context.Background())
	l := startLoad(t, cl, topic, partitions, 100)
	l.AwaitAcks(t, 100, "before the restarts")

	// A consumer tailing every partition all along.
	cons, err := cl.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	assign := map[client.TopicPartition]client.Offset{}
	for p := int32(0); p < partitions; p++ {
		assign[client.TopicPartition{Topic: topic, Partition: p}] = client.OffsetEarliest()
	}
	if err := cons.Assign(context.Background(), assign); err != nil {
		t.Fatal(err)
	}
	var consumerErrs []error
	consumed := 0
	cctx, ccancel := context.WithCancel(context.Background())
	cdone := make(chan struct{})
	go func() {
		defer close(cdone)
		for cctx.Err() == nil {
			recs, err := cons.Poll(cctx)
			if err != nil {
				if cctx.Err() == nil {
					consumerErrs = append(consumerErrs, err)
				}
				continue
			}
			consumed += len(recs)
		}
	}()

	for _, s := range c.sortedServices() {
		start := time.Now()
		c.restart(s)
		restarted := time.Since(start)
		testwait.Until(t, 60*time.Second, s+" ready after its restart", func() bool { return ready(c.nodes[s].adminAddr()) })
		l.AwaitAcks(t, 50, "after "+s+" restarted")
		t.Logf("restarted %s: docker restart %s, ready and 50 more records acknowledged after %s", s,
			restarted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	ccancel()
	<-cdone
	_ = cons.Close()
	res := l.Stop(t)
	t.Logf("producer: %d acknowledged, %d failed %v, %d batch retries in %d requests; consumer: %d records, %d errors",
		len(res.Acks), res.Failed, res.Errs, res.Stats.Retries, res.Stats.Requests, consumed, len(consumerErrs))
	if res.Failed > 0 {
		t.Errorf("%d records failed: %v", res.Failed, res.Errs)
	}
	if len(consumerErrs) > 0 {
		t.Errorf("consumer errors: %v", consumerErrs)
	}
	loadtest.Verify(t, cl, topic, partitions, res.Acks)
}
