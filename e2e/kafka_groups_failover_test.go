package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

// Kafka API keys the failover test watches members write.
const (
	apiFindCoordinator int16 = 10
	apiJoinGroup       int16 = 11
)

// groupCoordinatorBroker asks over Kafka (FindCoordinator) which broker
// coordinates group.
func groupCoordinatorBroker(ctx context.Context, c *strataCluster, adm *kadm.Client, group string) (*proctest.BrokerNode, error) {
	r, ok := adm.FindGroupCoordinators(ctx, group)[group]
	if !ok {
		return nil, fmt.Errorf("no FindCoordinator answer for %s", group)
	}
	if r.Err != nil {
		return nil, r.Err
	}
	addr := net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port)))
	for _, b := range c.brokers {
		if b.KafkaAddr == addr {
			return b, nil
		}
	}
	return nil, fmt.Errorf("coordinator %d at %s is none of the brokers", r.NodeID, addr)
}

// TestKafkaGroupsCoordinatorKilledInRebalance: three franz-go members
// share a 4-partition topic and have committed everything; a fourth joins,
// and while the coordinator holds the rebalance its JoinGroup started
// (the members have not all rejoined), the coordinator (the owner of the
// group's __consumer_offsets partition) is killed with kill -9. The
// members, failing to reach it, ask FindCoordinator again and find the
// surviving broker once it has taken the partition over; the group
// settles with four members, the commits made before the kill are all
// there afterwards, and every record, before and after the kill, is read.
func TestKafkaGroupsCoordinatorKilledInRebalance(t *testing.T) {
	skipShort(t)
	const group, topic = "failover-group", "failover-work"
	c, addrs, adm := startGroupCluster(t, 2, topic, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := newGroupProducer(t, addrs, topic, 4, "f")
	p.mustProduce(t, 200)

	// Heartbeats every 3 s: a rebalance waits that long for the members
	// to rejoin, and the test kills the coordinator meanwhile.
	opts := []kgo.Opt{kgo.SessionTimeout(10 * time.Second), kgo.HeartbeatInterval(3 * time.Second)}
	var members []*franzMember
	for i := 1; i <= 3; i++ {
		members = append(members, startFranzMember(t, addrs, group, topic, fmt.Sprintf("m%d", i), opts...))
	}
	waitKafkaGroupStable(t, ctx, adm, group, topic, "three members", func(owned map[string][]int32) bool { return len(owned) == 3 })
	waitKafkaCommitted(t, ctx, adm, group, topic, 4, 50)
	before, err := groupCommitted(ctx, adm, group, topic)
	if err != nil {
		t.Fatal(err)
	}

	m4 := startFranzMember(t, addrs, group, topic, "m4", opts...)
	members = append(members, m4)
	dead := killCoordinatorInRebalance(t, ctx, c, adm, m4, group)
	killed := time.Now()
	p.mustProduce(t, 200)

	// The test looks through the surviving broker only: franz-go sends
	// the FindCoordinator of a DescribeGroups to any broker without
	// retrying elsewhere, and a seed it cannot dial stays a candidate.
	var live []string
	for _, b := range c.brokers {
		if b != dead {
			live = append(live, b.KafkaAddr)
		}
	}
	adm = groupKafkaAdmin(t, live)
	waitKafkaGroupStable(t, ctx, adm, group, topic, "four members, a partition each", func(owned map[string][]int32) bool {
		for _, parts := range owned {
			if len(parts) != 1 {
				return false
			}
		}
		return len(owned) == 4
	})
	t.Logf("four members stable %s after the kill", time.Since(killed).Round(time.Millisecond))
	if now, err := groupCoordinatorBroker(ctx, c, adm, group); err != nil || now == dead {
		t.Fatalf("coordinator after the kill: %v %v", now, err)
	}
	after, err := groupCommitted(ctx, adm, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	for part, off := range before {
		if after[part] < off {
			t.Errorf("partition %d: committed %d before the kill, %d after", part, off, after[part])
		}
	}
	for _, m := range members {
		if _, last := m.written(apiFindCoordinator); last.Before(killed) {
			t.Errorf("%s sent no FindCoordinator after the kill", m.name)
		}
		if errs := m.errors(); len(errs) > 0 {
			t.Logf("%s: group errors %v", m.name, errs)
		}
	}
	testwait.UntilNil(t, 30*time.Second, "every record read", func() error { return everyValueRead(members, "f", 400) })
	waitKafkaCommitted(t, ctx, adm, group, topic, 4, 100)
}

// killCoordinatorInRebalance kills the broker coordinating group with
// kill -9 once joiner's JoinGroup has put the group in
// PreparingRebalance, and returns it. JoinGroup v4+: the first gets
// MEMBER_ID_REQUIRED, the second (with the member id) starts the
// rebalance.
func killCoordinatorInRebalance(t *testing.T, ctx context.Context, c *strataCluster, adm *kadm.Client, joiner *franzMember, group string) *proctest.BrokerNode {
	t.Helper()
	coordinator, err := groupCoordinatorBroker(ctx, c, adm, group)
	if err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 20*time.Second, joiner.name+" to send its JoinGroup with a member id", func() error {
		if n, _ := joiner.written(apiJoinGroup); n < 2 {
			return fmt.Errorf("%d JoinGroups written", n)
		}
		return nil
	})
	testwait.UntilNil(t, 5*time.Second, "the coordinator to hold the rebalance", func() error {
		d, err := describeKafkaGroup(ctx, adm, group)
		if err == nil && d.State != "PreparingRebalance" {
			err = fmt.Errorf("state %s with %d members", d.State, len(d.Members))
		}
		return err
	})
	coordinator.Kill()
	t.Logf("killed broker %s, the coordinator of %s, in its rebalance", coordinator.ID, group)
	return coordinator
}

// everyValueRead checks that the members together read every value
// "<prefix>-<i>", i < n.
func everyValueRead(members []*franzMember, prefix string, n int) error {
	read := map[string]int{}
	for _, m := range members {
		for v, k := range m.valuesRead() {
			read[v] += k
		}
	}
	for i := range n {
		if read[prefix+"-"+strconv.Itoa(i)] == 0 {
			return fmt.Errorf("%s-%d not read (%d distinct read)", prefix, i, len(read))
		}
	}
	return nil
}
