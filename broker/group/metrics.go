package group

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the coordinators' Prometheus metrics, shared by every
// Coordinator of a broker. Names follow strata_broker_group_<what>_<unit>.
// They also hold the broker-wide count of groups (strata_broker_groups)
// that Limits.MaxGroups bounds, so coordinators sharing Metrics share it.
type Metrics struct {
	groups       groupCount
	members      *prometheus.GaugeVec
	rebalances   *prometheus.CounterVec
	commits      prometheus.Counter
	expired      prometheus.Counter
	fenced       prometheus.Counter
	loadDuration prometheus.Histogram
	// skippedBatches: __consumer_offsets batches a load could not decode
	// and stepped over (their records are lost to the coordinator).
	skippedBatches prometheus.Counter
	// refused: requests refused by a Limit, by reason.
	refused *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (if not nil).
// Call it once per broker.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_broker_group_members", Help: "Members of each consumer group this broker coordinates.",
		}, []string{"group"}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_group_rebalances_total", Help: "Group epoch bumps (membership, subscription or partition count changes), by group.",
		}, []string{"group"}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_group_offset_commits_total", Help: "Partition offsets committed (each partition of a commit request counts once).",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_group_sessions_expired_total", Help: "Members removed because their session timed out.",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_group_members_fenced_total", Help: "Members removed because they did not revoke partitions within their rebalance timeout.",
		}),
		loadDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_broker_group_coordinator_load_duration_seconds", Help: "Time to replay a __consumer_offsets partition when becoming its coordinator.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		skippedBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_group_replay_batches_skipped_total", Help: "__consumer_offsets batches a coordinator load could not decode and skipped.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_group_requests_refused_total", Help: "Group requests refused by a coordinator limit, by reason (id_too_long, too_many_topics, topic_name_too_long, member_too_large, group_too_large, group_max_size, too_many_groups).",
		}, []string{"reason"}),
	}
	groups := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_broker_groups", Help: "Consumer groups this broker coordinates (bounded by the coordinators' MaxGroups).",
	}, func() float64 { return float64(m.groups.load()) })
	if reg != nil {
		reg.MustRegister(groups, m.members, m.rebalances, m.commits, m.expired, m.fenced, m.loadDuration, m.skippedBatches, m.refused)
	}
	return m
}
