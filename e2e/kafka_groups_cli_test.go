package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/internal/testwait"
)

// cliGroupDescription is the part of `strata group describe --output
// json` the Kafka group tests read.
type cliGroupDescription struct {
	Group   string `json:"group"`
	State   string `json:"state"`
	Members []struct {
		ID     string `json:"id"`
		Client string `json:"client"`
	} `json:"members"`
	Partitions []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Committed int64  `json:"committed"`
		End       int64  `json:"end"`
		Lag       int64  `json:"lag"`
		LagMs     int64  `json:"lag_ms"`
	} `json:"partitions"`
}

// cliResetPlan is `strata group reset-offsets --output json`.
type cliResetPlan struct {
	Executed bool `json:"executed"`
	Plan     []struct {
		Partition int32 `json:"partition"`
		Current   int64 `json:"current"`
		New       int64 `json:"new"`
	} `json:"plan"`
}

// strataGroupJSON runs `strata --broker ... ARGS --output json` and
// decodes what it prints into v.
func strataGroupJSON(t *testing.T, c *strataCluster, v any, args ...string) {
	t.Helper()
	args = append([]string{"--broker=" + strings.Join(c.brokerAddrs(), ",")}, append(args, "--output", "json")...)
	out, errOut, code := strata(t, nil, args...)
	if code != 0 {
		t.Fatalf("strata %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("strata %v printed %q: %v", args, out, err)
	}
}

// checkPartitions checks every partition row of d against committed and
// end (lag = end - committed).
func (d cliGroupDescription) checkPartitions(t *testing.T, partitions int, committed, end int64) {
	t.Helper()
	if len(d.Partitions) != partitions {
		t.Fatalf("describe: %d partition rows, want %d: %+v", len(d.Partitions), partitions, d)
	}
	for _, p := range d.Partitions {
		if p.Committed != committed || p.End != end || p.Lag != end-committed {
			t.Fatalf("partition %d: committed %d end %d lag %d, want %d, %d, %d", p.Partition, p.Committed, p.End, p.Lag, committed, end, end-committed)
		}
	}
}

// TestKafkaGroupsCLI: a group whose member is a Kafka client (franz-go)
// is seen by `strata group list` and `describe` (its member while it
// runs; once empty, committed offsets and lag in records and in time);
// `strata group reset-offsets` plans a reset without changing anything,
// then executes one; the next Kafka member resumes at the reset position.
func TestKafkaGroupsCLI(t *testing.T) {
	skipShort(t)
	const group, topic = "cli-kafka", "cli-kafka-orders"
	c := startStrata(t, 1, groupBrokerArgs...)
	addrs := groupKafkaAddrs(c)
	createTopic(t, c.client(t), topic, 2, nil)
	adm := groupKafkaAdmin(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := newGroupProducer(t, addrs, topic, 2, "o")
	p.mustProduce(t, 40)

	m := startFranzMember(t, addrs, group, topic, "cli-kafka-member")
	testwait.UntilNil(t, 30*time.Second, "the member to commit all 40 records", func() error {
		committed, err := groupCommitted(ctx, adm, group, topic)
		if err == nil && (committed[0] != 20 || committed[1] != 20) {
			err = fmt.Errorf("committed %v", committed)
		}
		return err
	})
	var listed []struct {
		Group   string `json:"group"`
		State   string `json:"state"`
		Members int32  `json:"members"`
	}
	strataGroupJSON(t, c, &listed, "group", "list")
	if len(listed) != 1 || listed[0].Group != group || listed[0].State != "STABLE" || listed[0].Members != 1 {
		t.Fatalf("group list while the member runs: %+v", listed)
	}
	var d cliGroupDescription
	strataGroupJSON(t, c, &d, "group", "describe", group)
	if d.State != "STABLE" || len(d.Members) != 1 || d.Members[0].Client != "cli-kafka-member" || d.Members[0].ID == "" {
		t.Fatalf("describe while the member runs: %+v", d)
	}
	d.checkPartitions(t, 2, 20, 20)

	m.close()
	testwait.UntilNil(t, 10*time.Second, "the group to be empty", func() error {
		var d cliGroupDescription
		strataGroupJSON(t, c, &d, "group", "describe", group)
		if d.State != "EMPTY" || len(d.Members) != 0 {
			return fmt.Errorf("state %s, %d members", d.State, len(d.Members))
		}
		return nil
	})
	produced := time.Now()
	p.mustProduce(t, 10)
	strataGroupJSON(t, c, &d, "group", "describe", group)
	described := time.Now()
	d.checkPartitions(t, 2, 20, 25)
	t.Logf("described once empty: %+v", d)
	for _, row := range d.Partitions {
		// The lag in time is the age of the first record not committed:
		// stamped after produced, aged before described.
		if hi := described.Sub(produced).Milliseconds() + 1; row.LagMs <= 0 || row.LagMs > hi {
			t.Errorf("partition %d: lag %d ms, want in (0, %d]", row.Partition, row.LagMs, hi)
		}
	}

	var plan cliResetPlan
	strataGroupJSON(t, c, &plan, "group", "reset-offsets", group, "--topic", topic, "--to-earliest")
	if plan.Executed || len(plan.Plan) != 2 || plan.Plan[0].Current != 20 || plan.Plan[0].New != 0 || plan.Plan[1].New != 0 {
		t.Fatalf("dry run: %+v", plan)
	}
	strataGroupJSON(t, c, &d, "group", "describe", group)
	d.checkPartitions(t, 2, 20, 25)
	strataGroupJSON(t, c, &plan, "group", "reset-offsets", group, "--topic", topic, "--to-offset", "7", "--execute")
	if !plan.Executed || len(plan.Plan) != 2 || plan.Plan[0].Current != 20 || plan.Plan[0].New != 7 || plan.Plan[1].New != 7 {
		t.Fatalf("executed reset: %+v", plan)
	}
	strataGroupJSON(t, c, &d, "group", "describe", group)
	d.checkPartitions(t, 2, 7, 25)
	if committed, err := groupCommitted(ctx, adm, group, topic); err != nil || committed[0] != 7 || committed[1] != 7 {
		t.Fatalf("commits over Kafka after the reset: %v %v", committed, err)
	}

	// Without a commit this member would start at the end: it resumes at
	// the reset position.
	next := startFranzMember(t, addrs, group, topic, "cli-kafka-next", kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	testwait.UntilNil(t, 30*time.Second, "the next member to read from offset 7 to the end", func() error {
		read := next.offsets()
		for part := range int32(2) {
			if len(read[part]) != 18 {
				return fmt.Errorf("read %v", read)
			}
			for i, o := range read[part] {
				if o != int64(7+i) {
					t.Fatalf("partition %d: read offsets %v, want 7 to 24", part, read[part])
				}
			}
		}
		return nil
	})
}
