package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/internal/testwait"
)

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

// checkKafkaGroupLag checks every partition row of d against committed
// and end (lag = end - committed).
func checkKafkaGroupLag(t *testing.T, d describeJSON, partitions int, committed, end int64) {
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
	c, addrs, adm := startGroupCluster(t, 1, topic, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := newGroupProducer(t, addrs, topic, 2, "o")
	p.mustProduce(t, 40)

	m := startFranzMember(t, addrs, group, topic, "cli-kafka-member")
	waitKafkaCommitted(t, ctx, adm, group, topic, 2, 20)
	var listed []struct {
		Group   string `json:"group"`
		State   string `json:"state"`
		Members int32  `json:"members"`
	}
	strataGroupJSON(t, c, &listed, "group", "list")
	if len(listed) != 1 || listed[0].Group != group || listed[0].State != "STABLE" || listed[0].Members != 1 {
		t.Fatalf("group list while the member runs: %+v", listed)
	}
	var d describeJSON
	strataGroupJSON(t, c, &d, "group", "describe", group)
	if d.State != "STABLE" || len(d.Members) != 1 || d.Members[0].Client != "cli-kafka-member" || d.Members[0].ID == "" {
		t.Fatalf("describe while the member runs: %+v", d)
	}
	checkKafkaGroupLag(t, d, 2, 20, 20)

	m.close()
	testwait.UntilNil(t, 10*time.Second, "the group to be empty", func() error {
		var d describeJSON
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
	checkKafkaGroupLag(t, d, 2, 20, 25)
	t.Logf("described once empty: %+v", d)
	for _, row := range d.Partitions {
		// The lag in time is the age of the first record not committed:
		// stamped after produced, aged before described.
		if hi := described.Sub(produced).Milliseconds() + 1; row.LagMs <= 0 || row.LagMs > hi {
			t.Errorf("partition %d: lag %d ms, want in (0, %d]", row.Partition, row.LagMs, hi)
		}
	}

	// The same reset, planned (nothing changes) then executed.
	reset := []string{"group", "reset-offsets", group, "--topic", topic, "--to-offset", "7"}
	for _, execute := range []bool{false, true} {
		var plan cliResetPlan
		args := reset
		if execute {
			args = append(slices.Clone(reset), "--execute")
		}
		strataGroupJSON(t, c, &plan, args...)
		if plan.Executed != execute || len(plan.Plan) != 2 || plan.Plan[0].Current != 20 || plan.Plan[0].New != 7 || plan.Plan[1].New != 7 {
			t.Fatalf("reset (execute %t): %+v", execute, plan)
		}
		if !execute {
			strataGroupJSON(t, c, &d, "group", "describe", group)
			checkKafkaGroupLag(t, d, 2, 20, 25)
		}
	}
	strataGroupJSON(t, c, &d, "group", "describe", group)
	checkKafkaGroupLag(t, d, 2, 7, 25)
	if committed, err := groupCommitted(ctx, adm, group, topic); err != nil || committed[0] != 7 || committed[1] != 7 {
		t.Fatalf("commits over Kafka after the reset: %v %v", committed, err)
	}

	// Without a commit this member would start at the end: it resumes at
	// the reset position.
	next := startFranzMember(t, addrs, group, topic, "cli-kafka-next", kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	waitReadFrom(t, next, 2, 7, 25)
}

// waitReadFrom waits until m has read offsets from to end-1 of each of
// partitions, in order and nothing else.
func waitReadFrom(t *testing.T, m *franzMember, partitions int32, from, end int64) {
	t.Helper()
	testwait.UntilNil(t, 30*time.Second, fmt.Sprintf("%s to read from offset %d to the end", m.name, from), func() error {
		read := m.offsets()
		for part := range partitions {
			if int64(len(read[part])) < end-from {
				return fmt.Errorf("read %v", read)
			}
			for i, o := range read[part] {
				if o != from+int64(i) || o >= end {
					t.Fatalf("partition %d: read offsets %v, want %d to %d", part, read[part], from, end-1)
				}
			}
		}
		return nil
	})
}
