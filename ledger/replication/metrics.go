package replication

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the replicator's Prometheus collectors, named
// strata_replication_<what>_<unit>. Create them with NewMetrics and register
// them with Register on an explicit registry. Every process that can run the
// replicator exports them; only the elected leader's gauges are non-zero,
// so take the max (or the sum) across processes.
type Metrics struct {
	leader          prometheus.Gauge
	underReplicated prometheus.Gauge
	waiting         prometheus.Gauge
	missingBookies  prometheus.Gauge
	lastAudit       prometheus.Gauge
	roundDuration   prometheus.Histogram
	entriesCopied   prometheus.Counter
	bytesCopied     prometheus.Counter
	repairs         *prometheus.CounterVec
	recovered       prometheus.Counter
}

// Results of strata_replication_repairs_total.
const (
	resultRepaired = "repaired"
	resultAlready  = "already_repaired"
	resultGone     = "ledger_deleted"
	resultFailed   = "failed"
)

// NewMetrics returns unregistered collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_replication_leader", Help: "1 while this process is the elected replicator.",
		}),
		underReplicated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_replication_under_replicated_ledgers",
			Help: "Ledgers with a fragment on a missing or decommissioned bookie, at the last audit.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_replication_waiting_ledgers",
			Help: "Under-replicated ledgers left alone at the last audit: within the grace period.",
		}),
		missingBookies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_replication_missing_bookies",
			Help: "Addresses referenced by ledgers with no live bookie registration, at the last audit.",
		}),
		lastAudit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_replication_last_audit_timestamp_seconds", Help: "Unix time of the last completed audit.",
		}),
		roundDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_replication_round_duration_seconds", Help: "Time of one audit and its repairs.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}),
		entriesCopied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_replication_entries_copied_total", Help: "Entry copies written by re-replication.",
		}),
		bytesCopied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_replication_copied_bytes_total", Help: "Payload bytes written by re-replication.",
		}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_replication_repairs_total",
			Help: "Fragment repairs by result: repaired, already_repaired, ledger_deleted, failed.",
		}, []string{"result"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_replication_ledgers_recovered_total",
			Help: "Open ledgers recovered (fenced and closed) because a bookie of theirs was gone past the grace period.",
		}),
	}
	for _, r := range []string{resultRepaired, resultAlready, resultGone, resultFailed} {
		m.repairs.WithLabelValues(r)
	}
	return m
}

// Register registers every collector with r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{
		m.leader, m.underReplicated, m.waiting, m.missingBookies, m.lastAudit, m.roundDuration,
		m.entriesCopied, m.bytesCopied, m.repairs, m.recovered,
	} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}

func (m *Metrics) setLeader(on bool) {
	if on {
		m.leader.Set(1)
		return
	}
	m.leader.Set(0)
	m.underReplicated.Set(0)
	m.waiting.Set(0)
	m.missingBookies.Set(0)
}

func (m *Metrics) observeAudit(a AuditResult, now time.Time) {
	m.underReplicated.Set(float64(a.UnderReplicated))
	m.waiting.Set(float64(a.Waiting))
	m.missingBookies.Set(float64(len(a.MissingSince)))
	m.lastAudit.Set(float64(now.UnixNano()) / 1e9)
}

func (m *Metrics) observeRepair(res RepairResult, err error) {
	m.entriesCopied.Add(float64(res.EntriesCopied))
	m.bytesCopied.Add(float64(res.BytesCopied))
	switch {
	case err != nil:
		m.repairs.WithLabelValues(resultFailed).Inc()
	case res.Outcome == Repaired:
		m.repairs.WithLabelValues(resultRepaired).Inc()
	case res.Outcome == AlreadyRepaired:
		m.repairs.WithLabelValues(resultAlready).Inc()
	case res.Outcome == LedgerGone:
		m.repairs.WithLabelValues(resultGone).Inc()
	}
}
