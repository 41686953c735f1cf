package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/benchsuite"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/ledger/index"
	"github.com/strata-log/strata/ledger/storage"
)

func validOptions() Options {
	return Options{Topic: "bench", RecordSize: 1024, Duration: time.Second, Producers: 1, Acks: "quorum",
		Linger: 5 * time.Millisecond, Compression: "none", Partitions: 16}
}

func TestValidate(t *testing.T) {
	o := validOptions()
	for _, mode := range []string{ModeProduce, ModeConsume, ModeE2E} {
		if err := o.Validate(mode); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
	}
	o.RecordSize = 4
	if err := o.Validate(ModeProduce); err != nil {
		t.Errorf("4-byte records for produce: %v", err)
	}
	if err := o.Validate(ModeE2E); err == nil || !strings.Contains(err.Error(), "--record-size 4") {
		t.Errorf("4-byte records for e2e (which stamps 8): %v", err)
	}
	bad := Options{RecordSize: -1, Rate: -1, Producers: 0, Partitions: 0}
	err := bad.Validate(ModeProduce)
	for _, want := range []string{"--record-size -1", "--rate -1", "--duration 0s", "--producers 0", "--partitions 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("every problem is reported: %v lacks %q", err, want)
		}
	}
}

func TestProducerConfigAndDescribe(t *testing.T) {
	o := validOptions()
	o.Producers, o.Rate, o.Compression = 4, 5000, "zstd"
	pcfg, err := o.ProducerConfig()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := o.Describe(ModeE2E, pcfg), "4 producers, 5000 records/s, 1024-byte records, acks=quorum, compression=zstd, linger 5ms, for 1s"; got != want {
		t.Errorf("Describe:\n%s\nwant\n%s", got, want)
	}
	if got := o.Describe(ModeConsume, pcfg); got != "at most 1s" {
		t.Errorf("Describe consume: %s", got)
	}
	o.Producers, o.Rate = 1, 0
	if got := o.Describe(ModeProduce, pcfg); !strings.HasPrefix(got, "1 producer, max rate,") {
		t.Errorf("Describe: %s", got)
	}
	o.Acks = "most"
	if _, err := o.ProducerConfig(); err == nil {
		t.Error("acks most: accepted")
	}
	o.Acks, o.Compression = "all", "brotli"
	if _, err := o.ProducerConfig(); err == nil {
		t.Error("compression brotli: accepted")
	}
}

// TestValueStamp: B2, the scheduled time rides in the first 8 bytes.
func TestValueStamp(t *testing.T) {
	payload := randomPayload(16)
	sched := time.Unix(1700000000, 123456789)
	v := Value(payload, sched, true)
	if got, ok := ScheduledTime(v); !ok || !got.Equal(sched) {
		t.Fatalf("ScheduledTime: %v %t, want %v", got, ok, sched)
	}
	if !bytes.Equal(v[8:], payload[8:]) {
		t.Fatal("the stamp changed more than the first 8 bytes")
	}
	if u := Value(payload, sched, false); !bytes.Equal(u, payload) || &u[0] == &payload[0] {
		t.Fatal("an unstamped value is not a copy of the payload")
	}
	if _, ok := ScheduledTime([]byte("short")); ok {
		t.Fatal("a value under 8 bytes has a scheduled time")
	}
}

// TestSchedule: B1, send times are fixed in advance and spread across
// producers; the schedule ends at the end.
func TestSchedule(t *testing.T) {
	start := time.Now().Add(-time.Hour) // in the past: no waiting
	end := start.Add(time.Second)
	var all []time.Time
	for i := range 2 {
		s := newSchedule(start, end, 10, i, 2)
		for {
			at, ok := s.wait(context.Background())
			if !ok {
				break
			}
			all = append(all, at)
		}
	}
	if len(all) != 10 {
		t.Fatalf("10 records/s for 1s across 2 producers: %d send times", len(all))
	}
	if !all[0].Equal(start) || !all[5].Equal(start.Add(100*time.Millisecond)) || !all[1].Equal(start.Add(200*time.Millisecond)) {
		t.Fatalf("send times: %v", all[:6])
	}
	// As fast as possible: now, until the end.
	s := newSchedule(start, end, 0, 0, 1)
	if _, ok := s.wait(context.Background()); ok {
		t.Fatal("an unthrottled schedule past its end goes on")
	}
	s = newSchedule(time.Now(), time.Now().Add(time.Hour), 0, 0, 1)
	if _, ok := s.wait(context.Background()); !ok {
		t.Fatal("an unthrottled schedule before its end stops")
	}
	// A future send time gives way to ctx.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s = newSchedule(time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), 1, 0, 1)
	if _, ok := s.wait(ctx); ok {
		t.Fatal("wait ignored ctx")
	}
}

func TestAckMatcher(t *testing.T) {
	m := newAckMatcher()
	t0 := time.Unix(100, 0)
	k1, k2 := recordKey{0, 1}, recordKey{1, 1}
	if _, ok := m.acked(k1, t0); ok {
		t.Fatal("ack before consumption matched")
	}
	if d, ok := m.consumed(k1, t0.Add(3*time.Millisecond)); !ok || d != 3*time.Millisecond {
		t.Fatalf("consumption after ack: %v %t", d, ok)
	}
	if _, ok := m.consumed(k2, t0); ok {
		t.Fatal("consumption before ack matched")
	}
	// The consumer saw it first: ack->consume is 0, never negative.
	if d, ok := m.acked(k2, t0.Add(time.Millisecond)); !ok || d != 0 {
		t.Fatalf("ack after consumption: %v %t", d, ok)
	}
	if len(m.mu.acked)+len(m.mu.consumed) != 0 {
		t.Fatal("matched records are kept")
	}
}

func TestReachedEnds(t *testing.T) {
	tp0, tp1 := client.TopicPartition{Topic: "t", Partition: 0}, client.TopicPartition{Topic: "t", Partition: 1}
	ends := map[client.TopicPartition]int64{tp0: 5, tp1: 0}
	pos := func(m map[client.TopicPartition]int64) func(client.TopicPartition) (int64, bool) {
		return func(tp client.TopicPartition) (int64, bool) { v, ok := m[tp]; return v, ok }
	}
	if !reachedEnds(ends, pos(map[client.TopicPartition]int64{tp0: 5})) {
		t.Error("an empty partition without a position held consume back")
	}
	if reachedEnds(ends, pos(map[client.TopicPartition]int64{tp0: 4})) || reachedEnds(ends, pos(nil)) {
		t.Error("reached the end before it")
	}
}

func TestRunSummary(t *testing.T) {
	run := NewRun(ModeE2E, "t", 4)
	run.Start = time.Unix(100, 0)
	run.count(1000, 1e6)
	for i := range 100 {
		run.observe(LatPublishAck, time.Duration(i+1)*time.Millisecond)
	}
	if err := run.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	run.fail(errors.New("first"))
	run.fail(errors.New("second"))
	if err := run.Err(); err == nil || err.Error() != "2 errors; first: first" {
		t.Fatalf("Err: %v", err)
	}
	s := Summarize(run, 2*time.Second)
	if s.Records != 1000 || s.RecordsPerSec != 500 || s.MBPerSec != 0.5 || s.Errors != 2 || s.FirstError != "first" ||
		len(s.Latency) != 3 || s.Latency[0].Kind != "publish_to_ack" || s.Latency[0].Count != 100 || s.Latency[1].Count != 0 {
		t.Fatalf("%+v", s)
	}
	if p99 := s.Latency[0].P99; p99 < 95 || p99 > 105 {
		t.Fatalf("p99 %v ms, want about 99", p99)
	}

	var text bytes.Buffer
	if err := PrintSummary(&cli.Printer{W: &text, Format: cli.FormatText}, run, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\ne2e: 1000 records in 2.0s: 500 records/s, 0.50 MB/s, 2 errors\n", "first error: first\n",
		"LATENCY (ms)      COUNT  P50", "publish->ack      100", "ack->consume      0"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := PrintSummary(&cli.Printer{W: &js, Format: cli.FormatJSON}, run, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Records != 1000 || back.Mode != ModeE2E {
		t.Fatalf("JSON: %v %s", err, js.String())
	}
	// A consume run has no latency: no table, an empty list in JSON.
	c := NewRun(ModeConsume, "t", 1)
	text.Reset()
	if err := PrintSummary(&cli.Printer{W: &text, Format: cli.FormatText}, c, time.Second); err != nil || strings.Contains(text.String(), "LATENCY") {
		t.Fatalf("consume: %v %q", err, text.String())
	}
	if s := Summarize(c, time.Second); s.Latency == nil {
		t.Fatal("consume: latency null in JSON")
	}
}

func TestProgressLine(t *testing.T) {
	run := NewRun(ModeProduce, "t", 1)
	run.Start = time.Unix(100, 0)
	run.observe(LatPublishAck, 2500*time.Microsecond)
	got := run.progressLine(run.Start.Add(3*time.Second), time.Second, 1000, 2e6)
	if want := "    3s       1000 records/s      2.00 MB/s  p99 publish->ack 2."; !strings.HasPrefix(got, want) {
		t.Fatalf("%q, want prefix %q", got, want)
	}
	run.fail(errors.New("x"))
	if got := run.progressLine(run.Start.Add(time.Second), time.Second, 0, 0); !strings.HasSuffix(got, "errors 1") {
		t.Fatalf("%q", got)
	}
}

func TestFormatLatency(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1500 * time.Millisecond: "1.50s", 2500 * time.Microsecond: "2.50ms", 750 * time.Microsecond: "750µs",
	} {
		if got := FormatLatency(d); got != want {
			t.Errorf("%v: %s, want %s", d, got, want)
		}
	}
}

func TestPlanWorkload(t *testing.T) {
	base := validOptions()
	base.Rate, base.Duration = 123, 3*time.Second
	mode, o, err := planWorkload(base, "bench-2b", benchsuite.WorkloadProduce, benchsuite.Run{})
	if err != nil || mode != ModeProduce || o.Rate != 0 || o.Topic != "bench-2b-"+benchsuite.WorkloadProduce {
		t.Fatalf("produce-max: %s %+v %v", mode, o, err)
	}
	if _, _, err := planWorkload(base, "p", benchsuite.WorkloadE2EHalf, benchsuite.Run{}); err == nil {
		t.Fatal("e2e-half-max without produce-max: no error")
	}
	done := benchsuite.Run{Workloads: []benchsuite.Workload{{Name: benchsuite.WorkloadProduce, RecordsPerSec: 10000}}}
	mode, o, err = planWorkload(base, "p", benchsuite.WorkloadE2EHalf, done)
	if err != nil || mode != ModeE2E || o.Rate != benchsuite.HalfMaxRateFraction*10000 {
		t.Fatalf("e2e-half-max: %s %+v %v", mode, o, err)
	}
	mode, o, err = planWorkload(base, "p", benchsuite.WorkloadCatchUp, done)
	if err != nil || mode != ModeConsume || o.Topic != "p-"+benchsuite.WorkloadProduce || o.Duration != 16*time.Second {
		t.Fatalf("catch-up: %s %+v %v", mode, o, err)
	}
	_, o, _ = planWorkload(base, "p", benchsuite.WorkloadProduceBig, done)
	if o.RecordSize != benchsuite.BigRecordBytes {
		t.Fatalf("produce-max-64k: %+v", o)
	}
	for name, rate := range map[string]float64{benchsuite.WorkloadE2E5k: 5000, benchsuite.WorkloadE2E25k: 25000, benchsuite.WorkloadE2E50k: 50000} {
		mode, o, err = planWorkload(base, "p", name, done)
		if err != nil || mode != ModeE2E || o.Rate != rate || o.Topic != "p-"+name || o.Duration != base.Duration {
			t.Fatalf("%s: %s %+v %v", name, mode, o, err)
		}
	}
	// The Kafka workloads: their twins' shapes; catch-up reads the same
	// topic, the others write their own.
	mode, o, _ = planWorkload(base, "p", benchsuite.WorkloadKafkaProduce, done)
	if mode != ModeProduce || o.Rate != 0 || o.RecordSize != base.RecordSize || o.Topic != "p-"+benchsuite.WorkloadKafkaProduce {
		t.Fatalf("kafka-produce-max: %s %+v", mode, o)
	}
	mode, o, _ = planWorkload(base, "p", benchsuite.WorkloadKafkaE2E5k, done)
	if mode != ModeE2E || o.Rate != 5000 || o.Topic != "p-"+benchsuite.WorkloadKafkaE2E5k {
		t.Fatalf("kafka-e2e-5000: %s %+v", mode, o)
	}
	mode, o, _ = planWorkload(base, "p", benchsuite.WorkloadKafkaCatchUp, done)
	if mode != ModeConsume || o.Topic != "p-"+benchsuite.WorkloadProduce || o.Duration != 16*time.Second {
		t.Fatalf("kafka-catch-up: %s %+v", mode, o)
	}
	for _, name := range []string{benchsuite.WorkloadGroupCatchUp, benchsuite.WorkloadKafkaGroupCatchUp} {
		mode, o, _ = planWorkload(base, "p", name, done)
		if mode != ModeConsume || o.Topic != "p-"+benchsuite.WorkloadProduce || o.Duration != 16*time.Second {
			t.Fatalf("%s: %s %+v", name, mode, o)
		}
	}
	// group-rebalance writes its feed to a topic of its own.
	mode, o, _ = planWorkload(base, "p", benchsuite.WorkloadGroupRebalance, done)
	if mode != ModeProduce || o.Topic != "p-"+benchsuite.WorkloadGroupRebalance || o.Rate != RebalanceFeedRate {
		t.Fatalf("group-rebalance: %s %+v", mode, o)
	}
}

func TestSuiteOptions(t *testing.T) {
	o := validOptions()
	s := SuiteOptions{Brokers: []int{0, 21}, Bookies: 6, Out: ""}
	err := s.Validate(&o)
	for _, want := range []string{"--brokers 0", "--brokers 21", "--bookies 6", "--out is required", "--group-session-timeout 0s, --group-heartbeat-interval 0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
	s = SuiteOptions{Brokers: []int{1, 2}, Bookies: 4, Out: "r.json", Group: GroupSettings{DefaultGroupSessionTimeout, DefaultGroupHeartbeatInterval}}
	if err := s.Validate(&o); err != nil || s.TableFile() != "r.txt" {
		t.Fatalf("%v, table %s", err, s.TableFile())
	}
	s.TableOut = "t.txt"
	if s.TableFile() != "t.txt" {
		t.Fatal(s.TableFile())
	}
	// A path flag given without its value takes the next flag as it.
	s.ProfileDir = "--keep-data"
	if err := s.Validate(&o); err == nil || !strings.Contains(err.Error(), `--profile "--keep-data": looks like a flag`) {
		t.Fatalf("--profile --keep-data: %v", err)
	}
	s.ProfileDir = ""
	// The Kafka workloads: catch-up over Kafka reads produce-max's topic,
	// and Kafka has no acks for Strata's all; without them, all is fine.
	s.Workloads = []string{benchsuite.WorkloadKafkaCatchUp}
	if err := s.Validate(&o); err == nil || !strings.Contains(err.Error(), "kafka-catch-up needs produce-max") {
		t.Fatalf("kafka-catch-up alone: %v", err)
	}
	// The group catch-ups read it too; the rebalances write their own.
	s.Workloads = []string{benchsuite.WorkloadGroupCatchUp, benchsuite.WorkloadGroupRebalance}
	if err := s.Validate(&o); err == nil || !strings.Contains(err.Error(), "group-catch-up needs produce-max") ||
		strings.Contains(err.Error(), "group-rebalance needs") {
		t.Fatalf("group-catch-up alone: %v", err)
	}
	// A heartbeat must come within the session.
	s.Workloads, s.Group.HeartbeatInterval = nil, s.Group.SessionTimeout
	if err := s.Validate(&o); err == nil || !strings.Contains(err.Error(), "--group-heartbeat-interval 6s") {
		t.Fatalf("heartbeat as long as the session: %v", err)
	}
	s.Group.HeartbeatInterval = DefaultGroupHeartbeatInterval
	o.Acks = "all"
	s.Workloads = nil
	if err := s.Validate(&o); err == nil || !strings.Contains(err.Error(), "the Kafka workloads: --acks all") {
		t.Fatalf("acks all with the Kafka workloads: %v", err)
	}
	s.Workloads = []string{benchsuite.WorkloadProduce, benchsuite.WorkloadE2E5k}
	if err := s.Validate(&o); err != nil {
		t.Fatalf("acks all without the Kafka workloads: %v", err)
	}
}

// TestCheckStreams: stdout or stderr redirected to the report's or the
// table's file is refused; other files, and files not there yet, are not.
func TestCheckStreams(t *testing.T) {
	dir := t.TempDir()
	s := SuiteOptions{Out: filepath.Join(dir, "r.json")}
	create := func(name string) *os.File {
		t.Helper()
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	other := create("log")
	if err := s.CheckStreams(other, other); err != nil {
		t.Fatalf("no report yet: %v", err)
	}
	table := create("r.txt") // `--out r.json > r.txt`
	err := s.CheckStreams(table, other)
	if err == nil || !strings.Contains(err.Error(), "stdout is "+s.TableFile()) || strings.Contains(err.Error(), "stderr") {
		t.Fatalf("stdout is the table file: %v", err)
	}
	report := create("r.json")
	err = s.CheckStreams(other, report)
	if err == nil || !strings.Contains(err.Error(), "stderr is "+s.Out) {
		t.Fatalf("stderr is the report: %v", err)
	}
	s.TableOut = filepath.Join(dir, "elsewhere.txt")
	if err := s.CheckStreams(table, other); err != nil {
		t.Fatalf("r.txt is not the table with --table-out: %v", err)
	}
}

// A workload whose copies at produce-max's rate would push the disk past
// the bookies' read-only threshold is refused before it starts; catch-up
// (which writes nothing) and a workload that fits are not.
func TestSpaceFor(t *testing.T) {
	dir := t.TempDir()
	o := validOptions()
	o.Duration = 20 * time.Second
	small := benchsuite.Run{Workloads: []benchsuite.Workload{{Name: benchsuite.WorkloadProduce, MBPerSec: 0.001, RecordsPerSec: 1}}}
	huge := benchsuite.Run{Workloads: []benchsuite.Workload{{Name: benchsuite.WorkloadProduce, MBPerSec: 1e12, RecordsPerSec: 1e9}}}
	space := func(name string, done benchsuite.Run) error {
		t.Helper()
		_, planned, err := planWorkload(o, "bench", name, done)
		if err != nil {
			t.Fatal(err)
		}
		return spaceFor(dir, name, planned, done, true)
	}
	if err := space(benchsuite.WorkloadProduceBig, small); err != nil {
		t.Fatalf("60 KB of copies refused: %v", err)
	}
	err := space(benchsuite.WorkloadE2EHalf, huge)
	if err == nil || !strings.Contains(err.Error(), "--duration") {
		t.Fatalf("an exabyte of copies: %v, want a refusal naming --duration", err)
	}
	// An open-loop load writes at its own rate, whatever produce-max did:
	// 3 copies of 5,000 KiB records a second for 20 s is 307 MB.
	if err := space(benchsuite.WorkloadE2E5k, huge); err != nil {
		t.Fatalf("e2e at 5,000 records/s refused for produce-max's rate: %v", err)
	}
	for _, name := range []string{benchsuite.WorkloadCatchUp, benchsuite.WorkloadKafkaCatchUp} {
		if err := space(name, huge); err != nil {
			t.Fatalf("%s writes nothing, refused: %v", name, err)
		}
	}
	if err := space(benchsuite.WorkloadKafkaProduce, huge); err == nil {
		t.Fatal("kafka-produce-max at produce-max's exabyte rate: not refused")
	}
}

// The suite states the nodes' peak RSS against the budgets they run with:
// the defaults of broker's config and of the bookies' index.
func TestMemoryBudgetDefaults(t *testing.T) {
	if got := broker.DefaultConfig().TailCacheBytes; got != brokerTailCacheBytes {
		t.Errorf("broker's --tail-cache-bytes default is %d, the suite assumes %d", got, brokerTailCacheBytes)
	}
	if got := index.DefaultCacheBytes; got != bookiePebbleCacheBytes {
		t.Errorf("the bookies' Pebble cache default is %d, the suite assumes %d", got, bookiePebbleCacheBytes)
	}
	if got := storage.DefaultReadOnlyAbove; got != bookieReadOnlyAbove {
		t.Errorf("the bookies turn read-only above %v, the suite assumes %v", got, bookieReadOnlyAbove)
	}
}

// The timeline counts publish->ack latencies (and no other kind) by when
// they were observed, with the largest and how many were slow.
func TestTimeline(t *testing.T) {
	r := NewRun(ModeE2E, "t", 1)
	r.observe(LatPublishAck, time.Millisecond) // before EnableTimeline: not counted
	r.EnableTimeline()
	for _, d := range []time.Duration{5, 5, 30, 5, 45, 5, 5, 20} {
		r.observe(LatPublishAck, d*time.Millisecond)
	}
	r.observe(LatAckConsume, time.Second)
	var b strings.Builder
	if err := r.WriteTimeline(&b); err != nil {
		t.Fatal(err)
	}
	var acks, slow int
	var largest float64
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	for _, l := range lines[1:] {
		var at string
		var n, s int
		var m float64
		if _, err := fmt.Sscanf(l, "%s\t%d\t%f\t%d", &at, &n, &m, &s); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		acks, slow, largest = acks+n, slow+s, max(largest, m)
	}
	if acks != 8 || slow != 3 || largest != 45 {
		t.Fatalf("timeline %q: %d acks, %d slow, largest %v ms; want 8, 3, 45", b.String(), acks, slow, largest)
	}
}
