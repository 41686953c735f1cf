package benchsuite

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

// entryScrapes are the scrapes of a cluster of 2 brokers, 3 bookies and
// a metad around a workload of 10,000 entries, the second broker taking
// 4,000 of them: each bookie adds 10,000 (Qw = 3 of 3), bookie-3 twice
// as many allocations as the others per add.
func entryScrapes() []NodeScrape {
	node := func(name, role, entries string, n, mallocs float64) NodeScrape {
		before := Samples{entries: 500, MetricMallocs: 1e6, MetricHeapAllocObjects: 9e5}
		after := Samples{entries: 500 + n, MetricMallocs: 1e6 + mallocs, MetricHeapAllocObjects: 9e5 + mallocs/2}
		return NodeScrape{Name: name, Role: role, Before: before, After: after}
	}
	appends, adds := MetricAppendSeconds+"_count", MetricAddSeconds+"_count"
	return []NodeScrape{
		node("broker-1", roleBroker, appends, 6000, 6000*100),
		node("broker-2", roleBroker, appends, 4000, 4000*100),
		node("bookie-1", roleBookie, adds, 10000, 10000*40),
		node("bookie-2", roleBookie, adds, 10000, 10000*40),
		node("bookie-3", roleBookie, adds, 10000, 10000*80),
		// metad writes no entries; its allocations count per role only.
		{Name: "metad-1", Role: "metad", Before: Samples{MetricMallocs: 0}, After: Samples{MetricMallocs: 5000}},
	}
}

func TestEntriesDelta(t *testing.T) {
	e := EntriesDelta(entryScrapes())
	if e == nil || e.Appended != 10000 || e.Adds != 30000 {
		t.Fatalf("EntriesDelta = %+v, want 10,000 appended, 30,000 adds", e)
	}
	if len(e.PerProcess) != 5 || e.PerProcess["broker-2"] != 4000 || e.PerProcess["bookie-3"] != 10000 {
		t.Errorf("per process: %v", e.PerProcess)
	}
	if s := e.String(); s != "10,000 entries appended, 30,000 adds" {
		t.Errorf("String() = %q", s)
	}
	// A node that did not answer either scrape is not counted.
	nodes := entryScrapes()
	nodes[0].After = nil
	if e := EntriesDelta(nodes); e.Appended != 4000 || len(e.PerProcess) != 4 {
		t.Errorf("broker-1 unscraped: %+v", e)
	}
	if e := EntriesDelta([]NodeScrape{{Name: "broker-1", Role: roleBroker, Before: Samples{}, After: Samples{"x": 1}}}); e != nil {
		t.Errorf("no entry counters: %+v, want nil", e)
	}
}

// TestCPUPerEntry: a broker's CPU is stated per entry it appended, a
// bookie's per add it made, and a role's is its nodes' CPU over their
// entries, so the bookies' is per bookie, not the three copies' total.
func TestCPUPerEntry(t *testing.T) {
	nodes := entryScrapes()
	cpu := CPU{PerProcess: map[string]float64{"broker-1": 0.6, "broker-2": 0.17, "bookie-1": 0.4, "bookie-2": 0.5, "bookie-3": 0.45, "metad-1": 1},
		PerRole: map[string]float64{"broker": 0.77, "bookie": 1.35, "metad": 1}}
	cpu.FillPerEntry(EntriesDelta(nodes), nodes)
	want := map[string]float64{"broker": 77, "bookie": 45}
	if !sameFloats(cpu.PerEntryUsByRole, want) {
		t.Fatalf("per entry by role = %v µs, want %v", cpu.PerEntryUsByRole, want)
	}
	wantProcess := map[string]float64{"broker-1": 100, "broker-2": 42.5, "bookie-1": 40, "bookie-2": 50, "bookie-3": 45}
	if !sameFloats(cpu.PerEntryUsByProcess, wantProcess) {
		t.Fatalf("per entry by process = %v µs, want %v", cpu.PerEntryUsByProcess, wantProcess)
	}
	cpu.Entries = EntriesDelta(nodes)
	if s, want := cpu.PerEntrySummary(), "CPU per entry: broker 77 µs, bookie 45 µs (per add); 10,000 entries appended, 30,000 adds"; s != want {
		t.Errorf("PerEntrySummary() = %q, want %q", s, want)
	}

	// A bookie that did not answer its scrape leaves its CPU out of the
	// role's too: 0.9 core-s over 20,000 adds, not 1.35.
	nodes[4].After = nil
	cpu.FillPerEntry(EntriesDelta(nodes), nodes)
	if got := cpu.PerEntryUsByRole["bookie"]; math.Abs(got-45) > 1e-9 {
		t.Errorf("bookie-3 unscraped: %v µs per add, want 45", got)
	}
	if _, ok := cpu.PerEntryUsByProcess["bookie-3"]; ok {
		t.Error("an unscraped bookie has a figure")
	}

	// Without counts, nothing is stated per entry.
	var none CPU
	none.FillPerEntry(nil, nodes)
	if none.PerEntryUsByRole != nil || none.PerEntrySummary() != "" {
		t.Errorf("no entries: %+v", none)
	}
}

func TestAllocsDelta(t *testing.T) {
	nodes := entryScrapes()
	e := EntriesDelta(nodes)
	a := AllocsDelta(nodes, e, 2e6, 400000)
	if a == nil || a.Counter != MetricMallocs {
		t.Fatalf("AllocsDelta = %+v, want counted with %s", a, MetricMallocs)
	}
	if a.PerRole["broker"] != 1e6 || a.PerRole["bookie"] != 1.6e6 || a.PerRole["metad"] != 5000 || a.PerProcess[RoleClient] != 2e6 {
		t.Errorf("objects: per role %v, per process %v", a.PerRole, a.PerProcess)
	}
	want := map[string]float64{"broker": 100, "bookie": 1.6e6 / 30000}
	if !sameFloats(a.PerEntryByRole, want) {
		t.Errorf("per entry by role = %v, want %v", a.PerEntryByRole, want)
	}
	if a.PerEntryByProcess["bookie-3"] != 80 || a.ClientPerRecord != 5 {
		t.Errorf("bookie-3 %v per add, client %v per record; want 80, 5", a.PerEntryByProcess["bookie-3"], a.ClientPerRecord)
	}
	if s, want := a.Summary(), "allocations per entry: broker 100, bookie 53 (per add); client 5.0 per record"; s != want {
		t.Errorf("Summary() = %q, want %q", s, want)
	}

	// A read workload: no entries to state them per; the client's per
	// record stays.
	if a := AllocsDelta(nodes, nil, 1e6, 1e5); a.PerEntryByRole != nil || a.Summary() != "allocations: client 10.0 per record" {
		t.Errorf("no entries: %+v, %q", a, a.Summary())
	}

	// Nodes without the Go collector's memstats: the runtime's count.
	for i := range nodes {
		delete(nodes[i].Before, MetricMallocs)
		delete(nodes[i].After, MetricMallocs)
	}
	if a := AllocsDelta(nodes, e, 0, 0); a == nil || a.Counter != MetricHeapAllocObjects || a.PerEntryByRole["broker"] != 50 {
		t.Errorf("fallback counter: %+v", a)
	}
	if a := AllocsDelta([]NodeScrape{{Name: "broker-1", Role: roleBroker, Before: Samples{}, After: Samples{}}}, nil, 1, 1); a != nil {
		t.Errorf("no allocation counter: %+v, want nil", a)
	}
}

// heapSink keeps TestHeapObjects' allocations on the heap.
var heapSink []*[64]byte

// This process's own count grows as it allocates (the runtime adds each
// P's count when its cache of spans is flushed, so some lag behind).
func TestHeapObjects(t *testing.T) {
	const n = 100000
	before := HeapObjects()
	heapSink = make([]*[64]byte, n)
	for i := range heapSink {
		heapSink[i] = new([64]byte)
	}
	if after := HeapObjects(); after-before < n/2 {
		t.Fatalf("HeapObjects grew by %v over %d allocations", after-before, n)
	}
	heapSink = nil
}

// TestFixedLoadRatios: e2e-25000 and e2e-50000 are stated against their
// own p99 targets, with CPU per GB; e2e-5000's rows stay as they were.
func TestFixedLoadRatios(t *testing.T) {
	r := sampleReport()
	run := &r.Runs[0]
	lat := func(ackP99, consumeP99 float64) []Latency {
		return []Latency{{Kind: LatencyPublishAck, P50: 3, P99: ackP99}, {Kind: LatencyAckConsume, P50: 1, P99: consumeP99}}
	}
	nodes := entryScrapes()
	entries := EntriesDelta(nodes)
	cpu := CPU{PerProcess: map[string]float64{"broker-1": 0.6, "broker-2": 0.17, "bookie-1": 0.4, "bookie-2": 0.5, "bookie-3": 0.45},
		PerRole: map[string]float64{"broker": 0.77, "bookie": 1.35}, HostBusy: 0.83, Entries: entries}
	cpu.FillPerGB(1e9)
	cpu.FillPerEntry(entries, nodes)
	run.Workloads = append(run.Workloads,
		Workload{Name: WorkloadE2E25k, MBPerSec: 25, Bytes: 1e9, CPU: cpu, Latency: lat(14, 10.5), Allocs: AllocsDelta(nodes, entries, 2e6, 400000)},
		Workload{Name: WorkloadE2E50k, MBPerSec: 50, Bytes: 1e9, CPU: cpu, Latency: lat(26, 9)})
	got := map[string]Ratio{}
	for _, x := range Ratios(r.Limits, *run) {
		got[x.Workload+"/"+x.Metric] = x
	}
	checkRatios(t, got, []ratioCase{
		{WorkloadE2E25k + "/pub->ack p99", 14, true},
		{WorkloadE2E25k + "/ack->consume p99", 10.5, false},
		{WorkloadE2E25k + "/CPU brokers+bookies", 2.12, true},
		{WorkloadE2E50k + "/pub->ack p99", 26, false},
		{WorkloadE2E50k + "/ack->consume p99", 9, true},
		{WorkloadE2E5k + "/pub->ack p99", 9, true},
		{WorkloadE2E5k + "/ack->consume p99", 6, false},
	})
	for key, target := range map[string]float64{WorkloadE2E25k + "/pub->ack p99": 15, WorkloadE2E25k + "/ack->consume p99": 10,
		WorkloadE2E50k + "/pub->ack p99": 25, WorkloadE2E50k + "/ack->consume p99": 10, WorkloadE2E5k + "/pub->ack p99": 10} {
		if got[key].Target != target || got[key].AtLeast {
			t.Errorf("%s: target %v (at least %v), want ≤ %v", key, got[key].Target, got[key].AtLeast, target)
		}
	}
	if b := got[WorkloadE2E50k+"/pub->ack p99"].Bound; !strings.Contains(b, "fsync p99 1.50 ms") || !strings.Contains(b, "83% busy") {
		t.Errorf("e2e-50000 pub->ack p99 bound %q: want the fsync p99 and the machine's busy share", b)
	}
	var buf bytes.Buffer
	if err := r.Fprint(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CPU per entry: broker 77 µs, bookie 45 µs (per add); 10,000 entries appended, 30,000 adds",
		"allocations per entry: broker 100, bookie 53 (per add); client 5.0 per record",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
	// The new fields survive the JSON (version 1, fields added).
	checkRoundTrip(t, r)
}

// The fixed loads run after e2e-5000 and its Kafka twin, before
// e2e-half-max, at their own rates.
func TestFixedLoads(t *testing.T) {
	i5k, i25k, i50k, iHalf := slices.Index(Workloads, WorkloadKafkaE2E5k), slices.Index(Workloads, WorkloadE2E25k),
		slices.Index(Workloads, WorkloadE2E50k), slices.Index(Workloads, WorkloadE2EHalf)
	if i5k < 0 || i25k != i5k+1 || i50k != i25k+1 || iHalf != i50k+1 {
		t.Fatalf("run order %v", Workloads)
	}
	for name, want := range map[string]float64{WorkloadE2E5k: 5000, WorkloadKafkaE2E5k: 5000, WorkloadE2E25k: 25000, WorkloadE2E50k: 50000} {
		if rate, ok := FixedRate(name); !ok || rate != want {
			t.Errorf("FixedRate(%s) = %v, %v; want %v", name, rate, ok, want)
		}
	}
	if _, ok := FixedRate(WorkloadE2EHalf); ok {
		t.Error("e2e-half-max has a fixed rate")
	}
	if WritesEntries(WorkloadCatchUp) || WritesEntries(WorkloadKafkaGroupCatchUp) || !WritesEntries(WorkloadE2E25k) {
		t.Error("WritesEntries: the catch-ups read, the e2e loads write")
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 12345.4: "12,345", 1234567: "1,234,567", -45000: "-45,000"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

// sameFloats: a and b have the same keys and values to 1e-9.
func sameFloats(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if x, ok := a[k]; !ok || math.Abs(x-v) > 1e-9 {
			return false
		}
	}
	return true
}
