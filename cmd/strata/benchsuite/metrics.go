package benchsuite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Journal metrics of a bookie (ledger/storage/metrics.go): histograms, of
// which the suite reads _sum and _count.
const (
	MetricGroupBytes   = "strata_bookie_journal_group_bytes"
	MetricGroupRecords = "strata_bookie_journal_group_records"
	MetricSyncSeconds  = "strata_bookie_journal_sync_latency_seconds"
)

// Samples maps an unlabelled sample's name ("x_sum") to its value.
type Samples map[string]float64

// ParseMetrics reads the Prometheus text format, keeping unlabelled
// samples (the journal histograms' _sum and _count have no labels).
func ParseMetrics(r io.Reader) (Samples, error) {
	s := Samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if !ok || strings.ContainsRune(name, '{') {
			continue
		}
		fields := strings.Fields(rest)
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		s[name] = v
	}
	return s, sc.Err()
}

// Scrape fetches and parses http://ADDR/metrics.
func Scrape(ctx context.Context, addr string) (Samples, error) {
	body, err := get(ctx, "http://"+addr+"/metrics", 16<<20)
	if err != nil {
		return nil, fmt.Errorf("benchsuite: scrape %s: %w", addr, err)
	}
	return ParseMetrics(bytes.NewReader(body))
}

// get returns the body of url, at most limit bytes, or an error for any
// answer but 200 OK.
func get(ctx context.Context, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status)
	}
	return body, nil
}

// Journal is what the bookies' journals did during a workload, summed
// over bookies.
type Journal struct {
	Groups              float64 `json:"groups"`
	BytesPerGroup       float64 `json:"bytes_per_group"`
	RecordsPerGroup     float64 `json:"records_per_group"`
	MeanSyncMs          float64 `json:"mean_sync_ms"`
	GroupsPerSecPerBook float64 `json:"groups_per_sec_per_bookie"`
}

// JournalDelta computes Journal from the bookies' samples before and
// after (same order) over secs seconds; nil when no bookie exports the
// metrics.
func JournalDelta(before, after []Samples, secs float64) *Journal {
	var groups, bytes, records, syncs, syncSecs float64
	found := false
	for i := range min(len(before), len(after)) {
		d := func(name string) float64 { return after[i][name] - before[i][name] }
		if _, ok := after[i][MetricGroupBytes+"_count"]; ok {
			found = true
		}
		groups += d(MetricGroupBytes + "_count")
		bytes += d(MetricGroupBytes + "_sum")
		records += d(MetricGroupRecords + "_sum")
		syncs += d(MetricSyncSeconds + "_count")
		syncSecs += d(MetricSyncSeconds + "_sum")
	}
	if !found {
		return nil
	}
	j := &Journal{Groups: groups}
	if groups > 0 {
		j.BytesPerGroup, j.RecordsPerGroup = bytes/groups, records/groups
	}
	if syncs > 0 {
		j.MeanSyncMs = syncSecs / syncs * 1e3
	}
	if secs > 0 && len(after) > 0 {
		j.GroupsPerSecPerBook = groups / secs / float64(len(after))
	}
	return j
}

// The nodes' latency histograms (broker/partlog/metrics.go,
// ledger/storage/metrics.go), of which NodeLatency reads _sum and _count.
const (
	MetricAppendSeconds = "strata_broker_append_duration_seconds"
	MetricAddSeconds    = "strata_bookie_add_latency_seconds"
	MetricReadSeconds   = "strata_bookie_read_latency_seconds"
)

// NodeLatency is the mean, in milliseconds, of the nodes' own latency
// histograms over some windows, with how many each counted: what part of
// the load's publish->ack latency the brokers, the bookies and the disk
// took.
type NodeLatency struct {
	// BrokerAppendMs: a batch's arrival at a partition log to its
	// acknowledgement (the bookies' adds, the network and the broker).
	BrokerAppendMs float64 `json:"broker_append_ms"`
	Appends        float64 `json:"appends"`
	// BookieAddMs: an add's arrival in a bookie's storage to its
	// durable acknowledgement (the journal's queue, write and sync).
	BookieAddMs float64 `json:"bookie_add_ms"`
	Adds        float64 `json:"adds"`
	// JournalSyncMs: one journal group's fdatasync.
	JournalSyncMs float64 `json:"journal_sync_ms"`
	Syncs         float64 `json:"syncs"`
	// BookieReadMs: one entry read by a bookie (the passes' reads).
	BookieReadMs float64 `json:"bookie_read_ms"`
	Reads        float64 `json:"reads"`
}

// nodeLatencyMetrics are the histograms NodeLatency reads.
var nodeLatencyMetrics = []string{MetricAppendSeconds, MetricAddSeconds, MetricSyncSeconds, MetricReadSeconds}

// AddNodeDeltas adds to acc the growth of the histograms NodeLatency
// reads from before to after (samples of the same nodes, in the same
// order).
func AddNodeDeltas(acc Samples, before, after []Samples) {
	for i := range min(len(before), len(after)) {
		for _, m := range nodeLatencyMetrics {
			for _, suffix := range []string{"_sum", "_count"} {
				acc[m+suffix] += after[i][m+suffix] - before[i][m+suffix]
			}
		}
	}
}

// NodeLatencyOf is the means of the histograms accumulated in acc
// (AddNodeDeltas); nil when acc counted nothing.
func NodeLatencyOf(acc Samples) *NodeLatency {
	mean := func(m string) (ms, n float64) {
		n = acc[m+"_count"]
		if n <= 0 {
			return 0, 0
		}
		return acc[m+"_sum"] / n * 1e3, n
	}
	var l NodeLatency
	l.BrokerAppendMs, l.Appends = mean(MetricAppendSeconds)
	l.BookieAddMs, l.Adds = mean(MetricAddSeconds)
	l.JournalSyncMs, l.Syncs = mean(MetricSyncSeconds)
	l.BookieReadMs, l.Reads = mean(MetricReadSeconds)
	if l.Appends+l.Adds+l.Syncs+l.Reads == 0 {
		return nil
	}
	return &l
}

// String is "append 5.99 ms, add 3.41, sync 1.32, read 3.60" (read only
// when there were reads).
func (l *NodeLatency) String() string {
	if l == nil {
		return "-"
	}
	s := fmt.Sprintf("append %.2f ms, add %.2f, sync %.2f", l.BrokerAppendMs, l.BookieAddMs, l.JournalSyncMs)
	if l.Reads > 0 {
		s += fmt.Sprintf(", read %.2f", l.BookieReadMs)
	}
	return s
}

// Broker read metrics (broker/partlog/metrics.go): counters.
const (
	MetricFetchedBytes    = "strata_broker_fetched_bytes_total"
	MetricBookieReadBytes = "strata_broker_bookie_read_bytes_total"
	MetricTailCacheHits   = "strata_broker_tail_cache_hits_total"
	MetricTailCacheMisses = "strata_broker_tail_cache_misses_total"
)

// Gauges the suite's warm-up waits on: a broker's tail cache and its
// resident memory (the Prometheus process collector's).
const (
	MetricTailCacheBytes = "strata_broker_tail_cache_bytes"
	MetricResidentBytes  = "process_resident_memory_bytes"
)

// Reads is where the brokers' fetches found their entries during a
// workload, summed over brokers: catch-up is meant to read from the
// bookies, not from the brokers' tail caches.
type Reads struct {
	FetchedBytes    float64 `json:"fetched_bytes"`
	BookieReadBytes float64 `json:"bookie_read_bytes"`
	TailCacheHits   float64 `json:"tail_cache_hits"`
	TailCacheMisses float64 `json:"tail_cache_misses"`
	// FromBookies is BookieReadBytes ÷ FetchedBytes (read-ahead may take
	// it past 1).
	FromBookies float64 `json:"from_bookies"`
}

// ReadsDelta computes Reads from the brokers' samples before and after
// (same order); nil when no broker exports the metrics.
func ReadsDelta(before, after []Samples) *Reads {
	found := false
	var r Reads
	for i := range min(len(before), len(after)) {
		if _, ok := after[i][MetricFetchedBytes]; ok {
			found = true
		}
		d := func(name string) float64 { return after[i][name] - before[i][name] }
		r.FetchedBytes += d(MetricFetchedBytes)
		r.BookieReadBytes += d(MetricBookieReadBytes)
		r.TailCacheHits += d(MetricTailCacheHits)
		r.TailCacheMisses += d(MetricTailCacheMisses)
	}
	if !found {
		return nil
	}
	if r.FetchedBytes > 0 {
		r.FromBookies = r.BookieReadBytes / r.FetchedBytes
	}
	return &r
}
