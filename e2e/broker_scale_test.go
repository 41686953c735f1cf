package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// brokerCounts is each registered broker's partitions as DescribeCluster
// reports them.
type brokerCounts struct {
	assigned, owned map[string]int32
	drained         map[string]bool
	unowned         int32
}

func describeBrokers(cl *client.Client) (brokerCounts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := cl.DescribeCluster(ctx)
	if err != nil {
		return brokerCounts{}, err
	}
	bc := brokerCounts{assigned: map[string]int32{}, owned: map[string]int32{}, drained: map[string]bool{}, unowned: d.UnownedPartitions}
	for _, b := range d.Brokers {
		bc.assigned[b.Info.Id], bc.owned[b.Info.Id], bc.drained[b.Info.Id] = b.PartitionsAssigned, b.PartitionsOwned, b.Drained
	}
	return bc, nil
}

// topicSpread checks that each of ids owns at least least partitions of
// topic.
func topicSpread(cl *client.Client, topic string, ids []string, least int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := cl.DescribeTopic(ctx, topic)
	if err != nil {
		return err
	}
	owned := map[string]int32{}
	for _, p := range d.Partitions {
		owned[p.OwnerId]++
	}
	for _, id := range ids {
		if owned[id] < least {
			return fmt.Errorf("%s owns %d of %s's partitions, want at least %d (owners %v)", id, owned[id], topic, least, owned)
		}
	}
	return nil
}

// balancedWithin checks that every partition is served and each of ids
// owns within pct percent of their mean.
func balancedWithin(cl *client.Client, ids []string, pct float64) error {
	bc, err := describeBrokers(cl)
	if err != nil {
		return err
	}
	if bc.unowned > 0 {
		return fmt.Errorf("%d partitions without an owner; owned %v", bc.unowned, bc.owned)
	}
	var total int32
	for _, id := range ids {
		if bc.assigned[id] != bc.owned[id] {
			return fmt.Errorf("%s: %d assigned, %d owned", id, bc.assigned[id], bc.owned[id])
		}
		total += bc.owned[id]
	}
	mean := float64(total) / float64(len(ids))
	for _, id := range ids {
		if d := float64(bc.owned[id]) - mean; d > mean*pct/100 || -d > mean*pct/100 {
			return fmt.Errorf("%s owns %d, mean %.1f: off by more than %.0f%% (owned %v)", id, bc.owned[id], mean, pct, bc.owned)
		}
	}
	return nil
}

// TestBrokerScaleOutAndDrain: under a keyed idempotent
// producer and a group consumer, a third broker and a fourth bookie join a
// cluster of two brokers and three bookies; the controller balances the
// partitions (each broker within 20% of the mean) and new ledgers land on
// the new bookie. Then `strata broker drain k1 --wait` moves every
// partition off k1, which keeps running and registered; `strata broker
// undrain k1` gives it its share back. Every acknowledged record is read
// back exactly once at its offset, and the group consumer sees every one.
func TestBrokerScaleOutAndDrain(t *testing.T) {
	skipShort(t)
	const topic, partitions = "scale", 12
	c := startStrata(t, 2)
	cl := c.client(t)
	createTopic(t, cl, topic, partitions, nil)
	meta := newMetaClient(t, c.meta)
	store := ledgermetad.NewStore(meta)
	eps := strings.Join(c.meta.Endpoints(), ",")
	cli := func(args ...string) (string, string, int) {
		return strata(t, nil, append(args, "--metad", eps, "--broker", strings.Join(c.brokerAddrs(), ","))...)
	}

	consumed := newOwnershipLog()
	startGroupMember(t, c, consumed, "reader", memberConfig("scale-readers", topic))
	load := loadtest.Start(t, cl, loadtest.Config{Topic: topic, Keys: 24, Rate: 1000,
		Producer: client.ProducerConfig{Linger: 5 * time.Millisecond}})
	load.AwaitAcks(t, 500, "the load before scaling out")

	// Scale out: a bookie in a rack of its own (so every new ensemble
	// takes it: one copy per rack; with no labels, placement goes by free
	// space, which bookies sharing one disk report alike), then a broker.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before, err := ledger.ListAll(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	var lastBefore uint64
	for _, md := range before {
		lastBefore = max(lastBefore, md.Id)
	}
	b4 := proctest.StartBookie(t, bins["bookie"], c.meta, "b4", "--rack", "rack-b")
	c.bookies = append(c.bookies, b4)
	scaled := time.Now()
	k3 := proctest.StartBroker(t, bins["broker"], c.meta, "k3")
	c.brokers = append(c.brokers, k3)
	all := []string{"k1", "k2", "k3"}
	testwait.UntilNil(t, 3*time.Minute, "partitions balanced over k1, k2, k3 within 20%", func() error {
		return balancedWithin(cl, all, 20)
	})
	bc, _ := describeBrokers(cl)
	t.Logf("balanced over 3 brokers %s after k3 joined: owned %v", time.Since(scaled).Round(time.Millisecond), bc.owned)
	// The loaded topic spreads to k3 too, not only __consumer_offsets
	// (whose name sorts first): balancing moves partitions of the topic
	// the most loaded broker holds most more of (PL3).
	testwait.UntilNil(t, time.Minute, "the topic's partitions spread over k1, k2, k3", func() error {
		return topicSpread(cl, topic, all, partitions/int32(len(all))/2)
	})
	testwait.UntilNil(t, time.Minute, "a new ledger on b4", func() error {
		mds, err := ledger.ListAll(ctx, store)
		if err != nil {
			return err
		}
		fresh, onB4 := 0, 0
		for _, md := range mds {
			if md.Id <= lastBefore {
				continue
			}
			fresh++
			if slices.ContainsFunc(md.Fragments, func(f *ledgerpb.Fragment) bool { return slices.Contains(f.Bookies, b4.Listen) }) {
				onB4++
			}
		}
		if onB4 == 0 {
			return fmt.Errorf("none of %d ledgers created since b4 joined has it in an ensemble", fresh)
		}
		t.Logf("%d of %d ledgers created since b4 joined have it in their ensemble", onB4, fresh)
		return nil
	})
	load.AwaitAcks(t, 500, "the load after scaling out")

	// Drain k1, an original broker.
	if _, errOut, code := cli("broker", "drain", "k9"); code != 1 || !strings.Contains(errOut, "no such broker") {
		t.Fatalf("drain of an unknown broker: exit %d, %q", code, errOut)
	}
	drainStart := time.Now()
	out, errOut, code := cli("broker", "drain", "k1", "--wait", "--interval", "250ms", "--timeout", "3m")
	if code != 0 || !strings.Contains(out, "OK broker k1 drained") {
		t.Fatalf("strata broker drain k1 --wait: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("strata broker drain k1 --wait took %s:\n%s", time.Since(drainStart).Round(time.Millisecond), out)
	bc, err = describeBrokers(cl)
	if err != nil {
		t.Fatal(err)
	}
	if _, listed := bc.assigned["k1"]; !listed || !bc.drained["k1"] || bc.assigned["k1"] != 0 || bc.owned["k1"] != 0 || !c.brokers[0].Running() {
		t.Fatalf("after the drain k1: listed %v, drained %v, %d assigned, %d owned, running %v",
			listed, bc.drained["k1"], bc.assigned["k1"], bc.owned["k1"], c.brokers[0].Running())
	}
	testwait.UntilNil(t, time.Minute, "every partition served by k2 and k3", func() error { return balancedWithin(cl, all[1:], 20) })
	bc, _ = describeBrokers(cl)
	t.Logf("drained: owned %v", bc.owned)
	status, _, _ := cli("cluster", "status", "--output", "json")
	var rep struct {
		Brokers struct {
			Brokers []struct{ ID, State string }
		}
	}
	if err := json.Unmarshal([]byte(status), &rep); err != nil {
		t.Fatalf("cluster status: %v\n%s", err, status)
	}
	if !slices.ContainsFunc(rep.Brokers.Brokers, func(b struct{ ID, State string }) bool { return b.ID == "k1" && b.State == "drained" }) {
		t.Fatalf("cluster status does not show k1 drained: %+v", rep.Brokers.Brokers)
	}
	load.AwaitAcks(t, 500, "the load after the drain")

	// Undrain: k1 gets its share back.
	if out, errOut, code := cli("broker", "undrain", "k1"); code != 0 {
		t.Fatalf("strata broker undrain k1: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := cli("broker", "undrain", "k1"); code != 1 || !strings.Contains(errOut, "not drained") {
		t.Fatalf("undrain twice: exit %d, %q", code, errOut)
	}
	undrained := time.Now()
	testwait.UntilNil(t, 3*time.Minute, "partitions balanced over k1, k2, k3 again", func() error {
		return balancedWithin(cl, all, 20)
	})
	bc, _ = describeBrokers(cl)
	t.Logf("balanced again %s after the undrain: owned %v", time.Since(undrained).Round(time.Millisecond), bc.owned)
	load.AwaitAcks(t, 500, "the load after the undrain")

	res := load.Finish(t)
	t.Logf("producer: %d records acknowledged, %d failed, %d batch retries (NOT_OWNER redirects and the like) in %d requests, longest pause between acks %s",
		len(res.Acks), res.Failed, res.Stats.Retries, res.Stats.Requests, res.MaxGap.Round(time.Millisecond))
	loadtest.Verify(t, cl, topic, partitions, res.Acks)
	testwait.UntilNil(t, time.Minute, "the group consumer saw every acknowledged record", func() error {
		consumed.mu.Lock()
		defer consumed.mu.Unlock()
		for _, a := range res.Acks {
			if consumed.consumed[a.Value()] == 0 {
				return fmt.Errorf("%s not consumed yet (%d distinct consumed)", a.Value(), len(consumed.consumed))
			}
		}
		return nil
	})
	consumed.mu.Lock()
	dups := 0
	for _, n := range consumed.consumed {
		dups += n - 1
	}
	consumed.mu.Unlock()
	t.Logf("group consumer: every acknowledged record consumed, %d redeliveries", dups)
}
