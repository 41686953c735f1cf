package benchsuite

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		{"none", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of odd, unsorted", ms(5, 1, 3), 0.5, 3 * time.Millisecond},
		{"median of even is the lower", ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{"p99 of 100", ms(seq(1, 100)...), 0.99, 99 * time.Millisecond},
		{"p100 is the max", ms(seq(1, 100)...), 1, 100 * time.Millisecond},
		{"q 0 is the min", ms(9, 8, 7), 0, 7 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Quantile(tc.samples, tc.q); got != tc.want {
				t.Fatalf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses: fields count from the
	// last ')'.
	line := "4242 (bro ker) (x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 12 0 100 2000000 500 18446744073709551615\n"
	got, err := ParseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if got != 3.25 {
		t.Fatalf("ParseProcStat = %v, want 3.25 (325 ticks)", got)
	}
	for _, bad := range []string{"", "4242 bro ker S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 ab 75"} {
		if _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("ParseProcStat(%q): no error", bad)
		}
	}
	// This process's own.
	if s, err := CPUSeconds(os.Getpid()); err != nil || s < 0 {
		t.Fatalf("CPUSeconds(self) = %v, %v", s, err)
	}
}

func TestParseMetricsAndJournalDelta(t *testing.T) {
	scrape := func(groups, bytes, records, syncs, syncSecs float64) Samples {
		text := "# HELP strata_bookie_journal_group_bytes Bytes per group.\n" +
			"# TYPE strata_bookie_journal_group_bytes histogram\n" +
			`strata_bookie_journal_group_bytes_bucket{le="256"} 0` + "\n" +
			"strata_bookie_journal_group_bytes_sum " + ftoa(bytes) + "\n" +
			"strata_bookie_journal_group_bytes_count " + ftoa(groups) + "\n" +
			"strata_bookie_journal_group_records_sum " + ftoa(records) + "\n" +
			"strata_bookie_journal_group_records_count " + ftoa(groups) + "\n" +
			"strata_bookie_journal_sync_latency_seconds_sum " + ftoa(syncSecs) + "\n" +
			"strata_bookie_journal_sync_latency_seconds_count " + ftoa(syncs) + "\n" +
			`go_info{version="go1.26"} 1` + "\n"
		s, err := ParseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s["go_info"]; ok {
			t.Fatal("a labelled sample was kept")
		}
		return s
	}
	before := []Samples{scrape(10, 1000, 20, 10, 0.01), scrape(0, 0, 0, 0, 0)}
	after := []Samples{scrape(110, 201000, 420, 110, 0.11), scrape(100, 200000, 400, 100, 0.1)}
	j := JournalDelta(before, after, 2)
	want := &Journal{Groups: 200, BytesPerGroup: 2000, RecordsPerGroup: 4, MeanSyncMs: 1, GroupsPerSecPerBook: 50}
	if !approx(j, want) {
		t.Fatalf("JournalDelta = %+v, want %+v", j, want)
	}
	if j := JournalDelta([]Samples{{}}, []Samples{{"x": 1}}, 1); j != nil {
		t.Fatalf("no journal metrics: %+v, want nil", j)
	}
}

// TestNodeLatency: the growth of the nodes' histograms over two windows of
// one side adds up, and the means are over both windows' counts.
func TestNodeLatency(t *testing.T) {
	h := func(name string, sum, count float64) Samples {
		return Samples{name + "_sum": sum, name + "_count": count}
	}
	broker := func(sum, count float64) Samples { return h(MetricAppendSeconds, sum, count) }
	bookie := func(add, adds, sync, syncs float64) Samples {
		s := h(MetricAddSeconds, add, adds)
		for k, v := range h(MetricSyncSeconds, sync, syncs) {
			s[k] = v
		}
		return s
	}
	t0 := []Samples{broker(1, 100), bookie(0.3, 300, 0.1, 200)}
	t1 := []Samples{broker(1.5, 200), bookie(0.6, 400, 0.2, 300)} // window 1: 5 ms appends, 3 ms adds, 1 ms syncs
	t2 := []Samples{broker(1.5, 200), bookie(0.6, 400, 0.2, 300)} // unchanged: not this side's
	t3 := []Samples{broker(3.0, 300), bookie(1.5, 500, 0.5, 400)} // window 2: 15 ms, 9 ms, 3 ms
	acc := Samples{}
	AddNodeDeltas(acc, t0, t1)
	AddNodeDeltas(acc, t2, t3)
	got := NodeLatencyOf(acc)
	want := &NodeLatency{BrokerAppendMs: 10, Appends: 200, BookieAddMs: 6, Adds: 200, JournalSyncMs: 2, Syncs: 200}
	if !approx(got, want) {
		t.Fatalf("NodeLatencyOf = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "append 10.00 ms, add 6.00, sync 2.00" {
		t.Errorf("String() = %q", s)
	}
	if l := NodeLatencyOf(Samples{}); l != nil || l.String() != "-" {
		t.Errorf("nothing counted: %+v", l)
	}
}

func TestReadsDelta(t *testing.T) {
	parse := func(text string) Samples {
		s, err := ParseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := []Samples{parse("strata_broker_fetched_bytes_total 100\nstrata_broker_bookie_read_bytes_total 0\n"), parse("strata_broker_fetched_bytes_total 0\n")}
	after := []Samples{
		parse("strata_broker_fetched_bytes_total 1100\nstrata_broker_bookie_read_bytes_total 500\nstrata_broker_tail_cache_hits_total 3\n"),
		parse("strata_broker_fetched_bytes_total 1000\nstrata_broker_bookie_read_bytes_total 1000\nstrata_broker_tail_cache_misses_total 7\n"),
	}
	r := ReadsDelta(before, after)
	want := Reads{FetchedBytes: 2000, BookieReadBytes: 1500, TailCacheHits: 3, TailCacheMisses: 7, FromBookies: 0.75}
	if r == nil || *r != want {
		t.Fatalf("ReadsDelta = %+v, want %+v", r, want)
	}
	if r := ReadsDelta([]Samples{nil}, []Samples{nil}); r != nil {
		t.Fatalf("no broker metrics: %+v, want nil", r)
	}
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// approx: the float fields of *a and *b (structs of floats) are equal to
// 1e-9.
func approx[T any](a, b *T) bool {
	av, bv := reflect.ValueOf(*a), reflect.ValueOf(*b)
	for i := range av.NumField() {
		if math.Abs(av.Field(i).Float()-bv.Field(i).Float()) > 1e-9 {
			return false
		}
	}
	return true
}

// sampleReport is a run whose every ratio is known.
func sampleReport() *Report {
	lat := func(kind string, p50, p99 float64) Latency {
		return Latency{Kind: kind, Count: 100, P50: p50, P99: p99}
	}
	cpu := CPU{PerProcess: map[string]float64{"broker-1": 1, "bookie-1": 3}, PerRole: map[string]float64{"broker": 1, "bookie": 3, "client": 2}}
	cpu.FillPerGB(1e9)
	return &Report{
		Version: ReportVersion, StartedAt: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC), Host: Host{CPUs: 2},
		Limits: Limits{Dir: "/d", Loopback: RoundTrip{Count: 10, P50Us: 30, P99Us: 60}, Disk: []DiskProbe{
			{GroupBytes: 4096, Journals: 1, SyncP50Ms: 0.5, SyncP99Ms: 1, MBPerSec: 8},
			{GroupBytes: 4096, Journals: 3, SyncP50Ms: 1, SyncP99Ms: 1.5, MBPerSec: 12},
			{GroupBytes: 1 << 20, Journals: 3, SyncP50Ms: 4, SyncP99Ms: 8, MBPerSec: 300},
		}},
		Runs: []Run{{Metad: 3, Bookies: 3, Brokers: 2, Workloads: []Workload{
			{Name: WorkloadProduce, MBPerSec: 90, Bytes: 1e9, CPU: cpu, Journal: &Journal{Groups: 5, BytesPerGroup: 500000}},
			{Name: WorkloadE2E5k, MBPerSec: 5, Bytes: 1e9, CPU: cpu, Journal: &Journal{Groups: 5, BytesPerGroup: 3000},
				Latency: []Latency{lat(LatencyPublishAck, 2, 9), lat(LatencyAckConsume, 1, 6)}},
			{Name: WorkloadE2EHalf, MBPerSec: 45, Latency: []Latency{lat(LatencyPublishAck, 5, 30), lat(LatencyAckConsume, 2, 9)}},
			{Name: WorkloadCatchUp, MBPerSec: 270},
			// Merged, compacting is 1.25x of without; the cycles,
			// each against the window before it, say 2.9x, 1.2x, 1.6x;
			// the control cycles, 1.75x.
			{Name: WorkloadCompact, MBPerSec: 45, Latency: []Latency{lat(LatencyPublishAck, 5, 40)},
				Compaction: &Compaction{Cycles: 3, ControlCycles: 3, MBPerSecPerPass: 55, Before: []Latency{lat(LatencyPublishAck, 5, 32)},
					Control: []Latency{lat(LatencyPublishAck, 5, 56)}, CycleP99Ratios: []float64{2.9, 1.2, 1.6}}},
		}}},
	}
}

func TestRatios(t *testing.T) {
	r := sampleReport()
	got := map[string]Ratio{}
	for _, x := range Ratios(r.Limits, r.Runs[0]) {
		got[x.Workload+"/"+x.Metric] = x
	}
	checkRatios(t, got, []ratioCase{
		// 90 MB/s over (300 MB/s ÷ 3) at the 1 MiB probe (the smallest
		// at least the 500 kB mean group).
		{WorkloadProduce + "/ack MB/s ÷ journal MB/s", 0.9, true},
		{WorkloadProduce + "/CPU brokers+bookies", 4, true},
		{WorkloadProduce + "/CPU brokers", 1, true},
		// 2 ms − fsync p50 1 ms of the 4 KiB three-journal probe.
		{WorkloadE2E5k + "/pub->ack p50 − fsync p50", 1, true},
		{WorkloadE2E5k + "/pub->ack p99", 9, true},
		{WorkloadE2E5k + "/ack->consume p99", 6, false},
		{WorkloadE2EHalf + "/ack->consume p99", 9, true},
		{WorkloadE2EHalf + "/pub->ack p99", 30, false},
		{WorkloadCatchUp + "/catch-up MB/s ÷ produce MB/s", 3, true},
		{WorkloadCompact + "/compaction MB/s per pass", 55, true},
		// The merged windows' ratio, not the cycles' median (1.6x).
		{WorkloadCompact + "/pub->ack p99 compacting ÷ not", 1.25, true},
		{WorkloadCompact + "/pub->ack p99 control ÷ not", 1.75, false},
		{WorkloadCompact + "/pub->ack p99 compacting ÷ control", 40.0 / 56, true},
	})
	if _, ok := got[WorkloadProduceBig+"/ack MB/s ÷ journal MB/s"]; ok {
		t.Error("a workload that did not run has a ratio")
	}
	// A noisy disk (fsync p99 above 2 ms) relaxes the p99 target to 5×.
	r.Limits.Disk[1].SyncP99Ms = 4
	for _, x := range Ratios(r.Limits, r.Runs[0]) {
		if x.Workload == WorkloadE2E5k && x.Metric == "pub->ack p99" && x.Target != 20 {
			t.Errorf("p99 target with fsync p99 4 ms: %v, want 20", x.Target)
		}
	}
	var buf bytes.Buffer
	if err := r.Fprint(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"loopback RTT p50 30µs", "3 metad, 3 bookies, 2 broker(s)", "catch-up MB/s ÷ produce MB/s", "≥ 2.00", "yes", "no"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

// ratioCase is a ratio expected under its key (workload/metric).
type ratioCase struct {
	key   string
	value float64
	met   bool
}

// checkRatios: got has every case's ratio with its value and verdict.
func checkRatios(t *testing.T, got map[string]Ratio, cases []ratioCase) {
	t.Helper()
	for _, tc := range cases {
		x, ok := got[tc.key]
		if !ok {
			t.Errorf("%s: no ratio (have %v)", tc.key, keys(got))
			continue
		}
		if math.Abs(x.Value-tc.value) > 1e-9 || x.Met != tc.met {
			t.Errorf("%s = %v (met %v), want %v (met %v)", tc.key, x.Value, x.Met, tc.value, tc.met)
		}
	}
}

func keys(m map[string]Ratio) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestLimitsProbe(t *testing.T) {
	l := sampleReport().Limits
	for _, tc := range []struct {
		journals int
		group    float64
		want     int
		ok       bool
	}{
		{3, 0, 4096, true},
		{3, 4096, 4096, true},
		{3, 4097, 1 << 20, true},
		{3, 8 << 20, 1 << 20, true}, // above every probe: the largest
		{1, 1 << 20, 4096, true},
		{2, 1, 0, false},
	} {
		p, ok := l.Probe(tc.journals, tc.group)
		if ok != tc.ok || p.GroupBytes != tc.want {
			t.Errorf("Probe(%d, %v) = %d, %v; want %d, %v", tc.journals, tc.group, p.GroupBytes, ok, tc.want, tc.ok)
		}
	}
}

func TestReportRoundTrip(t *testing.T) {
	r := sampleReport()
	back := checkRoundTrip(t, r)
	// The ratios are a function of the report alone (B4).
	if !reflect.DeepEqual(Ratios(r.Limits, r.Runs[0]), Ratios(back.Limits, back.Runs[0])) {
		t.Fatal("ratios differ after a round trip")
	}
}

func TestProbeDiskAndLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("touches the disk for a second")
	}
	dir := t.TempDir()
	p, err := ProbeDisk(context.Background(), dir, 64<<10, 3, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if p.Syncs == 0 || p.SyncP50Ms <= 0 || p.SyncP99Ms < p.SyncP50Ms || p.MBPerSec <= 0 {
		t.Fatalf("probe: %+v", p)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("probe files left: %v", left)
	}
	rp, err := ProbeDiskRead(context.Background(), dir, 2, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rp.Files != 2 || rp.MBPerSec <= 0 {
		t.Fatalf("read probe: %+v", rp)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("read probe files left: %v", left)
	}
	rt, err := MeasureLoopback(context.Background(), 200)
	if err != nil {
		t.Fatal(err)
	}
	if rt.Count != 200 || rt.P50Us <= 0 || rt.P99Us < rt.P50Us {
		t.Fatalf("loopback: %+v", rt)
	}
}

func TestParseHostStat(t *testing.T) {
	data := []byte("cpu  100 5 50 800 20 3 2 1 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\nintr 1\n")
	h, err := ParseHostStat(data)
	if err != nil {
		t.Fatal(err)
	}
	// busy: user+nice+system+irq+softirq+steal = 161 ticks; total 981.
	if h.Busy != 1.61 || h.Total != 9.81 {
		t.Fatalf("%+v", h)
	}
	if got := BusyFraction(HostTimes{Busy: 1, Total: 4}, HostTimes{Busy: 2.5, Total: 6}); got != 0.75 {
		t.Fatalf("BusyFraction = %v", got)
	}
	if BusyFraction(h, h) != 0 {
		t.Fatal("no time passed: want 0")
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2 x 4\n"} {
		if _, err := ParseHostStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := ReadHostTimes(); err != nil {
		t.Fatal(err)
	}
}

// checkRoundTrip writes r to a file and reads it back, which must be the
// same report, and returns what it read.
func checkRoundTrip(t *testing.T, r *Report) *Report {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.json")
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, back) {
		t.Fatalf("round trip differs:\n%+v\n%+v", r, back)
	}
	return back
}
