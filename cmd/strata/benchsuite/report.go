package benchsuite

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// ReportVersion is the report format's version (see doc.go).
const ReportVersion = 1

// Workload names, in the order the suite runs them.
const (
	WorkloadProduce    = "produce-max"     // max-rate produce, the standard record size
	WorkloadE2E5k      = "e2e-5000"        // open-loop e2e at 5,000 records/s
	WorkloadE2E25k     = "e2e-25000"       // open-loop e2e at 25,000 records/s
	WorkloadE2E50k     = "e2e-50000"       // open-loop e2e at 50,000 records/s
	WorkloadE2EHalf    = "e2e-half-max"    // open-loop e2e at 50% of produce-max
	WorkloadCatchUp    = "catch-up"        // consume produce-max's topic from the earliest offset
	WorkloadProduceBig = "produce-max-64k" // max-rate produce, 64 KiB records
	// WorkloadCompact: open-loop produce at 50% of produce-max on one
	// topic while keyed topics written before it are switched to
	// cleanup.policy=compact, one at a time (its targets: the passes'
	// input rate, and the load's latency during them against the
	// windows without them).
	WorkloadCompact     = "compact-half-max"
	BigRecordBytes      = 64 << 10
	HalfMaxRateFraction = 0.5
)

// The Kafka-protocol workloads: the gRPC workload of the same shape with
// franz-go (kgo) as the load client, through the brokers' Kafka
// listeners, each run right after its gRPC twin so that both see the
// machine in the same minutes (KafkaTwin).
const (
	WorkloadKafkaProduce = "kafka-produce-max" // produce-max over Kafka: acks=all, idempotent
	WorkloadKafkaE2E5k   = "kafka-e2e-5000"    // e2e-5000 over Kafka
	// WorkloadKafkaCatchUp reads produce-max's topic from the start, as
	// catch-up does, with a kgo consumer of assigned partitions.
	WorkloadKafkaCatchUp = "kafka-catch-up"
)

// The consumer-group workloads (groups.go).
const (
	// WorkloadGroupCatchUp reads produce-max's topic from the start with
	// GroupMembers members of one Strata group consumer (KIP-848 style,
	// over gRPC), and WorkloadKafkaGroupCatchUp with as many franz-go
	// members of a classic cooperative-sticky group, in another group.
	WorkloadGroupCatchUp      = "group-catch-up"
	WorkloadKafkaGroupCatchUp = "kafka-group-catch-up"
	// WorkloadGroupRebalance times how long the partitions of a member
	// that leaves, or is cut off, go unconsumed (franz-go members, classic
	// cooperative-sticky and KIP-848).
	WorkloadGroupRebalance = "group-rebalance"
)

// Workloads lists every workload, in run order.
var Workloads = []string{WorkloadProduce, WorkloadKafkaProduce, WorkloadE2E5k, WorkloadKafkaE2E5k, WorkloadE2E25k, WorkloadE2E50k,
	WorkloadE2EHalf,
	WorkloadCatchUp, WorkloadKafkaCatchUp, WorkloadGroupCatchUp, WorkloadKafkaGroupCatchUp, WorkloadGroupRebalance,
	WorkloadProduceBig, WorkloadCompact}

// fixedRates are the records/s of the e2e workloads at a fixed load.
// At a fixed load the work the nodes save shows as lower latency (and
// fewer cores busy), where at a share of produce-max it shows as a
// higher rate at the same latency.
var fixedRates = map[string]float64{WorkloadE2E5k: 5000, WorkloadKafkaE2E5k: 5000, WorkloadE2E25k: 25000, WorkloadE2E50k: 50000}

// FixedRate returns the records/s of the named e2e workload at a fixed
// load, and whether it is one.
func FixedRate(name string) (float64, bool) {
	rate, ok := fixedRates[name]
	return rate, ok
}

// kafkaTwins maps each Kafka workload to the gRPC workload it repeats.
var kafkaTwins = map[string]string{WorkloadKafkaProduce: WorkloadProduce, WorkloadKafkaE2E5k: WorkloadE2E5k,
	WorkloadKafkaCatchUp: WorkloadCatchUp, WorkloadKafkaGroupCatchUp: WorkloadGroupCatchUp}

// KafkaTwin returns the gRPC workload the named Kafka workload repeats,
// and whether name is a Kafka workload.
func KafkaTwin(name string) (string, bool) {
	twin, ok := kafkaTwins[name]
	return twin, ok
}

// IsCatchUp says whether the named workload reads produce-max's topic
// rather than writing (catch-up, group-catch-up and their Kafka twins).
func IsCatchUp(name string) bool {
	return name == WorkloadCatchUp || name == WorkloadKafkaCatchUp || IsGroupCatchUp(name)
}

// IsGroupCatchUp says whether the named workload reads produce-max's
// topic with the members of a consumer group.
func IsGroupCatchUp(name string) bool {
	return name == WorkloadGroupCatchUp || name == WorkloadKafkaGroupCatchUp
}

// Report is the suite's JSON report.
type Report struct {
	Version   int       `json:"version"`
	StartedAt time.Time `json:"started_at"`
	Seconds   float64   `json:"seconds"`
	Host      Host      `json:"host"`
	Settings  Settings  `json:"settings"`
	Limits    Limits    `json:"limits"`
	Runs      []Run     `json:"runs"`
	Note      string    `json:"note,omitempty"`
}

// Host describes the machine.
type Host struct {
	Hostname string `json:"hostname"`
	CPUs     int    `json:"cpus"`
	// LoadAverage is /proc/loadavg's first three fields at the start.
	LoadAverage string `json:"load_average,omitempty"`
}

// Settings are the workloads' parameters.
type Settings struct {
	DurationSeconds float64 `json:"duration_seconds"`
	RecordBytes     int     `json:"record_bytes"`
	Partitions      int32   `json:"partitions"`
	Acks            string  `json:"acks"`
	LingerMs        float64 `json:"linger_ms"`
	Producers       int     `json:"producers"`
	Quick           bool    `json:"quick,omitempty"`
}

// Limits are the machine's limits measured in the same run.
type Limits struct {
	Dir      string      `json:"dir"`
	Disk     []DiskProbe `json:"disk"`
	DiskRead ReadProbe   `json:"disk_read"`
	Loopback RoundTrip   `json:"loopback"`
}

// Probe returns the probe of journals journals at the smallest group size
// at least groupBytes (the largest probed when none is), and whether
// there is one.
func (l Limits) Probe(journals int, groupBytes float64) (DiskProbe, bool) {
	var best, largest DiskProbe
	found := false
	for _, p := range l.Disk {
		if p.Journals != journals {
			continue
		}
		if p.GroupBytes > largest.GroupBytes {
			largest = p
		}
		if float64(p.GroupBytes) >= groupBytes && (!found || p.GroupBytes < best.GroupBytes) {
			best, found = p, true
		}
	}
	if found {
		return best, true
	}
	return largest, largest.Journals != 0
}

// Run is one cluster shape's results.
type Run struct {
	Metad     int        `json:"metad"`
	Bookies   int        `json:"bookies"`
	Brokers   int        `json:"brokers"`
	Nodes     []Process  `json:"nodes"`
	Workloads []Workload `json:"workloads"`
	Error     string     `json:"error,omitempty"`
}

// Workload returns the named workload's result, if it ran.
func (r Run) Workload(name string) (Workload, bool) {
	for _, w := range r.Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

// Process is one node of the cluster.
type Process struct {
	Name string `json:"name"`
	Role string `json:"role"`
	PID  int    `json:"pid"`
}

// Workload is one workload's result.
type Workload struct {
	Name          string    `json:"name"`
	Topic         string    `json:"topic"`
	RecordBytes   int       `json:"record_bytes"`
	TargetRate    float64   `json:"target_records_per_sec,omitempty"` // 0: max rate
	Seconds       float64   `json:"seconds"`
	Records       int64     `json:"records"`
	Bytes         int64     `json:"bytes"`
	RecordsPerSec float64   `json:"records_per_sec"`
	MBPerSec      float64   `json:"mb_per_sec"`
	Errors        int64     `json:"errors"`
	FirstError    string    `json:"first_error,omitempty"`
	Latency       []Latency `json:"latency,omitempty"`
	CPU           CPU       `json:"cpu"`
	Journal       *Journal  `json:"journal,omitempty"`
	Reads         *Reads    `json:"reads,omitempty"`
	// Profiles are the CPU profiles taken during the workload
	// (--profile): one per broker and bookie.
	Profiles []string `json:"profiles,omitempty"`
	// Compaction: WorkloadCompact's passes; its Latency is the load's
	// while compacting (the cycles' passes and settle windows).
	Compaction *Compaction `json:"compaction,omitempty"`
	Memory     *Memory     `json:"memory,omitempty"`
	// Disk: the device under the cluster's data while the load ran (nil
	// where it cannot be read).
	Disk *Disk `json:"disk,omitempty"`
	// Group: how a group catch-up's members read; Rebalance:
	// WorkloadGroupRebalance's measurements (groups.go).
	Group     *GroupRead `json:"group,omitempty"`
	Rebalance *Rebalance `json:"rebalance,omitempty"`
	// Allocs: the heap objects the processes allocated, per entry
	// (perentry.go); nil when no node exports its count.
	Allocs *Allocs `json:"allocs,omitempty"`
}

// Compaction is what the brokers' compaction metrics said of the passes
// of WorkloadCompact, summed over the brokers. The load alternates
// windows without compaction and cycles, which either switch one source
// topic to compact or, every other one, are control cycles: as long as
// the cycle before them, with nothing switched.
type Compaction struct {
	// Sources topics of SourceBytes each, of keyed records (SourceKeys
	// keys) in segments of SegmentBytes, were written before the load;
	// Cycles of them were compacted within it, and ControlCycles control
	// cycles ran between them.
	Sources       int   `json:"sources"`
	Cycles        int   `json:"cycles"`
	ControlCycles int   `json:"control_cycles"`
	SourceBytes   int64 `json:"source_bytes"`
	SourceKeys    int   `json:"source_keys"`
	SegmentBytes  int   `json:"segment_bytes"`
	Passes        int   `json:"passes"`
	Errors        int   `json:"errors"`
	// BytesIn and BytesOut: batch bytes the passes read and wrote.
	BytesIn  float64 `json:"bytes_in"`
	BytesOut float64 `json:"bytes_out"`
	// PassSeconds: the passes' durations, summed; WindowSeconds: from
	// each switch to compact until its last pass was swapped in, summed.
	PassSeconds   float64 `json:"pass_seconds"`
	WindowSeconds float64 `json:"window_seconds"`
	// MBPerSecPerPass is BytesIn ÷ PassSeconds: one compactor's rate.
	MBPerSecPerPass float64 `json:"mb_per_sec_per_pass"`
	// Before is the load's latency without compaction: the windows
	// before each switch and after the last cycle (the same topic and
	// rate, interleaved with the cycles), less the load's first
	// WarmupSeconds, which count on neither side.
	Before        []Latency `json:"latency_before"`
	WarmupSeconds float64   `json:"warmup_seconds,omitempty"`
	// During: from each switch until its passes were swapped in; After:
	// the settle window after each (the deletes of the passes' inputs
	// and the bookies' journal GC they start). The Workload's Latency is
	// both.
	During []Latency `json:"latency_during"`
	After  []Latency `json:"latency_after"`
	// Control: the load's latency in the control cycles and their
	// settle windows. Against Before, it is what the measurement reads
	// with nothing compacted: this machine's own noise in the same
	// minutes (an A/A test).
	Control []Latency `json:"latency_control,omitempty"`
	// CycleP99Ratios: per cycle that compacted, publish->ack p99 of its
	// passes and settle window ÷ that of the window without compaction
	// before it.
	CycleP99Ratios []float64 `json:"cycle_p99_ratios,omitempty"`
	// NodesBefore, NodesCompacting and NodesControl: the nodes' own
	// latencies over the windows of Before, of the Workload's Latency and
	// of Control: where the load's latency went.
	NodesBefore     *NodeLatency `json:"nodes_before,omitempty"`
	NodesCompacting *NodeLatency `json:"nodes_compacting,omitempty"`
	NodesControl    *NodeLatency `json:"nodes_control,omitempty"`
	// CPU the compacting cycles' windows (WindowSeconds, switch to swap)
	// used, per role (core-seconds); CPUPerRoleControl: that of the
	// control cycles' windows as long (ControlSeconds), the same load
	// with nothing compacted. Their difference per second is what the
	// passes cost (ExtraCPU).
	CPUPerRole        map[string]float64 `json:"cpu_per_role_seconds,omitempty"`
	CPUPerRoleControl map[string]float64 `json:"cpu_per_role_control_seconds,omitempty"`
	ControlSeconds    float64            `json:"control_seconds,omitempty"`
	// BookieGCCopiedBytes: live journal bytes the bookies copied from the
	// first switch to the load's end, compacting journal files the deletes of
	// the passes' inputs left mostly dead (summed over the bookies).
	BookieGCCopiedBytes float64 `json:"bookie_gc_copied_bytes"`
	// StallsBefore, StallsCompacting and StallsControl: the device's
	// stalls (Workload.Disk) that ended in the windows of Before, of the
	// Workload's Latency and of Control, when their latencies were
	// observed. A stall sets the p99 of the side it lands on.
	StallsBefore     *DiskStalls `json:"stalls_before,omitempty"`
	StallsCompacting *DiskStalls `json:"stalls_compacting,omitempty"`
	StallsControl    *DiskStalls `json:"stalls_control,omitempty"`
}

// ExtraCPU is the cores each role used more while compacting than in
// the control cycles (CPU per second of each, subtracted), and their sum
// over the nodes (not this process, whose work does not change) as
// core-seconds per GB of the passes' input; ok is false without control
// cycles or input.
func (c Compaction) ExtraCPU() (perRole map[string]float64, perGB float64, ok bool) {
	if c.ControlSeconds <= 0 || c.WindowSeconds <= 0 || c.BytesIn <= 0 {
		return nil, 0, false
	}
	perRole = map[string]float64{}
	for role, s := range c.CPUPerRole {
		perRole[role] = s/c.WindowSeconds - c.CPUPerRoleControl[role]/c.ControlSeconds
		if role != RoleClient {
			perGB += perRole[role]
		}
	}
	return perRole, perGB * c.WindowSeconds / (c.BytesIn / 1e9), true
}

// LatencyOf returns the latency kind ("publish_to_ack", ...) if measured.
func (w Workload) LatencyOf(kind string) (Latency, bool) {
	for _, l := range w.Latency {
		if l.Kind == kind {
			return l, true
		}
	}
	return Latency{}, false
}

// P99Ratio is the p99 of kind in with ÷ that in without (0 when without
// has none).
func P99Ratio(with, without []Latency, kind string) float64 {
	a, okA := Workload{Latency: with}.LatencyOf(kind)
	b, okB := Workload{Latency: without}.LatencyOf(kind)
	if !okA || !okB || b.P99 <= 0 {
		return 0
	}
	return a.P99 / b.P99
}

// Latency kinds.
const (
	LatencyPublishAck     = "publish_to_ack"
	LatencyAckConsume     = "ack_to_consume"
	LatencyPublishConsume = "publish_to_consume"
)

// Latency is one latency kind's quantiles in milliseconds.
type Latency struct {
	Kind  string  `json:"kind"`
	Count uint64  `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// CPU is the CPU time used during a workload.
type CPU struct {
	// Seconds per node name (utime+stime from /proc/PID/stat).
	PerProcess map[string]float64 `json:"per_process_seconds"`
	// Seconds per role (metad, bookie, broker) and "client" (this
	// process: the producers and consumer).
	PerRole map[string]float64 `json:"per_role_seconds"`
	// Core-seconds per GB (10^9 bytes) of the workload's payload
	// (acknowledged for produce and e2e, read for catch-up).
	PerGBBrokersBookies float64 `json:"per_gb_brokers_bookies"`
	PerGBBrokers        float64 `json:"per_gb_brokers"`
	PerGBBookies        float64 `json:"per_gb_bookies"`
	// PerGBByRole: core-seconds per GB of every role of PerRole (metad
	// and the client too), each role's processes summed.
	PerGBByRole map[string]float64 `json:"per_gb_by_role,omitempty"`
	// PerGBByProcess: the same per node name, and RoleClient for this
	// process.
	PerGBByProcess map[string]float64 `json:"per_gb_by_process,omitempty"`
	// Entries: the ledger entries the brokers appended and the bookies
	// added (nil when no node exports its count). PerEntryUsByRole and
	// PerEntryUsByProcess: microseconds of CPU per entry a broker
	// appended and per add a bookie made (FillPerEntry), for the
	// workloads that write (WritesEntries).
	Entries             *Entries           `json:"entries,omitempty"`
	PerEntryUsByRole    map[string]float64 `json:"per_entry_us_by_role,omitempty"`
	PerEntryUsByProcess map[string]float64 `json:"per_entry_us_by_process,omitempty"`
	// HostBusy is the share of the whole machine's CPU time (every core,
	// every process and the kernel) that was busy during the workload,
	// from /proc/stat: near 1, the workload was bound by CPU.
	HostBusy float64 `json:"host_busy"`
}

// RoleClient is CPU.PerRole's key for this process (besides devcluster's
// roles).
const RoleClient = "client"

// FillPerGB computes the per-GB fields from PerRole and payload bytes.
func (c *CPU) FillPerGB(bytes int64) {
	if bytes <= 0 {
		return
	}
	gb := float64(bytes) / 1e9
	c.PerGBBrokers = c.PerRole["broker"] / gb
	c.PerGBBookies = c.PerRole["bookie"] / gb
	c.PerGBBrokersBookies = (c.PerRole["broker"] + c.PerRole["bookie"]) / gb
	c.PerGBByRole = map[string]float64{}
	for role, s := range c.PerRole {
		c.PerGBByRole[role] = s / gb
	}
	c.PerGBByProcess = map[string]float64{}
	for name, s := range c.PerProcess {
		c.PerGBByProcess[name] = s / gb
	}
	if s, ok := c.PerRole[RoleClient]; ok {
		c.PerGBByProcess[RoleClient] = s / gb
	}
}

// PerGBByProcessSummary is PerGBByProcess in a line, by name, "" when
// it is empty.
func (c CPU) PerGBByProcessSummary() string {
	if len(c.PerGBByProcess) == 0 {
		return ""
	}
	names := slices.Sorted(maps.Keys(c.PerGBByProcess))
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %.2f", name, c.PerGBByProcess[name])
	}
	return "CPU core-s/GB per process: " + strings.Join(parts, ", ")
}

// PerGBSummary is PerGBByRole in a line, roles in a fixed order (the
// cluster's, then the client), "" when it is empty.
func (c CPU) PerGBSummary() string {
	var parts []string
	for _, role := range []string{"broker", "bookie", "metad", RoleClient} {
		if v, ok := c.PerGBByRole[role]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", role, v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "CPU core-s/GB: " + strings.Join(parts, ", ")
}

// WriteFile writes r as indented JSON to path.
func (r *Report) WriteFile(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadReport reads a report written by WriteFile.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("benchsuite: %s: %w", path, err)
	}
	return &r, nil
}

// finite turns NaN and ±Inf into 0, so a report always encodes.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// Fprint writes every run's ratio table to w.
func (r *Report) Fprint(w io.Writer) error {
	fmt.Fprintf(w, "Limits (%s): loopback RTT p50 %.0fµs\n", r.Limits.Dir, r.Limits.Loopback.P50Us)
	for _, p := range r.Limits.Disk {
		mode := "page cache"
		if p.Direct {
			mode = "O_DIRECT"
		}
		fmt.Fprintf(w, "  disk %d journal(s) x %7d-byte groups: fdatasync p50 %.2fms p99 %.2fms, %.1f MB/s combined (%s)\n",
			p.Journals, p.GroupBytes, p.SyncP50Ms, p.SyncP99Ms, p.MBPerSec, mode)
	}
	if rp := r.Limits.DiskRead; rp.Files > 0 {
		fmt.Fprintf(w, "  disk read, %d file(s) at once, %d-byte reads: %.1f MB/s combined\n", rp.Files, ReadChunkBytes, rp.MBPerSec)
	}
	for _, run := range r.Runs {
		fmt.Fprintf(w, "\n%d metad, %d bookies, %d broker(s)\n", run.Metad, run.Bookies, run.Brokers)
		if run.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", run.Error)
		}
		for _, wl := range run.Workloads {
			fmt.Fprintln(w, workloadLines(wl))
		}
		if err := WriteRatios(w, Ratios(r.Limits, run)); err != nil {
			return err
		}
	}
	return nil
}

// workloadLines is a workload's entry in the table: its rate and
// latencies, then what it measured besides (compaction, device stalls,
// CPU per GB, memory), each on its own line.
func workloadLines(wl Workload) string {
	line := fmt.Sprintf("  %-17s %9.0f records/s %8.2f MB/s", wl.Name, wl.RecordsPerSec, wl.MBPerSec)
	if l, ok := wl.LatencyOf(LatencyPublishAck); ok {
		line += fmt.Sprintf("  pub->ack p50 %.2f p99 %.2f ms", l.P50, l.P99)
	}
	if l, ok := wl.LatencyOf(LatencyAckConsume); ok {
		line += fmt.Sprintf("  ack->cons p99 %.2f ms", l.P99)
	}
	if wl.Journal != nil && wl.Journal.Groups > 0 {
		line += fmt.Sprintf("  %.0f B/group", wl.Journal.BytesPerGroup)
	}
	if IsCatchUp(wl.Name) && wl.Reads != nil {
		line += fmt.Sprintf("  %.0f%% of fetched bytes from bookies", 100*wl.Reads.FromBookies)
	}
	if wl.CPU.HostBusy > 0 {
		line += fmt.Sprintf("  CPU %.0f%% busy", 100*wl.CPU.HostBusy)
	}
	if wl.Errors > 0 {
		line += fmt.Sprintf("  %d errors", wl.Errors)
	}
	if c := wl.Compaction; c != nil {
		line += fmt.Sprintf("\n  %-17s %d of %d sources compacted: %d pass(es), %.0f MB in, %.0f MB out in %.2f s (%.1f MB/s per pass); bookie journal GC copied %.0f MB",
			"", c.Cycles, c.Sources, c.Passes, c.BytesIn/1e6, c.BytesOut/1e6, c.PassSeconds, c.MBPerSecPerPass, c.BookieGCCopiedBytes/1e6)
		p99 := func(ls []Latency) float64 { l, _ := (Workload{Latency: ls}).LatencyOf(LatencyPublishAck); return l.P99 }
		line += fmt.Sprintf("\n  %-17s pub->ack p99 without compaction %.2f ms, during the passes %.2f ms, settling %.2f ms, control cycles %.2f ms; per cycle %s",
			"", p99(c.Before), p99(c.During), p99(c.After), p99(c.Control), FormatRatios(c.CycleP99Ratios))
		if extra, perGB, ok := c.ExtraCPU(); ok {
			roles := slices.Sorted(maps.Keys(extra))
			parts := make([]string, len(roles))
			for i, role := range roles {
				parts[i] = fmt.Sprintf("%s %+.2f", role, extra[role])
			}
			line += fmt.Sprintf("\n  %-17s cores used while compacting less those of the control cycles: %s (nodes: %.2f core-s per GB of input)",
				"", strings.Join(parts, ", "), perGB)
		}
		if c.NodesBefore != nil {
			line += fmt.Sprintf("\n  %-17s node means without compaction: %s; compacting: %s; control: %s",
				"", c.NodesBefore, c.NodesCompacting, c.NodesControl)
		}
	}
	if d := wl.Disk; d != nil {
		line += fmt.Sprintf("\n  %-17s device %s stalls of %.0f ms or more (requests in flight, none completed; sampled every %.0f ms): %s",
			"", d.Device, d.MinStallMs, d.SampleMs, d.Stalls)
		if c := wl.Compaction; c != nil && c.StallsBefore != nil {
			line += fmt.Sprintf("; without compaction %s, compacting %s, control %s", c.StallsBefore, c.StallsCompacting, c.StallsControl)
		}
	}
	if c := wl.CPU.PerGBSummary(); c != "" {
		line += fmt.Sprintf("\n  %-17s %s", "", c)
	}
	if IsGroupCatchUp(wl.Name) {
		if c := wl.CPU.PerGBByProcessSummary(); c != "" {
			line += fmt.Sprintf("\n  %-17s %s", "", c)
		}
	}
	if c := wl.CPU.PerEntrySummary(); c != "" {
		line += fmt.Sprintf("\n  %-17s %s", "", c)
	}
	if a := wl.Allocs; a != nil {
		line += fmt.Sprintf("\n  %-17s %s", "", a.Summary())
	}
	line += groupLines(wl)
	if m := wl.Memory; m != nil {
		line += fmt.Sprintf("\n  %-17s %s", "", m.Summary())
	}
	return line
}
