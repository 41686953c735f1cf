package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Defaults of Config.
const (
	DefaultInterval             = 10 * time.Second
	DefaultGrace                = 30 * time.Second
	DefaultParallelism          = 16
	DefaultMaxConcurrentLedgers = 4
	DefaultRequestTimeout       = 10 * time.Second
	DefaultRecoverTimeout       = 2 * time.Minute
)

// ErrClosed is what Start and RunOnce return after Close.
var ErrClosed = errors.New("replication: replicator closed")

// Config configures a Replicator. Zero fields take the defaults above.
type Config struct {
	// ID names this replicator in the leader record (the hosting bookie's
	// id).
	ID string
	// Interval between the leader's rounds (audit, then repairs).
	Interval time.Duration
	// Grace: how long a bookie may be missing before its copies are
	// re-replicated, and how long an open ledger may hold a missing or
	// decommissioned bookie before it is recovered.
	Grace time.Duration
	// Parallelism bounds the entries one repair copies at once.
	Parallelism int
	// MaxConcurrentLedgers bounds the ledgers repaired at once.
	MaxConcurrentLedgers int
	// RequestTimeout bounds each read and add of a copy.
	RequestTimeout time.Duration
	// RecoverTimeout bounds the recovery of one open ledger (it waits, for
	// instance, while too few bookies of a write set are up).
	RecoverTimeout time.Duration
	// Logger; default: discard.
	Logger *slog.Logger
	// Metrics; default: a private, unregistered set.
	Metrics *Metrics
	// Now is the clock of the grace periods; default time.Now.
	Now func() time.Time
	// Scheduler times the waits between rounds; default real timers.
	Scheduler ledger.Scheduler
}

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Parallelism == 0 {
		c.Parallelism = DefaultParallelism
	}
	if c.MaxConcurrentLedgers == 0 {
		c.MaxConcurrentLedgers = DefaultMaxConcurrentLedgers
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RecoverTimeout == 0 {
		c.RecoverTimeout = DefaultRecoverTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Scheduler == nil {
		c.Scheduler = realScheduler{}
	}
	return c
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Interval < 0, c.Grace < 0, c.RequestTimeout < 0, c.RecoverTimeout < 0:
		return fmt.Errorf("replication: negative duration in %v", c)
	case c.Parallelism < 0, c.MaxConcurrentLedgers < 0:
		return fmt.Errorf("replication: negative bound in %v", c)
	}
	return nil
}

func (c Config) String() string {
	c = c.withDefaults()
	return fmt.Sprintf("id=%s interval=%v grace=%v parallelism=%d max-concurrent-ledgers=%d request-timeout=%v recover-timeout=%v",
		c.ID, c.Interval, c.Grace, c.Parallelism, c.MaxConcurrentLedgers, c.RequestTimeout, c.RecoverTimeout)
}

type realScheduler struct{}

func (realScheduler) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Replicator is BookKeeper's autorecovery: any number of processes run one;
// the one elected leads, and every Interval audits every ledger and repairs
// what the audit asks for (see Audit and doc.go). It is an io.Closer: Close
// stops the loop, resigns the leadership and waits for every goroutine.
type Replicator struct {
	cfg     Config
	env     ledger.Env
	kv      KV
	elector Elector
	log     *slog.Logger
	metrics *Metrics
	worker  *worker

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		started, closed bool
	}
}

// Round reports one audit and its repairs.
type Round struct {
	Audit AuditResult
	// Repairs by outcome, and failures (retried by the next round).
	Repaired, AlreadyRepaired, LedgersGone, Failed int
	// Recovered counts open ledgers recovered (fenced and closed).
	Recovered     int
	EntriesCopied int64
	// Errors of the failed tasks.
	Errors []error
}

// New returns a Replicator over env (its Meta, Bookies and Registry; Now
// is overridden by cfg.Now for recoveries), kv and elector. Start runs it.
func New(cfg Config, env ledger.Env, kv KV, elector Elector) (*Replicator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if env.Meta == nil || env.Bookies == nil || env.Registry == nil || kv == nil || elector == nil {
		return nil, errors.New("replication: New needs env.Meta, env.Bookies, env.Registry, a KV and an Elector")
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("component", "replicator")
	if env.Now == nil {
		env.Now = cfg.Now
	}
	if env.Logger == nil {
		env.Logger = log
	}
	r := &Replicator{cfg: cfg, env: env, kv: kv, elector: elector, log: log, metrics: cfg.Metrics,
		worker: &worker{env: env, log: log, parallelism: cfg.Parallelism, requestTimeout: cfg.RequestTimeout}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Start starts campaigning and, while leading, running rounds.
func (r *Replicator) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.mu.closed:
		return ErrClosed
	case r.mu.started:
		return nil
	}
	r.mu.started = true
	r.log.Info("replicator starting", "config", r.cfg.String())
	r.wg.Go(r.run)
	return nil
}

// Close stops the replicator: a round in progress is cancelled (a partial
// copy is harmless), the leadership is given up, and every goroutine has
// ended when it returns.
func (r *Replicator) Close() error {
	r.mu.Lock()
	r.mu.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return nil
}

// run campaigns, leads until the leadership is lost, and campaigns again,
// until Close.
func (r *Replicator) run() {
	for {
		lost, resign, err := r.elector.Campaign(r.ctx)
		if r.ctx.Err() != nil {
			if err == nil {
				resign()
			}
			return
		}
		if err != nil {
			r.log.Warn("replication leader campaign failed", "err", err)
			if !r.wait(r.cfg.Interval, nil) {
				return
			}
			continue
		}
		r.lead(lost)
		resign()
		if r.ctx.Err() != nil {
			return
		}
		r.log.Info("replication leadership lost")
	}
}

// lead runs rounds every Interval until the leadership is lost or Close.
func (r *Replicator) lead(lost <-chan struct{}) {
	r.metrics.setLeader(true)
	defer r.metrics.setLeader(false)
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	// A round stops as soon as the leadership is lost.
	stop := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Go(func() {
		select {
		case <-lost:
			cancel()
		case <-stop:
		}
	})
	defer watcher.Wait()
	defer close(stop)
	for {
		round, err := r.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.log.Warn("replication round failed", "err", err)
		case len(round.Audit.Tasks) > 0 || round.Audit.UnderReplicated > 0:
			r.log.Info("replication round", "under_replicated", round.Audit.UnderReplicated,
				"waiting", round.Audit.Waiting, "tasks", len(round.Audit.Tasks), "repaired", round.Repaired,
				"already_repaired", round.AlreadyRepaired, "ledgers_deleted", round.LedgersGone,
				"recovered", round.Recovered, "failed", round.Failed, "entries_copied", round.EntriesCopied)
		}
		if !r.wait(r.cfg.Interval, lost) {
			return
		}
	}
}

// wait waits d on the scheduler; false when Close or lost came first.
func (r *Replicator) wait(d time.Duration, lost <-chan struct{}) bool {
	fired := make(chan struct{})
	stop := r.cfg.Scheduler.AfterFunc(d, func() { close(fired) })
	select {
	case <-fired:
		return true
	case <-lost:
	case <-r.ctx.Done():
	}
	stop()
	return false
}

// RunOnce runs one round: it reads every ledger's metadata, the bookie
// registrations and the replicator's records, audits them, records which
// bookies are missing, and runs the audit's tasks (MaxConcurrentLedgers
// ledgers at a time; the tasks of one ledger in order). It fails only when
// it cannot audit; failed tasks are counted and logged, and the next round
// retries them. The leader calls it every Interval; tests call it
// directly. After Close it fails with ErrClosed.
func (r *Replicator) RunOnce(ctx context.Context) (Round, error) {
	r.mu.Lock()
	closed := r.mu.closed
	r.mu.Unlock()
	if closed {
		return Round{}, ErrClosed
	}
	start := time.Now()
	now := r.cfg.Now()
	// Ledgers first: a bookie that registers after this listing cannot be
	// named by a ledger in it, so no new ledger's bookie looks missing.
	mds, err := ledger.ListAll(ctx, r.env.Meta)
	if err != nil {
		return Round{}, fmt.Errorf("replication: audit: %w", err)
	}
	snap, err := loadSnapshot(ctx, r.kv)
	if err != nil {
		return Round{}, fmt.Errorf("replication: audit: %w", err)
	}
	view := snap.view(now, r.cfg.Grace)
	audit := Audit(mds, view)
	if err := syncMissing(ctx, r.kv, snap.missing, audit.MissingSince); err != nil {
		r.log.Warn("recording missing bookies", "err", err)
	}
	if err := syncAddresses(ctx, r.kv, snap); err != nil {
		r.log.Warn("recording bookie addresses", "err", err)
	}
	r.metrics.observeAudit(audit, now)
	round := Round{Audit: audit}
	r.runTasks(ctx, audit.Tasks, view, audit.MissingSince, &round)
	r.metrics.roundDuration.Observe(time.Since(start).Seconds())
	return round, nil
}

// runTasks runs tasks, grouped by ledger.
func (r *Replicator) runTasks(ctx context.Context, tasks []Task, view View, missing map[string]time.Time, round *Round) {
	var (
		groups [][]Task
		mu     sync.Mutex // guards round and missing
		wg     sync.WaitGroup
	)
	for _, t := range tasks {
		if n := len(groups); n > 0 && groups[n-1][0].Ledger == t.Ledger {
			groups[n-1] = append(groups[n-1], t)
		} else {
			groups = append(groups, []Task{t})
		}
	}
	avoid := map[string]bool{}
	for addr := range view.Decommissioned {
		avoid[addr] = true
	}
	record := func(t Task, res RepairResult, err error) {
		r.metrics.observeRepair(res, err)
		mu.Lock()
		defer mu.Unlock()
		round.EntriesCopied += res.EntriesCopied
		switch {
		case err != nil:
			round.Failed++
			round.Errors = append(round.Errors, err)
			r.log.Warn("repair failed; retrying next round", "task", t.String(), "err", err)
		case res.Outcome == Repaired:
			round.Repaired++
		case res.Outcome == AlreadyRepaired:
			round.AlreadyRepaired++
		case res.Outcome == LedgerGone:
			round.LedgersGone++
		}
	}
	sem := make(chan struct{}, r.cfg.MaxConcurrentLedgers)
	for _, g := range groups {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, t := range g {
				if ctx.Err() != nil {
					return
				}
				if !t.Recover {
					res, err := r.worker.repair(ctx, t, avoid)
					record(t, res, err)
					continue
				}
				// Recover, then repair the closed ledger's bad fragments.
				md, err := r.recover(ctx, t)
				switch {
				case errors.Is(err, ledger.ErrNoSuchLedger):
					record(t, RepairResult{Outcome: LedgerGone}, nil)
					continue
				case err != nil:
					record(t, RepairResult{}, err)
					continue
				}
				r.metrics.recovered.Inc()
				mu.Lock()
				round.Recovered++
				sub, _, _ := auditLedger(md, view.verdicts(missing))
				mu.Unlock()
				for _, st := range sub {
					res, err := r.worker.repair(ctx, st, avoid)
					record(st, res, err)
				}
			}
		})
	}
	wg.Wait()
}

// recover recovers an open ledger whose bookie is gone past the grace
// period, fencing its writer.
func (r *Replicator) recover(ctx context.Context, t Task) (md *ledgerpb.LedgerMetadata, err error) {
	r.log.Warn("recovering an open ledger to re-replicate it", "task", t.String())
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RecoverTimeout)
	defer cancel()
	md, err = ledger.Recover(ctx, r.env, t.Ledger)
	if err != nil && !errors.Is(err, ledger.ErrNoSuchLedger) {
		err = fmt.Errorf("replication: recovering ledger %d: %w", t.Ledger, err)
	}
	return md, err
}
