package broker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/broker/partlog"
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
	owned := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_broker_owned_partitions", Help: "Partitions this broker serves.",
	}, func() float64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		n := 0
		for _, p := range b.parts {
			if p.log != nil {
				n++
			}
		}
		return float64(n)
	})
	under := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_broker_under_replicated_partitions",
		Help: "Served partitions whose open ledger has entries below write-quorum copies.",
	}, func() float64 {
		n := 0
		for _, l := range b.servedLogs() {
			if l.UnderReplicated() {
				n++
			}
		}
		return float64(n)
	})
	tierLagBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_broker_tier_lag_bytes",
		Help: "Bytes of closed ledgers of the served partitions that no object covers yet (upload lag).",
	}, func() float64 {
		var n int64
		for _, l := range b.servedLogs() {
			bytes, _ := l.TierLag()
			n += bytes
		}
		return float64(n)
	})
	tierLagSeconds := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_broker_tier_lag_seconds",
		Help: "Age of the oldest closed ledger of the served partitions that no object covers yet (0: none).",
	}, func() float64 {
		var oldest time.Duration
		for _, l := range b.servedLogs() {
			_, age := l.TierLag()
			oldest = max(oldest, age)
		}
		return oldest.Seconds()
	})
	tierGarbage := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_broker_tier_garbage_objects",
		Help: "Objects of the served partitions unlinked and queued for deletion, not deleted yet.",
	}, func() float64 {
		n := 0
		for _, l := range b.servedLogs() {
			n += l.QueuedGarbage()
		}
		return float64(n)
	})
	m.tierIdentityErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "strata_broker_tier_bucket_identity_errors_total",
		Help: "Checks of the object store's bucket cookie that failed: deletions of local copies and orphan objects are stopped."})
	reg.MustRegister(m.requests, m.produceB, m.produceErrs, m.produceBusy, m.controller, m.assignments, m.lag, m.orphans, m.tierIdentityErrors, owned, under,
		tierLagBytes, tierLagSeconds, tierGarbage)
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

// servedLogs is a snapshot of the partition logs this broker serves.
func (b *Broker) servedLogs() []*partlog.Log {
	b.mu.Lock()
	defer b.mu.Unlock()
	var logs []*partlog.Log
	for _, p := range b.parts {
		if p.log != nil {
			logs = append(logs, p.log)
		}
	}
	return logs
}
