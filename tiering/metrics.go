package tiering

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/tiering/diskcache"
)

// Metrics are the read path's metrics, shared by a broker's Reader. No
// per-segment or per-partition labels: cardinality stays flat however
// many segments are read.
type Metrics struct {
	// RemoteReadBytes, RemoteReads, RemoteReadDuration: the ranged GETs
	// issued (chunks, read-ahead and tails), the bytes they returned and
	// how long each took, body included.
	RemoteReadBytes    prometheus.Counter
	RemoteReads        prometheus.Counter
	RemoteReadDuration prometheus.Histogram
	// ChunkCacheHits, ChunkCacheMisses: chunk lookups of fetches and time
	// lookups. A hit needed no GET of its own (the chunk was cached, or
	// being downloaded for another reader or by read-ahead); a miss
	// started one.
	ChunkCacheHits   prometheus.Counter
	ChunkCacheMisses prometheus.Counter
	// ChunkCacheBytes: bytes the chunk cache holds or is downloading. It
	// moves by deltas, so Readers sharing a Metrics add up.
	ChunkCacheBytes prometheus.Gauge
	// ReadErrors: failed Fetch and OffsetForTime calls, and failed
	// read-ahead downloads no caller waited for. A missing or corrupt LIVE
	// segment shows here (tiering invariant T10).
	ReadErrors prometheus.Counter
	// DiskCache: the on-disk chunk cache's metrics
	// (strata_broker_tier_disk_cache_*), registered with the others; give
	// it to diskcache.Open.
	DiskCache *diskcache.Metrics
	// DiskCacheSkipped: downloaded chunks not written to the disk cache
	// because its writer was behind (its queue full).
	DiskCacheSkipped prometheus.Counter
}

// NewMetrics creates the metrics and registers them on reg (nil: not
// registered, e.g. in tests). Call it once per broker.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		RemoteReadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_remote_read_bytes_total", Help: "Bytes read from segment objects by ranged GETs (read-ahead and tails included)."}),
		RemoteReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_remote_reads_total", Help: "Ranged GETs of segment objects (chunks, read-ahead and tails)."}),
		RemoteReadDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "strata_broker_tier_remote_read_duration_seconds",
			Help:    "Time of one ranged GET of a segment object, body included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		ChunkCacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_chunk_cache_hits_total", Help: "Chunk lookups served without a GET of their own (cached, or joined a download in progress)."}),
		ChunkCacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_chunk_cache_misses_total", Help: "Chunk lookups that started a GET."}),
		ChunkCacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_broker_tier_chunk_cache_bytes", Help: "Bytes held or being downloaded by the chunk cache."}),
		ReadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_tier_read_errors_total", Help: "Failed reads of segment objects (missing, corrupt, unreachable, timed out)."}),
	}
	m.DiskCache = diskcache.NewMetrics(reg)
	m.DiskCacheSkipped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "strata_broker_tier_disk_cache_skipped_total", Help: "Downloaded chunks not written to the on-disk cache because its writer was behind."})
	if reg != nil {
		reg.MustRegister(m.DiskCacheSkipped, m.RemoteReadBytes, m.RemoteReads, m.RemoteReadDuration,
			m.ChunkCacheHits, m.ChunkCacheMisses, m.ChunkCacheBytes, m.ReadErrors)
	}
	return m
}
