package metad

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/hashicorp/raft"
)

// metrics are metad's Prometheus metrics; names follow
// strata_metad_<what>_<unit>.
type metrics struct {
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	applyDuration   prometheus.Histogram
	leasesExpired   prometheus.Counter
	watchers        prometheus.Gauge
	gauges          []prometheus.Collector
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_metad_requests_total", Help: "gRPC requests served, by method and status code.",
		}, []string{"method", "code"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_metad_request_duration_seconds", Help: "gRPC request latency by method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"method"}),
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_metad_apply_duration_seconds", Help: "Time from proposing a command to its being applied on the leader.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		leasesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_metad_leases_expired_total", Help: "Leases revoked because their TTL ran out (counted on the leader that expired them).",
		}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_metad_watchers", Help: "Open watch streams on this member.",
		}),
	}
	gauge := func(name, help string, f func() float64) {
		m.gauges = append(m.gauges, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("strata_metad_is_leader", "1 when this member is the Raft leader.", func() float64 {
		if s.raft.State() == raft.Leader {
			return 1
		}
		return 0
	})
	gauge("strata_metad_raft_term", "Current Raft term.", func() float64 { return float64(s.raft.CurrentTerm()) })
	gauge("strata_metad_raft_commit_index", "Raft commit index.", func() float64 { return float64(s.raft.CommitIndex()) })
	gauge("strata_metad_raft_applied_index", "Raft applied index.", func() float64 { return float64(s.raft.AppliedIndex()) })
	gauge("strata_metad_raft_last_contact_seconds", "Time since the leader was last heard from (0 on the leader).", func() float64 {
		if s.raft.State() == raft.Leader {
			return 0
		}
		return time.Since(s.raft.LastContact()).Seconds()
	})
	gauge("strata_metad_revision", "Store revision.", func() float64 { return float64(s.store.Revision()) })
	gauge("strata_metad_keys", "Keys in the store.", func() float64 { return float64(s.store.KeyCount()) })
	gauge("strata_metad_leases", "Live leases.", func() float64 { return float64(s.store.LeaseCount()) })
	gauge("strata_metad_data_bytes", "Bytes of live keys and values (what --quota-bytes bounds).",
		func() float64 { return float64(s.store.DataBytes()) })
	gauge("strata_metad_history_bytes", "Bytes the watch history holds (what --history-bytes bounds).",
		func() float64 { return float64(s.store.HistoryBytes()) })
	return m
}

func (m *metrics) register(reg prometheus.Registerer, more ...prometheus.Collector) error {
	cs := append([]prometheus.Collector{m.requests, m.requestDuration, m.applyDuration, m.leasesExpired, m.watchers}, m.gauges...)
	cs = append(cs, more...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ServerOptions returns interceptors that count and time every request,
// and log clients' changes (audit).
func (s *Server) ServerOptions() []grpc.ServerOption {
	m := s.metrics
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.audit),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			start := time.Now()
			resp, err := h(ctx, req)
			m.requestDuration.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
			m.requests.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := h(srv, ss)
			m.requests.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
			return err
		}),
	}
}
