package ledger

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the ledger client's Prometheus collectors, named
// strata_ledger_<what>_<unit>. Create them with NewMetrics, register them
// with Register on an explicit registry, and hand them to the protocol in
// Env.Metrics; with a nil Env.Metrics nothing is counted.
type Metrics struct {
	recoveriesStuck prometheus.Counter
}

// NewMetrics returns unregistered collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		recoveriesStuck: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_ledger_recoveries_stuck_total",
			Help: "Recoveries that found an entry below the LAC that every bookie of its write set reports absent " +
				"(an inflated LAC, or lost data): they retry until their context ends, and are logged.",
		}),
	}
}

// Register registers every collector on r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	return errors.Join(r.Register(m.recoveriesStuck))
}

// recoveryStuck counts one stuck recovery; m may be nil.
func (m *Metrics) recoveryStuck() {
	if m != nil {
		m.recoveriesStuck.Inc()
	}
}
