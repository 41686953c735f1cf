package kafka

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metrics are the listener's. Labels stay bounded: APIs are those kmsg
// knows, versions those registered, codes Kafka's, reasons the close
// reasons below.
type Metrics struct {
	requests    *prometheus.CounterVec   // api, version
	errors      *prometheus.CounterVec   // api, code
	latency     *prometheus.HistogramVec // api
	open        prometheus.Gauge
	refused     *prometheus.CounterVec // reason
	closed      *prometheus.CounterVec // reason
	received    prometheus.Counter
	sent        prometheus.Counter
	authSuccess *prometheus.CounterVec // mechanism
	authFailure *prometheus.CounterVec // mechanism
}

// NewMetrics makes the listener's metrics and registers them on reg (nil:
// kept unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_kafka_requests_total",
			Help: "Kafka requests decoded and admitted, by API and version.",
		}, []string{"api", "version"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_kafka_errors_total",
			Help: "Error codes set in Kafka responses, by API and error.",
		}, []string{"api", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "strata_broker_kafka_request_duration_seconds",
			Help:    "From a Kafka request read to its response written (or skipped), by API; includes waits such as a long-poll fetch.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
		}, []string{"api"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_broker_kafka_connections_open",
			Help: "Kafka client connections open.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_kafka_connections_refused_total",
			Help: "Kafka client connections closed at accept, by reason (per_ip_cap, total_cap, shutdown).",
		}, []string{"reason"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_kafka_connections_closed_total",
			Help: "Kafka client connections closed after being served, by reason (see broker/kafka's doc).",
		}, []string{"reason"}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_kafka_received_bytes_total",
			Help: "Bytes read from Kafka client connections (after TLS).",
		}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_kafka_sent_bytes_total",
			Help: "Bytes written to Kafka client connections (before TLS).",
		}),
		authSuccess: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_kafka_authentications_total",
			Help: "Kafka connections authenticated, by mechanism (SASL's, or certificate).",
		}, []string{"mechanism"}),
		authFailure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_kafka_authentication_failures_total",
			Help: "Kafka SASL exchanges that failed, by mechanism.",
		}, []string{"mechanism"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.errors, m.latency, m.open, m.refused, m.closed, m.received, m.sent, m.authSuccess, m.authFailure} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("kafka: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// request counts a request admitted; versions beyond kmsg's (only
// ApiVersions gets that far, for its KIP-511 answer) count as "unknown",
// so a client cannot grow the label set.
func (m *Metrics) request(key, version int16) {
	label := "unknown"
	if req := kmsg.RequestForKey(key); req != nil && version >= 0 && version <= req.MaxVersion() {
		label = strconv.Itoa(int(version))
	}
	m.requests.WithLabelValues(kmsg.NameForKey(key), label).Inc()
}

func (m *Metrics) observe(key int16, start time.Time) {
	m.latency.WithLabelValues(kmsg.NameForKey(key)).Observe(time.Since(start).Seconds())
}

// errorCode counts code (not 0) for key and returns it.
func (m *Metrics) errorCode(key, code int16) int16 {
	if code != 0 {
		m.errors.WithLabelValues(kmsg.NameForKey(key), codeName(code)).Inc()
	}
	return code
}

// codeName is Kafka's name of an error code (UNSUPPORTED_VERSION), or the
// number for a code kerr does not know.
func codeName(code int16) string {
	if ke := kerr.TypedErrorForCode(code); ke != nil && ke.Code == code {
		return ke.Message
	}
	return strconv.Itoa(int(code))
}
