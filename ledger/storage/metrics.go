package storage

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the storage engine's Prometheus collectors, named
// strata_bookie_<what>_<unit>. Create them with NewMetrics and register them
// with Register on an explicit registry; the storage updates them.
type Metrics struct {
	addLatency       prometheus.Histogram
	readLatency      prometheus.Histogram
	syncLatency      prometheus.Histogram
	groupRecords     prometheus.Histogram
	groupBytes       prometheus.Histogram
	journalBytes     prometheus.Gauge
	journalDirectIO  prometheus.Gauge
	indexBytes       prometheus.Gauge
	diskFreeBytes    prometheus.Gauge
	diskTotalBytes   prometheus.Gauge
	corruptions      *prometheus.CounterVec
	gcReclaimedBytes prometheus.Counter
	gcRemovedFiles   prometheus.Counter
	compactedFiles   prometheus.Counter
	compactedBytes   prometheus.Counter
	ledgers          prometheus.Gauge
	tombstones       prometheus.Gauge
	readOnly         prometheus.Gauge
	limbo            prometheus.Gauge
	replaySeconds    prometheus.Gauge
	replayRecords    prometheus.Gauge
	// Defences against buggy or hostile writers (doc.go, "Hostile and
	// buggy writers").
	overwritesRefused prometheus.Counter
	lacClamped        prometheus.Counter
}

// Sources of corruption, the label of strata_bookie_corruptions_total.
const (
	corruptionReplay     = "replay"     // a corrupt journal range found at start-up
	corruptionRead       = "read"       // a read failed verification
	corruptionCompaction = "compaction" // compaction could not read a live entry
	corruptionIndex      = "index"      // the index points at a journal file that is gone
)

var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 18) // 50µs .. 6.5s

// NewMetrics returns unregistered collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		addLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_bookie_add_latency_seconds", Help: "Time from Add to its durable acknowledgement.",
			Buckets: latencyBuckets,
		}),
		readLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_bookie_read_latency_seconds", Help: "Time to read one entry.",
			Buckets: latencyBuckets,
		}),
		syncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_bookie_journal_sync_latency_seconds", Help: "Duration of the journal's fdatasync per commit group.",
			Buckets: latencyBuckets,
		}),
		groupRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_bookie_journal_group_records", Help: "Records per journal commit group (one fdatasync).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 16),
		}),
		groupBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_bookie_journal_group_bytes", Help: "Bytes per journal commit group (one fdatasync).",
			Buckets: prometheus.ExponentialBuckets(256, 2, 18),
		}),
		journalBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_journal_bytes", Help: "Size of the journal files.",
		}),
		journalDirectIO: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_journal_direct_io",
			Help: "1 when the journal writes with direct I/O (O_DIRECT), 0 when through the page cache (--journal-direct-io=false, or the file system refuses it).",
		}),
		indexBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_index_bytes", Help: "Disk space used by the Pebble index.",
		}),
		diskFreeBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_disk_free_bytes", Help: "Free space on the data directory's file system.",
		}),
		diskTotalBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_disk_total_bytes", Help: "Size of the data directory's file system.",
		}),
		corruptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_bookie_corruptions_total",
			Help: "Corruption found, by source: replay (corrupt journal ranges), read, compaction, index.",
		}, []string{"source"}),
		gcReclaimedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_bookie_gc_reclaimed_bytes_total", Help: "Journal bytes freed by removing files.",
		}),
		gcRemovedFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_bookie_gc_removed_files_total", Help: "Journal files removed (dead or compacted).",
		}),
		compactedFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_bookie_compaction_files_total", Help: "Journal files compacted and removed.",
		}),
		compactedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_bookie_compaction_bytes_total", Help: "Live record bytes copied by compaction.",
		}),
		ledgers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_ledgers", Help: "Ledgers with state on this bookie.",
		}),
		tombstones: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_fence_tombstones",
			Help: "Deleted fenced ledgers whose fence this bookie keeps until FenceTombstoneTTL.",
		}),
		readOnly: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_read_only", Help: "1 while the bookie refuses adds for lack of disk space.",
		}),
		limbo: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_limbo", Help: "1 while the bookie may have lost entries (journal corruption).",
		}),
		replaySeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_replay_duration_seconds", Help: "Duration of the last start-up journal replay.",
		}),
		replayRecords: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_replay_records", Help: "Records applied by the last start-up journal replay.",
		}),
		overwritesRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_bookie_entry_overwrites_refused_total",
			Help: "Adds refused because they named an entry already stored with different bytes.",
		}),
		lacClamped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_bookie_lac_clamped_total",
			Help: "LACs (explicit or piggybacked on adds) lowered to the highest entry id held.",
		}),
	}
	for _, source := range []string{corruptionReplay, corruptionRead, corruptionCompaction, corruptionIndex} {
		m.corruptions.WithLabelValues(source)
	}
	return m
}

// Register registers every collector on r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range m.collectors() {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.addLatency, m.readLatency, m.syncLatency, m.groupRecords, m.groupBytes,
		m.journalBytes, m.journalDirectIO, m.indexBytes, m.diskFreeBytes, m.diskTotalBytes, m.corruptions,
		m.gcReclaimedBytes, m.gcRemovedFiles, m.compactedFiles, m.compactedBytes,
		m.ledgers, m.tombstones, m.readOnly, m.limbo, m.replaySeconds, m.replayRecords,
		m.overwritesRefused, m.lacClamped,
	}
}

// observeGroup is the journal's OnGroupCommit hook. It must not block.
func (m *Metrics) observeGroup(groupBytes, groupRecords int, sync time.Duration) {
	m.syncLatency.Observe(sync.Seconds())
	m.groupRecords.Observe(float64(groupRecords))
	m.groupBytes.Observe(float64(groupBytes))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
