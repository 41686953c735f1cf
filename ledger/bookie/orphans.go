package bookie

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
)

// The orphan sweep (doc.go, "Orphan sweep", rules O1-O6) deletes the local
// copies of ledgers that metad no longer lists. decideOrphans is the
// decision, a pure function; orphanSweeper does the I/O around it.

// Defaults of the orphan sweep.
const (
	DefaultLedgerGCInterval = 5 * time.Minute
	DefaultLedgerGCGrace    = time.Hour
)

// ErrUntrustedMetad is why a sweep did nothing when metad does not hold this
// bookie's cookie (instance id): a metad that does not know this bookie (a
// different cluster's, or one restored from a backup older than the bookie)
// cannot say which of its ledgers exist (rule O4).
var ErrUntrustedMetad = errors.New("bookie: metad does not hold this bookie's cookie; orphan sweep skipped")

// orphanDecision is what one sweep decided.
type orphanDecision struct {
	// Delete lists, in id order, the local ledgers absent from metad for
	// longer than the grace.
	Delete []uint64
	// Absent maps every local ledger that metad did not list to when it
	// was first seen absent, the ledgers in Delete included: if deleting
	// one fails, the next sweep still knows how long it has been absent.
	Absent map[uint64]time.Time
}

// decideOrphans decides one sweep: local is what this bookie holds, listed
// is every ledger metad knows (a complete listing taken after local, rule
// O2), absent is the previous decision's Absent (nil at first). A local
// ledger missing from listed is deleted once now is more than grace past
// when it was first seen absent (rule O1); a ledger that metad lists, or
// that is no longer held, is forgotten. A clock that went backwards only
// delays a deletion.
func decideOrphans(local, listed []uint64, absent map[uint64]time.Time, now time.Time, grace time.Duration) orphanDecision {
	known := make(map[uint64]bool, len(listed))
	for _, id := range listed {
		known[id] = true
	}
	d := orphanDecision{Absent: map[uint64]time.Time{}}
	for _, id := range local {
		if known[id] {
			continue
		}
		since, ok := absent[id]
		if !ok {
			since = now
		}
		d.Absent[id] = since
		if now.Sub(since) > grace {
			d.Delete = append(d.Delete, id)
		}
	}
	slices.Sort(d.Delete)
	d.Delete = slices.Compact(d.Delete)
	return d
}

// ledgerHolder is the bookie's side of the sweep (*storage.Storage).
type ledgerHolder interface {
	// Ledgers returns the ids of the ledgers held here.
	Ledgers() []uint64
	// Delete deletes a ledger's local copy durably.
	Delete(ctx context.Context, ledgerID uint64) error
}

// ledgerLister is metad's side (ledger.MetadataStore): every ledger id, from
// one complete listing, or an error (never a partial list).
type ledgerLister interface {
	List(ctx context.Context) ([]uint64, error)
}

// SweepMetrics are the orphan sweep's Prometheus collectors. Create them
// with NewSweepMetrics and register them with Register.
type SweepMetrics struct {
	orphaned  prometheus.Gauge
	deleted   prometheus.Counter
	errors    prometheus.Counter
	lastSweep prometheus.Gauge
}

// NewSweepMetrics returns unregistered collectors.
func NewSweepMetrics() *SweepMetrics {
	return &SweepMetrics{
		orphaned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_ledger_gc_orphaned_ledgers",
			Help: "Ledgers held here that metad did not list at the last sweep, not yet deleted (waiting out --ledger-gc-grace).",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_bookie_ledger_gc_deleted_ledgers_total",
			Help: "Ledgers deleted here by the orphan sweep because metad no longer lists them.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_bookie_ledger_gc_errors_total",
			Help: "Orphan sweeps that stopped on an error (metad listing, cookie check or local delete).",
		}),
		lastSweep: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_bookie_ledger_gc_last_sweep_timestamp_seconds",
			Help: "Unix time of the last orphan sweep that completed without error.",
		}),
	}
}

// Register registers every collector with r.
func (m *SweepMetrics) Register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.orphaned, m.deleted, m.errors, m.lastSweep} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}

// orphanSweeper runs the orphan sweep every interval. It is owned by the
// Bookie, which runs run on its WaitGroup and cancels it on Close.
type orphanSweeper struct {
	interval, grace time.Duration
	held            ledgerHolder
	meta            ledgerLister
	// trust returns nil while metad holds this bookie's cookie (rule O4);
	// ErrUntrustedMetad when it does not.
	trust   func(ctx context.Context) error
	now     func() time.Time
	log     *slog.Logger
	metrics *SweepMetrics

	// absent is the last decision's Absent. Only the goroutine running
	// run (or a test calling sweep) touches it: no lock.
	absent map[uint64]time.Time
}

// run sweeps at once (starting the grace clock of what it finds) and then
// every interval, until ctx ends.
func (s *orphanSweeper) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		if _, err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("orphan sweep stopped; retrying at the next one", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweep runs one sweep and returns the ledgers it deleted. It acts only on
// a complete metad listing from a metad that knows this bookie; on any
// error it deletes nothing more and keeps the first-seen times.
func (s *orphanSweeper) sweep(ctx context.Context) ([]uint64, error) {
	if err := s.trust(ctx); err != nil {
		s.failed(ctx)
		return nil, err
	}
	// Local first, then metad (rule O2): a ledger held here had its
	// metadata written before its first record reached this bookie, so a
	// listing begun after this one includes it unless it was deleted.
	local := s.held.Ledgers()
	listed, err := s.meta.List(ctx)
	if err != nil {
		s.failed(ctx)
		return nil, fmt.Errorf("bookie: orphan sweep: %w", err)
	}
	now := s.now()
	d := decideOrphans(local, listed, s.absent, now, s.grace)
	for id, since := range d.Absent {
		if _, seen := s.absent[id]; !seen {
			s.log.Info("ledger held here is not in metad; deleting it after the grace period",
				"ledger", id, "absent_since", since.UTC().Format(time.RFC3339), "grace", s.grace)
		}
	}
	s.absent = d.Absent
	defer func() { s.metrics.orphaned.Set(float64(len(s.absent))) }()
	var deleted []uint64
	for _, id := range d.Delete {
		if err := s.held.Delete(ctx, id); err != nil {
			s.failed(ctx)
			return deleted, fmt.Errorf("bookie: orphan sweep: delete ledger %d: %w", id, err)
		}
		since := s.absent[id]
		delete(s.absent, id)
		deleted = append(deleted, id)
		s.metrics.deleted.Inc()
		s.log.Warn("deleted orphaned ledger: metad no longer lists it",
			"ledger", id, "absent_since", since.UTC().Format(time.RFC3339), "absent_for", now.Sub(since).Round(time.Second))
	}
	s.metrics.lastSweep.Set(float64(now.UnixNano()) / 1e9)
	return deleted, nil
}

// failed counts a sweep that stopped on an error, unless it stopped
// because the bookie is closing.
func (s *orphanSweeper) failed(ctx context.Context) {
	if ctx.Err() == nil {
		s.metrics.errors.Inc()
	}
}

// cookieCheck returns the sweep's trust check: metad must still hold this
// bookie's cookie with the instance id it runs under.
func cookieCheck(meta *metaclient.Client, id, instance string) func(context.Context) error {
	return func(ctx context.Context) error {
		kv, err := meta.Get(ctx, bookies.CookiePrefix+id)
		if errors.Is(err, metaclient.ErrNotFound) {
			return fmt.Errorf("%w: no cookie at %s%s", ErrUntrustedMetad, bookies.CookiePrefix, id)
		}
		if err != nil {
			return fmt.Errorf("bookie: orphan sweep: read cookie: %w", err)
		}
		c := &bookiepb.Cookie{}
		if err := proto.Unmarshal(kv.GetValue(), c); err != nil {
			return fmt.Errorf("%w: cookie at %s%s is unreadable: %v", ErrUntrustedMetad, bookies.CookiePrefix, id, err)
		}
		if c.GetInstanceId() != instance {
			return fmt.Errorf("%w: metad holds instance %s, this bookie runs as %s", ErrUntrustedMetad, c.GetInstanceId(), instance)
		}
		return nil
	}
}
