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
	c := startStrata(t, 2, groupBrokerArgs...)
	addrs := groupKafkaAddrs(c)
	createTopic(t, c.client(t), topic, 4, nil)
	adm := groupKafkaAdmin(t, addrs)
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
	testwait.UntilNil(t, 30*time.Second, "three members stable, everything committed", func() error {
		d, err := describeKafkaGroup(ctx, adm, group)
		if err != nil {
			return err
		}
		if d.State != "Stable" || len(d.Members) != 3 {
			return fmt.Errorf("state %s, %d members", d.State, len(d.Members))
		}
		committed, err := groupCommitted(ctx, adm, group, topic)
		if err != nil {
			return err
		}
		for part := range int32(4) {
			if committed[part] != 50 {
				return fmt.Errorf("committed %v", committed)
			}
		}
		return nil
	})
	before, err := groupCommitted(ctx, adm, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	coordinator, err := groupCoordinatorBroker(ctx, c, adm, group)
	if err != nil {
		t.Fatal(err)
	}

	m4 := startFranzMember(t, addrs, group, topic, "m4", opts...)
	members = append(members, m4)
	// JoinGroup v4+: the first gets MEMBER_ID_REQUIRED, the second (with
	// the member id) starts the rebalance.
	testwait.UntilNil(t, 20*time.Second, "m4 to send its JoinGroup with a member id", func() error {
		if n := m4.written(apiJoinGroup); n < 2 {
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
	finds := map[string]int{}
	for _, m := range members {
		finds[m.name] = m.written(apiFindCoordinator)
	}
	coordinator.Kill()
	killed := time.Now()
	t.Logf("killed broker %s, the coordinator of %s, in its rebalance", coordinator.ID, group)
	p.mustProduce(t, 200)

	// The test looks through the surviving broker only: franz-go sends
	// the FindCoordinator of a DescribeGroups to any broker without
	// retrying elsewhere, and a seed it cannot dial stays a candidate.
	var live []string
	for _, b := range c.brokers {
		if b != coordinator {
			live = append(live, b.KafkaAddr)
		}
	}
	adm = groupKafkaAdmin(t, live)
	testwait.UntilNil(t, 60*time.Second, "four members stable on the new coordinator", func() error {
		now, err := groupCoordinatorBroker(ctx, c, adm, group)
		if err != nil {
			return err
		}
		if now == coordinator {
			return fmt.Errorf("broker %s still named coordinator", now.ID)
		}
		d, err := describeKafkaGroup(ctx, adm, group)
		if err != nil {
			return err
		}
		owned := memberPartitions(d, topic)
		if d.State != "Stable" || len(owned) != 4 {
			return fmt.Errorf("state %s, assignment %v", d.State, owned)
		}
		for name, parts := range owned {
			if len(parts) != 1 {
				return fmt.Errorf("%s owns %v", name, parts)
			}
		}
		return nil
	})
	t.Logf("four members stable %s after the kill", time.Since(killed).Round(time.Millisecond))
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
		if finds[m.name] == m.written(apiFindCoordinator) {
			t.Errorf("%s sent no FindCoordinator after the kill", m.name)
		}
	}

	testwait.UntilNil(t, 30*time.Second, "every record read and committed", func() error {
		read := map[string]int{}
		for _, m := range members {
			for v, n := range m.valuesRead() {
				read[v] += n
			}
		}
		for i := range 400 {
			if read["f-"+strconv.Itoa(i)] == 0 {
				return fmt.Errorf("f-%d not read (%d distinct read)", i, len(read))
			}
		}
		committed, err := groupCommitted(ctx, adm, group, topic)
		if err != nil {
			return err
		}
		for part := range int32(4) {
			if committed[part] != 100 {
				return fmt.Errorf("committed %v", committed)
			}
		}
		return nil
	})
	for _, m := range members {
		if errs := m.errors(); len(errs) > 0 {
			t.Logf("%s: group errors %v", m.name, errs)
		}
	}
}
