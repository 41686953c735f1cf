package kafka

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/broker"
)

// Listen starts b's Kafka listener as cfg's KafkaListener settings say:
// the adapter's APIs over b's service layer, with b's TLS and b's
// authentication (broker.KafkaSecurity). It returns nil, nil when the
// listener is off (no --kafka-listen). The caller closes the Server before
// the broker.
func Listen(b *broker.Broker, cfg broker.Config, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
	if cfg.KafkaListen == "" {
		return nil, nil
	}
	reg2 := NewRegistry()
	a := NewAdapter(b, AdapterConfig{AutoCreateTopics: cfg.KafkaAutoCreateTopics, DefaultPartitions: cfg.KafkaDefaultPartitions}, log)
	if err := a.Register(reg2); err != nil {
		return nil, err
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	kcfg := Config{
		Address:               cfg.KafkaListen,
		Handlers:              reg2,
		MaxRequestBytes:       cfg.KafkaMaxRequestBytes,
		IdleTimeout:           cfg.KafkaIdleTimeout,
		InFlightPerConnection: cfg.KafkaInFlightPerConnection,
		MaxConnections:        cfg.KafkaMaxConnections,
		MaxConnectionsPerIP:   cfg.KafkaMaxConnectionsPerIP,
		Metrics:               m,
		Logger:                log,
	}
	if creds := b.Credentials(); creds.Enabled() {
		kcfg.TLS = creds.ServerTLS(nil)
		kcfg.Security = b.KafkaSecurity()
	}
	return New(kcfg)
}
