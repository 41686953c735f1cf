package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/strata-log/strata/cmd/strata/benchsuite"
	"github.com/strata-log/strata/cmd/strata/devcluster"
)

func TestCPUDelta(t *testing.T) {
	nodes := []devcluster.Node{
		{Name: "broker-1", Role: devcluster.RoleBroker}, {Name: "broker-2", Role: devcluster.RoleBroker},
		{Name: "bookie-1", Role: devcluster.RoleBookie}, {Name: "metad-1", Role: devcluster.RoleMetad},
	}
	before := map[string]float64{"broker-1": 1.1, "broker-2": 0.3, "bookie-1": 2, "metad-1": 5, "": 0.7}
	// metad-1 exited in between: left out, not counted as negative.
	after := map[string]float64{"broker-1": 2.3, "broker-2": 0.5, "bookie-1": 4.5, "": 1}
	c := CPUDelta(before, after, nodes)
	want := map[string]float64{"broker": 1.4, "bookie": 2.5, "client": 0.3}
	if len(c.PerRole) != len(want) {
		t.Fatalf("per role %v, want %v", c.PerRole, want)
	}
	for role, v := range want {
		if c.PerRole[role] != v {
			t.Errorf("%s: %v, want %v", role, c.PerRole[role], v)
		}
	}
	if _, ok := c.PerProcess["metad-1"]; ok {
		t.Error("an exited process was counted")
	}
	c.FillPerGB(2e9)
	if c.PerGBBrokersBookies != 1.95 || c.PerGBBrokers != 0.7 {
		t.Errorf("per GB: %+v", c)
	}
	if got := c.PerGBByRole; len(got) != 3 || got["broker"] != 0.7 || got["bookie"] != 1.25 || got["client"] != 0.15 {
		t.Errorf("per GB by role: %v", got)
	}
	if got, want := c.PerGBSummary(), "CPU core-s/GB: broker 0.70, bookie 1.25, client 0.15"; got != want {
		t.Errorf("PerGBSummary() = %q, want %q", got, want)
	}
}

// TestNodeScrapes: the scrapes of one role, in the nodes' order, are
// paired with the nodes of that role.
func TestNodeScrapes(t *testing.T) {
	nodes := []devcluster.Node{
		{Name: "bookie-1", Role: devcluster.RoleBookie}, {Name: "broker-1", Role: devcluster.RoleBroker},
		{Name: "bookie-2", Role: devcluster.RoleBookie}, {Name: "broker-2", Role: devcluster.RoleBroker},
	}
	before := []benchsuite.Samples{{"x": 1}, {"x": 2}}
	after := []benchsuite.Samples{{"x": 10}, nil} // broker-2 did not answer
	got := nodeScrapes(nodes, devcluster.RoleBroker, before, after)
	if len(got) != 2 || got[0].Name != "broker-1" || got[0].Before["x"] != 1 || got[0].After["x"] != 10 ||
		got[1].Name != "broker-2" || got[1].Role != devcluster.RoleBroker || got[1].After != nil {
		t.Fatalf("nodeScrapes = %+v", got)
	}
	// Fewer scrapes than nodes: the nodes without one are left out.
	if got := nodeScrapes(nodes, devcluster.RoleBookie, before[:1], after[:1]); len(got) != 1 || got[0].Name != "bookie-1" {
		t.Fatalf("one scrape of two bookies: %+v", got)
	}
}

// cpuProfileSelf writes a profile of this process that pprof reads (a
// gzipped protobuf), and refuses, leaving no file, while another profile
// is being taken.
func TestCPUProfileSelf(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "client.pprof")
	if err := pprof.StartCPUProfile(io.Discard); err != nil {
		t.Fatal(err)
	}
	err := cpuProfileSelf(context.Background(), time.Millisecond, path)
	pprof.StopCPUProfile()
	if err == nil {
		t.Fatal("a CPU profile started while another was being taken")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the refused profile left a file: %v", err)
	}
	if err := cpuProfileSelf(context.Background(), 100*time.Millisecond, path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile of %d bytes (%v), want gzip", len(b), err)
	}
}

// The warm-up ends once every broker's tail cache is full and no
// broker's resident memory grew by more than warmUpGrowth over the last
// warmUpSteady polls; a poll in which a cache is not full, or a broker
// does not answer, starts the count again.
func TestWarmUpState(t *testing.T) {
	poll := func(cache, rss float64) benchsuite.Samples {
		return benchsuite.Samples{benchsuite.MetricTailCacheBytes: cache, benchsuite.MetricResidentBytes: rss}
	}
	const full = brokerTailCacheBytes
	var w warmUpState
	steps := []struct {
		brokers []benchsuite.Samples
		want    bool
	}{
		{[]benchsuite.Samples{poll(full/2, 100), poll(full, 100)}, false}, // one cache half full
		{[]benchsuite.Samples{poll(full, 400), poll(full, 400)}, false},
		{[]benchsuite.Samples{poll(full, 600), poll(full, 400)}, false},
		{[]benchsuite.Samples{poll(full, 700), poll(full, 400)}, false},
		{[]benchsuite.Samples{poll(full, 700), poll(full, 400)}, false}, // 700 against 400 three polls ago
		{nil, false}, // a broker did not answer
		{[]benchsuite.Samples{poll(full, 700), poll(full, 400)}, false},
		{[]benchsuite.Samples{poll(full, 702), poll(full, 401)}, false},
		{[]benchsuite.Samples{poll(full, 703), poll(full, 402)}, false},
		{[]benchsuite.Samples{poll(full, 704), poll(full, 403)}, true}, // within 1% of three polls ago
	}
	for i, s := range steps {
		if got := w.observe(s.brokers); got != s.want || w.done != s.want {
			t.Fatalf("poll %d: observe %v (done %v), want %v", i, got, w.done, s.want)
		}
	}
}
