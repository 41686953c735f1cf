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
	recoveriesStuck  prometheus.Counter
	lacsDistrusted   prometheus.Counter
	digestMismatches prometheus.Counter
}

// NewMetrics returns unregistered collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		recoveriesStuck: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_ledger_recoveries_stuck_total",
			Help: "Recoveries that found an acknowledged entry (below the ledger's last fragment) that every bookie " +
				"of its write set reports absent (lost data): they retry until their context ends, and are logged.",
		}),
		lacsDistrusted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_ledger_recovery_lacs_distrusted_total",
			Help: "Recoveries that found an entry below the highest LAC the bookies reported absent from enough " +
				"bookies of its write set (a forged or inflated LAC): the LAC is not trusted, the ledger ends before " +
				"that entry, and a warning names the bookies.",
		}),
		digestMismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_ledger_digest_mismatches_total",
			Help: "Entry copies a bookie served whose digest does not match (written by someone else, moved, or damaged): " +
				"never returned; the entry is read from another bookie of its write set.",
		}),
	}
}

// Register registers every collector on r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	return errors.Join(r.Register(m.recoveriesStuck), r.Register(m.lacsDistrusted), r.Register(m.digestMismatches))
}

// lacDistrusted counts one recovery that dropped a false LAC; m may be
// nil.
func (m *Metrics) lacDistrusted() {
	if m != nil {
		m.lacsDistrusted.Inc()
	}
}

// recoveryStuck counts one stuck recovery; m may be nil.
func (m *Metrics) recoveryStuck() {
	if m != nil {
		m.recoveriesStuck.Inc()
	}
}

// digestMismatch counts one copy with a wrong digest; m may be nil.
func (m *Metrics) digestMismatch() {
	if m != nil {
		m.digestMismatches.Inc()
	}
}
