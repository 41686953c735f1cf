package broker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/tierpass"
)

// metrics are the broker's own; partlog and group register theirs.
type metrics struct {
	requests    *prometheus.HistogramVec
	produceB    prometheus.Counter
	produceErrs prometheus.Counter
	// produceBusy: Produce requests refused because
	// --max-inflight-produce-bytes stayed full.
	produceBusy prometheus.Counter
	controller  prometheus.Gauge
	assignments prometheus.Counter
	lag         *prometheus.GaugeVec
	orphans     prometheus.Counter
	// tierIdentityErrors: checks of the bucket cookie that failed (no
	// deletion happens while they do).
	tierIdentityErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, b *Broker) *metrics {
	m := &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "strata_broker_request_duration_seconds",
			Help:    "Time to serve a request, by request type (fetch includes its long-poll wait).",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 18),
		}, []string{"request"}),
		produceB: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_produce_bytes_total", Help: "Record batch bytes received in produce requests."}),
		produceErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_produce_errors_total", Help: "Produced batches answered with an error."}),
		produceBusy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_produce_requests_refused_busy_total",
			Help: "Produce requests refused (UNAVAILABLE, retryable) because --max-inflight-produce-bytes stayed full for 1s."}),
		controller: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_broker_controller", Help: "1 while this broker is the controller."}),
		assignments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_controller_assignments_total", Help: "Partition (re)assignments written by this broker as controller."}),
	}
	m.orphans = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "strata_broker_orphan_ledgers_deleted_total",
		Help: "Partition ledgers no partition list named, deleted by this broker as controller.",
	})
	m.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "strata_broker_group_lag_records",
		Help: "Records between a group's committed offsets and the high watermarks, summed over a topic's partitions (groups this broker coordinates; every --lag-interval).",
	}, []string{"group", "topic"})
	m.tierIdentityErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "strata_broker_tier_bucket_identity_errors_total",
		Help: "Checks of the object store's bucket cookie that failed: deletions of local copies and orphan objects are stopped."})
	reg.MustRegister(m.requests, m.produceB, m.produceErrs, m.produceBusy, m.controller, m.assignments, m.lag, m.orphans, m.tierIdentityErrors,
		newServedCollector(b))
	return m
}

func (m *metrics) observe(request string, start time.Time) {
	m.requests.WithLabelValues(request).Observe(time.Since(start).Seconds())
}

func (m *metrics) produced(bytes int, err error) {
	m.produceB.Add(float64(bytes))
	if err != nil {
		m.produceErrs.Inc()
	}
}

// servedCollector exports the gauges over the served partitions, walking
// them once per scrape (a scrape at 50,000 partitions walked them once per
// gauge).
type servedCollector struct {
	b                                           *Broker
	owned, under, lagBytes, lagSeconds, garbage *prometheus.Desc
}

func newServedCollector(b *Broker) *servedCollector {
	return &servedCollector{b: b,
		owned: prometheus.NewDesc("strata_broker_owned_partitions", "Partitions this broker serves.", nil, nil),
		under: prometheus.NewDesc("strata_broker_under_replicated_partitions",
			"Served partitions whose open ledger has entries below write-quorum copies.", nil, nil),
		lagBytes: prometheus.NewDesc("strata_broker_tier_lag_bytes",
			"Bytes of closed ledgers of the served partitions that no object covers yet (upload lag).", nil, nil),
		lagSeconds: prometheus.NewDesc("strata_broker_tier_lag_seconds",
			"Age of the oldest closed ledger of the served partitions that no object covers yet (0: none).", nil, nil),
		garbage: prometheus.NewDesc("strata_broker_tier_garbage_objects",
			"Objects of the served partitions unlinked and queued for deletion, not deleted yet.", nil, nil),
	}
}

func (c *servedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.owned, c.under, c.lagBytes, c.lagSeconds, c.garbage} {
		ch <- d
	}
}

func (c *servedCollector) Collect(ch chan<- prometheus.Metric) {
	logs := c.b.servedLogs()
	var under, garbage int
	var lagBytes int64
	var oldest time.Duration
	for _, l := range logs {
		if l.UnderReplicated() {
			under++
		}
		snap := l.Snapshot()
		bytes, age := tierpass.Lag(snap, l.Config().Tier)
		lagBytes += bytes
		oldest = max(oldest, age)
		garbage += tierpass.QueuedGarbage(snap)
	}
	for _, g := range []struct {
		d *prometheus.Desc
		v float64
	}{{c.owned, float64(len(logs))}, {c.under, float64(under)}, {c.lagBytes, float64(lagBytes)},
		{c.lagSeconds, oldest.Seconds()}, {c.garbage, float64(garbage)}} {
		ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, g.v)
	}
}

// servedLogs is a snapshot of the partition logs this broker serves.
func (b *Broker) servedLogs() []*partlog.Log {
	b.mu.Lock()
	defer b.mu.Unlock()
	logs := make([]*partlog.Log, 0, len(b.parts))
	for _, p := range b.parts {
		if p.log != nil {
			logs = append(logs, p.log)
		}
	}
	return logs
}
