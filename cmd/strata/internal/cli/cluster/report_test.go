package cluster

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/ledger/replication"
	"github.com/strata-log/strata/proto/brokerpb"
)

func TestClusterHealthBrokers(t *testing.T) {
	broker := func(id string) *brokerpb.BrokerDescription {
		return &brokerpb.BrokerDescription{Info: &brokerpb.BrokerInfo{Id: id, Address: id + ":9092"}, PartitionsOwned: 3}
	}
	for _, tc := range []struct {
		name string
		d    *brokerpb.DescribeClusterResponse
		want string
	}{
		{"healthy", &brokerpb.DescribeClusterResponse{ControllerId: "k1", Brokers: []*brokerpb.BrokerDescription{broker("k2"), broker("k1")}}, ""},
		{"unowned", &brokerpb.DescribeClusterResponse{ControllerId: "k1", Brokers: []*brokerpb.BrokerDescription{broker("k1")}, UnownedPartitions: 2}, "2 partitions without an owner"},
		{"no controller", &brokerpb.DescribeClusterResponse{Brokers: []*brokerpb.BrokerDescription{broker("k1")}}, "no controller"},
		{"no brokers", &brokerpb.DescribeClusterResponse{}, "none registered"},
	} {
		rep := &Report{}
		CollectBrokers(rep, tc.d, nil)
		got := strings.Join(rep.Problems, "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, got, tc.want)
		}
		if tc.name == "healthy" && (len(rep.Brokers.Brokers) != 2 || rep.Brokers.Brokers[0].ID != "k1") {
			t.Errorf("brokers not sorted: %+v", rep.Brokers.Brokers)
		}
	}
}

// A drained broker shows as "drained" and is a warning, not a problem; a
// broker shutting down shows as "draining".
func TestClusterBrokerStates(t *testing.T) {
	d := &brokerpb.DescribeClusterResponse{ControllerId: "k1", Brokers: []*brokerpb.BrokerDescription{
		{Info: &brokerpb.BrokerInfo{Id: "k1"}},
		{Info: &brokerpb.BrokerInfo{Id: "k2"}, Drained: true},
		{Info: &brokerpb.BrokerInfo{Id: "k3", State: brokerpb.BrokerState_BROKER_DRAINING}},
	}}
	rep := &Report{}
	CollectBrokers(rep, d, nil)
	var states []string
	for _, r := range rep.Brokers.Brokers {
		states = append(states, r.ID+"="+r.State)
	}
	if got := strings.Join(states, " "); got != "k1=active k2=drained k3=draining" {
		t.Errorf("states %q", got)
	}
	if len(rep.Problems) != 0 || strings.Join(rep.Warnings, ";") != "broker k2: drained, holds no partitions until 'strata broker undrain k2'" {
		t.Errorf("problems %q warnings %q", rep.Problems, rep.Warnings)
	}
}

func TestJudgeBookies(t *testing.T) {
	rows := func(states ...string) []BookieRow {
		var out []BookieRow
		for i, s := range states {
			out = append(out, BookieRow{ID: string(rune('a' + i)), State: s})
		}
		return out
	}
	rep := &Report{Bookies: rows("writable", "writable", "writable", "down")}
	judgeBookies(rep)
	if len(rep.Problems) != 0 || strings.Join(rep.Warnings, ";") != "bookies: d down" {
		t.Fatalf("3 writable, one down: problems %q warnings %q", rep.Problems, rep.Warnings)
	}
	rep = &Report{Bookies: rows("writable", "read-only", "down")}
	judgeBookies(rep)
	if strings.Join(rep.Problems, ";") != "bookies: 1 writable, fewer than 3 (b read-only, c down)" || len(rep.Warnings) != 0 {
		t.Fatalf("1 writable: problems %q warnings %q", rep.Problems, rep.Warnings)
	}
}

func TestPrint(t *testing.T) {
	rep := &Report{Healthy: false, Problems: []string{"brokers: no controller"}, Warnings: []string{"ledgers: 2 under-replicated"},
		Metad: &cli.ClusterStatus{}, Brokers: BrokersReport{Topics: 2, Partitions: 4, Brokers: []BrokerRow{{ID: "k1", Address: "127.0.0.1:9092", State: "active", Owned: 4}}},
		Bookies: []BookieRow{{ID: "b1", State: "writable", Address: "127.0.0.1:7301", FreeBytes: 1 << 30, TotalBytes: 2 << 30}},
		Ledgers: 5, UnderReplicated: 2}
	var out bytes.Buffer
	if err := Print(&cli.Printer{W: &out, Format: cli.FormatText}, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"METAD  leader none, 0 members\n",
		"\nBROKERS  controller -, 2 topics, 4 partitions, 0 without an owner\n",
		"k1  127.0.0.1:9092  -      active  0         4      -     -\n",
		"b1  writable  127.0.0.1:7301  1.0 GiB  2.0 GiB  -\n",
		"\nLEDGERS  5, 2 under-replicated\n\nwarning: ledgers: 2 under-replicated\nproblem: brokers: no controller\ncluster UNHEALTHY\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
	rep.Brokers.Error = "dial: refused"
	out.Reset()
	if err := Print(&cli.Printer{W: &out, Format: cli.FormatText}, rep); err != nil || !strings.Contains(out.String(), "BROKERS  unreachable: dial: refused\n") {
		t.Fatalf("%v:\n%s", err, out.String())
	}
}

func TestReplicatorText(t *testing.T) {
	if got := ReplicatorText(nil); !strings.HasPrefix(got, "none running") {
		t.Fatal(got)
	}
	if got := ReplicatorText(&replication.LeaderRecord{ID: "b1", SinceMs: 1700000000000}); got != "b1 (leading since 2023-11-14T22:13:20Z)" {
		t.Fatal(got)
	}
}

// mapKV is replication.KV in memory.
type mapKV map[string][]byte

func (m mapKV) List(_ context.Context, prefix string) ([]replication.KeyValue, error) {
	var out []replication.KeyValue
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, replication.KeyValue{Key: k, Value: m[k]})
		}
	}
	return out, nil
}
func (m mapKV) Put(_ context.Context, k string, v []byte) error { m[k] = v; return nil }
func (m mapKV) Delete(_ context.Context, k string) error        { delete(m, k); return nil }

func TestWatchDrain(t *testing.T) {
	ctx := context.Background()
	kv := mapKV{}
	if _, err := replication.MarkDecommissioned(ctx, kv, "b9", "127.0.0.1:1", time.Unix(100, 0)); err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	err := WatchDrain(ctx, kv, ledgertest.NewFakeMetadata(), "b9", true, time.Millisecond, &cli.Printer{W: &out, Format: cli.FormatText}, &stderr)
	if err != nil || !strings.HasPrefix(out.String(), "OK bookie b9 drained: no ledger names 127.0.0.1:1.") || stderr.Len() != 0 {
		t.Fatalf("%v: %q %q", err, out.String(), stderr.String())
	}
	out.Reset()
	err = WatchDrain(ctx, kv, ledgertest.NewFakeMetadata(), "b9", false, time.Millisecond, &cli.Printer{W: &out, Format: cli.FormatJSON}, &stderr)
	if err != nil || !strings.Contains(out.String(), `"bookie_id":"b9"`) || !strings.Contains(out.String(), `"drained":true`) {
		t.Fatalf("%v: %q", err, out.String())
	}
}
