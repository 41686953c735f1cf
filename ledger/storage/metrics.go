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
	readErrors       prometheus.Counter
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
	lacUnverified     prometheus.Counter
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
		addLatency: histogram("strata_bookie_add_latency_seconds",
			"Time from Add to its durable acknowledgement.", latencyBuckets),
		readLatency: histogram("strata_bookie_read_latency_seconds",
			"Time to read one entry.", latencyBuckets),
		syncLatency: histogram("strata_bookie_journal_sync_latency_seconds",
			"Duration of the journal's fdatasync per commit group.", latencyBuckets),
		groupRecords: histogram("strata_bookie_journal_group_records",
			"Records per journal commit group (one fdatasync).", prometheus.ExponentialBuckets(1, 2, 16)),
		groupBytes: histogram("strata_bookie_journal_group_bytes",
			"Bytes per journal commit group (one fdatasync).", prometheus.ExponentialBuckets(256, 2, 18)),
		journalBytes: gauge("strata_bookie_journal_bytes",
			"Size of the journal files."),
		journalDirectIO: gauge("strata_bookie_journal_direct_io",
			"1 when the journal writes with direct I/O (O_DIRECT), 0 when through the page cache (--journal-direct-io=false, or the file system refuses it)."),
		indexBytes: gauge("strata_bookie_index_bytes",
			"Disk space used by the Pebble index."),
		diskFreeBytes: gauge("strata_bookie_disk_free_bytes",
			"Free space on the data directory's file system."),
		diskTotalBytes: gauge("strata_bookie_disk_total_bytes",
			"Size of the data directory's file system."),
		corruptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_bookie_corruptions_total",
			Help: "Corruption found, by source: replay (corrupt journal ranges), read, compaction, index.",
		}, []string{"source"}),
		readErrors: counter("strata_bookie_read_errors_total",
			"Entry reads (gRPC reads) the disk failed with an I/O error; the reader goes to another copy."),
		gcReclaimedBytes: counter("strata_bookie_gc_reclaimed_bytes_total",
			"Journal bytes freed by removing files."),
		gcRemovedFiles: counter("strata_bookie_gc_removed_files_total",
			"Journal files removed (dead or compacted)."),
		compactedFiles: counter("strata_bookie_compaction_files_total",
			"Journal files compacted and removed."),
		compactedBytes: counter("strata_bookie_compaction_bytes_total",
			"Live record bytes copied by compaction."),
		ledgers: gauge("strata_bookie_ledgers",
			"Ledgers with state on this bookie."),
		tombstones: gauge("strata_bookie_fence_tombstones",
			"Deleted fenced ledgers whose fence this bookie keeps until FenceTombstoneTTL."),
		readOnly: gauge("strata_bookie_read_only",
			"1 while the bookie refuses adds for lack of disk space."),
		limbo: gauge("strata_bookie_limbo",
			"1 while the bookie may have lost entries (journal corruption)."),
		replaySeconds: gauge("strata_bookie_replay_duration_seconds",
			"Duration of the last start-up journal replay."),
		replayRecords: gauge("strata_bookie_replay_records",
			"Records applied by the last start-up journal replay."),
		overwritesRefused: counter("strata_bookie_entry_overwrites_refused_total",
			"Adds refused because they named an entry already stored with different bytes."),
		lacClamped: counter("strata_bookie_lac_clamped_total",
			"LACs (explicit or piggybacked on adds) lowered to the highest entry id held, or below the entry they came with: "+
				"no writer sends them."),
		lacUnverified: counter("strata_bookie_lac_unverified_total",
			"LACs (explicit or piggybacked on adds) lowered to the highest entry whose digest the bookie checked: "+
				"the ledger's key was not known yet, or the entries' digests did not match."),
	}
	for _, source := range []string{corruptionReplay, corruptionRead, corruptionCompaction, corruptionIndex} {
		m.corruptions.WithLabelValues(source)
	}
	return m
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
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
		m.journalBytes, m.journalDirectIO, m.indexBytes, m.diskFreeBytes, m.diskTotalBytes, m.corruptions, m.readErrors,
		m.gcReclaimedBytes, m.gcRemovedFiles, m.compactedFiles, m.compactedBytes,
		m.ledgers, m.tombstones, m.readOnly, m.limbo, m.replaySeconds, m.replayRecords,
		m.overwritesRefused, m.lacClamped, m.lacUnverified,
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
