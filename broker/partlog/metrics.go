package partlog

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the partition logs' metrics, shared by every Log and the
// TailCache of a broker. No per-partition labels: cardinality stays flat
// however many partitions a broker owns.
type Metrics struct {
	AppendLatency   prometheus.Histogram
	AppendedRecords prometheus.Counter
	AppendedBytes   prometheus.Counter
	FetchedBytes    prometheus.Counter
	BookieReadBytes prometheus.Counter
	CacheHits       prometheus.Counter
	CacheMisses     prometheus.Counter
	CacheBytes      prometheus.Gauge
	Rolls           prometheus.Counter
	// RollsDeferred: roll checks that found a roll due but the segment
	// list full (L1).
	RollsDeferred    prometheus.Counter
	TakeoverDuration prometheus.Histogram
	Failures         prometheus.Counter
	// RetentionSegments, RetentionBytes: closed segments (ledgers) and
	// their bytes deleted by retention.
	RetentionSegments prometheus.Counter
	RetentionBytes    prometheus.Counter
	// The object-store tier.
	TierUploadedBytes   prometheus.Counter
	TierUploadedObjects prometheus.Counter
	TierErrors          prometheus.Counter
	TierLocalDeleted    prometheus.Counter
	TierOrphansDeleted  prometheus.Counter
	TierReadBytes       prometheus.Counter
	TierGarbageDeleted  prometheus.Counter
}

// NewMetrics creates the metrics and registers them on reg (nil: not
// registered, e.g. in tests). Call it once per broker.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		AppendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "strata_broker_append_duration_seconds",
			Help:    "Time from a batch's arrival at the partition log to its acknowledgement at the requested level.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		AppendedRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_appended_records_total", Help: "Records acknowledged (ack quorum) by partition logs."}),
		AppendedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_appended_bytes_total", Help: "Record batch bytes acknowledged (ack quorum) by partition logs."}),
		FetchedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_fetched_bytes_total", Help: "Record batch bytes returned by fetches."}),
		BookieReadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_bookie_read_bytes_total", Help: "Entry bytes fetches read from bookies (read-ahead included)."}),
		CacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tail_cache_hits_total", Help: "Entries fetches found in the tail cache."}),
		CacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tail_cache_misses_total", Help: "Entries fetches did not find in the tail cache."}),
		CacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_broker_tail_cache_bytes", Help: "Bytes held by the tail cache."}),
		Rolls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_segment_rolls_total", Help: "Segments rolled (closed and replaced by a new ledger)."}),
		RollsDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_segment_rolls_deferred_total",
			Help: "Roll checks that found a segment due to roll but its partition's segment list too full for metad; retention must shorten it first."}),
		TakeoverDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "strata_broker_takeover_duration_seconds",
			Help:    "Time to take over a partition: fence and recover open ledgers, rebuild state, CAS the ledger list.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		Failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_partition_log_failures_total", Help: "Partition logs that failed (fenced, CAS lost, write error)."}),
		RetentionSegments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_retention_deleted_segments_total", Help: "Closed segments (ledgers) deleted by time or size retention."}),
		RetentionBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_retention_deleted_bytes_total", Help: "Bytes of the segments deleted by retention."}),
		TierUploadedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_uploaded_bytes_total", Help: "Bytes of segment objects uploaded, verified and committed."}),
		TierUploadedObjects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_uploaded_objects_total", Help: "Segment objects uploaded, verified and committed."}),
		TierErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_errors_total", Help: "Tier checks that failed (upload, verify, commit, local deletion or orphan sweep)."}),
		TierLocalDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_local_deleted_ledgers_total", Help: "Ledgers deleted from the bookies because an object covers them."}),
		TierOrphansDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_orphan_objects_deleted_total", Help: "Objects no PartitionLog names, deleted by the orphan sweep."}),
		TierReadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_fetched_bytes_total", Help: "Batch bytes fetches read from segment objects."}),
		TierGarbageDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_garbage_deleted_objects_total", Help: "Objects unlinked by retention and then deleted from the store."}),
	}
	if reg != nil {
		reg.MustRegister(m.AppendLatency, m.AppendedRecords, m.AppendedBytes, m.FetchedBytes, m.BookieReadBytes,
			m.CacheHits, m.CacheMisses, m.CacheBytes, m.Rolls, m.RollsDeferred, m.TakeoverDuration, m.Failures,
			m.RetentionSegments, m.RetentionBytes, m.TierUploadedBytes, m.TierUploadedObjects, m.TierErrors,
			m.TierLocalDeleted, m.TierOrphansDeleted, m.TierReadBytes,
			m.TierGarbageDeleted)
	}
	return m
}
