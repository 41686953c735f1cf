package bookie

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgergrpc"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/ledger/replication"
	"github.com/strata-log/strata/ledger/storage"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/vfs"
)

// Bookie is a running bookie: identity checked, storage replayed, and (after
// Start) registered in metad.
type Bookie struct {
	cfg  Config
	log  *slog.Logger
	meta *metaclient.Client
	// creds is the bookie's TLS (nil: plaintext): its gRPC server, and
	// its connections to metad and to other bookies.
	creds   *mtls.Credentials
	store   *storage.Storage
	keys    *digestKeys // checks adds' digests (storage.Options.Verify)
	cookie  *bookiepb.Cookie
	reg     *registrar
	started time.Time

	// replicator is nil unless cfg.Autorecovery; bookies is its client.
	replicator *replication.Replicator
	bookies    *ledgergrpc.Client
	// decommissioned: an operator decommissioned this bookie; it
	// registers as read-only so that no new ledger lands on it.
	decommissioned atomic.Bool
	// sweeper is nil when cfg.LedgerGCInterval is 0.
	sweeper *orphanSweeper
	// gate is nil without TLS (no identities to check).
	gate *replicatorGate

	stateChanged chan struct{}
	cancel       context.CancelFunc
	wg           sync.WaitGroup
	closeOnce    sync.Once
	// draining is cancelled by Drain: the service ends its long calls.
	draining context.Context
	drain    context.CancelFunc
}

// Open checks the bookie's identity against metad (creating the cookie of a
// new bookie), then opens its storage, replaying the journal. It returns once
// the bookie can serve; call Start to register it.
func Open(ctx context.Context, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Bookie, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = log.With("component", "bookie", "bookie", cfg.ID)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	creds, err := mtls.Load(cfg.Security.Files())
	if err != nil {
		return nil, fmt.Errorf("bookie: %w", err)
	}
	meta, err := metaclient.New(metaclient.Config{Endpoints: strings.Split(cfg.Metad, ","), Logger: log, Credentials: creds.Transport()})
	if err != nil {
		return nil, err
	}
	b := &Bookie{cfg: cfg, log: log, meta: meta, creds: creds, stateChanged: make(chan struct{}, 1), started: cfg.Now()}
	b.draining, b.drain = context.WithCancel(context.Background())
	if creds.Enabled() {
		b.gate = newReplicatorGate(replication.MetaKV(meta))
	}
	if b.cookie, err = checkIdentity(ctx, meta, cfg.ID, cfg.DataDir); err != nil {
		meta.Close()
		return nil, err
	}
	log.Info("identity checked", "instance", b.cookie.InstanceId)
	var metrics *storage.Metrics
	if reg != nil {
		metrics = storage.NewMetrics()
		if err := metrics.Register(reg); err != nil {
			meta.Close()
			return nil, err
		}
	}
	if b.keys, err = newDigestKeys(ledgermetad.NewStore(meta), log, reg); err != nil {
		meta.Close()
		return nil, err
	}
	if err := b.openStorage(ctx, metrics); err != nil {
		b.keys.close()
		meta.Close()
		return nil, err
	}
	b.reg = &registrar{meta: meta, id: cfg.ID, ttl: cfg.LeaseTTL, info: b.Info, changed: b.stateChanged, log: log}
	if cfg.LedgerGCInterval > 0 {
		if err := b.newSweeper(reg); err != nil {
			b.store.Close()
			b.keys.close()
			meta.Close()
			return nil, err
		}
	}
	if cfg.Autorecovery {
		if err := b.newReplicator(reg); err != nil {
			b.store.Close()
			b.keys.close()
			meta.Close()
			return nil, err
		}
	}
	return b, nil
}

// openStorage opens the bookie's storage, replaying its journal, and
// wakes the registrar when the storage turns read-only or writable again.
func (b *Bookie) openStorage(ctx context.Context, metrics *storage.Metrics) error {
	cfg, log := b.cfg, b.log
	fsys := cfg.FS
	if fsys == nil {
		fsys = vfs.Default()
	}
	opts := storage.Options{
		FS:                         fsys,
		Dir:                        cfg.DataDir,
		JournalMaxFileBytes:        cfg.JournalMaxFileBytes,
		JournalBufferedWrites:      !cfg.JournalDirectIO,
		ReadOnlyAbove:              cfg.ReadOnlyAbove,
		WritableBelow:              cfg.WritableBelow,
		GCInterval:                 cfg.GCInterval,
		CompactMaxBytesPerSecond:   cfg.GCCompactionMaxBytesPerSecond,
		RemoveMaxBytesPerSecond:    cfg.GCRemoveMaxBytesPerSecond,
		CompactBelowLiveRatio:      cfg.GCMinorRatio,
		MajorCompactBelowLiveRatio: cfg.GCMajorRatio,
		MajorCompactInterval:       cfg.GCMajorInterval,
		MaxEntryBytes:              cfg.MaxEntryBytes,
		FenceTombstoneTTL:          cfg.FenceTombstoneTTL,
		Now:                        cfg.Now,
		Verify:                     b.keys.verify,
		OnFatal:                    b.fatal,
		Logger:                     log,
		Metrics:                    metrics,
	}
	start := time.Now()
	var err error
	if b.store, err = storage.Open(ctx, opts); err != nil {
		return fmt.Errorf("bookie: open storage: %w", err)
	}
	log.Info("storage open", "replay", time.Since(start).Round(time.Millisecond), "limbo", b.store.Limbo())
	b.store.OnStateChange(func(readOnly bool) {
		log.Warn("bookie state changed", "read_only", readOnly)
		select {
		case b.stateChanged <- struct{}{}:
		default:
		}
	})
	return nil
}

// newSweeper prepares this bookie's orphan sweep (started by Start).
func (b *Bookie) newSweeper(reg prometheus.Registerer) error {
	metrics := NewSweepMetrics()
	if reg != nil {
		if err := metrics.Register(reg); err != nil {
			return err
		}
	}
	b.sweeper = &orphanSweeper{
		interval: b.cfg.LedgerGCInterval, grace: b.cfg.LedgerGCGrace,
		held: b.store, meta: ledgermetad.NewStore(b.meta),
		trust: cookieCheck(b.meta, b.cfg.ID, b.cookie.InstanceId),
		now:   b.cfg.Now, log: b.log.With("task", "orphan-sweep"), metrics: metrics,
	}
	return nil
}

// newReplicator prepares this bookie's re-replication candidate (started
// by Start).
func (b *Bookie) newReplicator(reg prometheus.Registerer) error {
	metrics := replication.NewMetrics()
	ledgerMetrics := ledger.NewMetrics() // the replicator recovers open ledgers of lost bookies
	if reg != nil {
		if err := errors.Join(metrics.Register(reg), ledgerMetrics.Register(reg)); err != nil {
			return err
		}
	}
	b.bookies = ledgergrpc.New(ledgergrpc.Options{Logger: b.log, Credentials: b.creds.Transport()})
	env := ledger.Env{Meta: ledgermetad.NewStore(b.meta), Bookies: b.bookies, Registry: ledgermetad.NewRegistry(b.meta),
		Logger: b.log, Metrics: ledgerMetrics, Now: b.cfg.Now}
	elector := &replication.MetadElector{Meta: b.meta, ID: b.cfg.ID, TTL: b.cfg.LeaseTTL, Logger: b.log}
	r, err := replication.New(replication.Config{
		ID: b.cfg.ID, Interval: b.cfg.AutorecoveryInterval, Grace: b.cfg.AutorecoveryGrace, Logger: b.log, Metrics: metrics,
		Now: b.cfg.Now,
	}, env, replication.MetaKV(b.meta), elector)
	if err != nil {
		b.bookies.Close()
		return err
	}
	b.replicator = r
	return nil
}

// fatal stops the process: the journal could not write or fsync, and the
// bookie must not go on acknowledging (an fsync error is never retried).
func (b *Bookie) fatal(err error) {
	b.log.Error("fatal storage error: stopping", "err", err)
	fatalExit(err)
}

// fatalExit is replaced in tests.
var fatalExit = func(err error) { panic(fmt.Sprintf("bookie: fatal storage error: %v", err)) }

// SetFatalHandler replaces what happens on a fatal storage error (cmd/bookie
// exits the process).
func SetFatalHandler(f func(error)) { fatalExit = f }

// Service is the gRPC service to register.
func (b *Bookie) Service() bookiepb.BookieServer {
	return &service{store: b.store, info: b.Info, draining: b.draining}
}

// StopTimeout is how long the gRPC server's graceful stop should wait for
// the bookie's calls after Drain. Writers' add streams never end on their
// own: Drain ends the busy ones, and an idle one holds nothing to wait for.
const StopTimeout = time.Second

// Drain starts a clean shutdown: the service ends its long calls, so that
// the gRPC server can stop at once (node.Serving.Drain). Each add stream
// answers the adds it has in flight and ends (UNAVAILABLE, retryable) at
// its next add, and long-polled LAC reads return what they have. The
// writers replace the bookie as for any failed add.
func (b *Bookie) Drain(context.Context) {
	b.log.Info("draining: ending add streams and long polls")
	b.drain()
}

// Start registers the bookie in metad and keeps it registered until Close,
// watches its decommission record (a decommissioned bookie registers as
// read-only), starts the orphan sweep unless cfg.LedgerGCInterval is 0, and
// starts its re-replication candidate when cfg.Autorecovery.
func (b *Bookie) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.reg.run(ctx)
	}()
	b.wg.Go(func() {
		replication.WatchDecommission(ctx, b.meta, b.cfg.ID, func(on bool) {
			if b.decommissioned.Swap(on) != on {
				b.log.Warn("decommission changed", "decommissioned", on)
				select {
				case b.stateChanged <- struct{}{}:
				default:
				}
			}
		})
	})
	if b.sweeper != nil {
		b.wg.Go(func() { b.sweeper.run(ctx) })
	}
	if b.replicator != nil {
		if err := b.replicator.Start(); err != nil {
			b.log.Error("replicator not started", "err", err)
		}
	}
}

// Info describes the bookie as it registers itself.
func (b *Bookie) Info() *bookiepb.BookieInfo {
	du := b.store.DiskUsage()
	st := bookiepb.BookieState_WRITABLE
	if b.store.ReadOnly() || b.decommissioned.Load() {
		st = bookiepb.BookieState_READ_ONLY
	}
	return &bookiepb.BookieInfo{
		Id: b.cfg.ID, Address: b.cfg.AdvertiseAddress(), AdminAddress: b.cfg.AdminListen, State: st,
		FreeBytes: du.FreeBytes, TotalBytes: du.TotalBytes, Rack: b.cfg.Rack, InstanceId: b.cookie.InstanceId,
		RegisteredAtMs: b.started.UnixMilli(),
	}
}

// Ready reports nil once the bookie is registered in metad.
func (b *Bookie) Ready() error {
	if b.reg == nil || !b.reg.registered.Load() {
		return errors.New("not registered in metad yet")
	}
	return nil
}

// Credentials are the bookie's TLS (nil: plaintext), for its gRPC server.
func (b *Bookie) Credentials() *mtls.Credentials { return b.creds }

// ServerOptions are interceptors for the bookie's gRPC server, to install
// after internal/authz's: with TLS, a bookie's certificate adds entries
// and fences ledgers only as the elected replicator (G1).
func (b *Bookie) ServerOptions() []grpc.ServerOption {
	if b.gate == nil {
		return nil
	}
	return b.gate.interceptors()
}

// Close deregisters the bookie and closes its storage. The replicator
// (which resigns its leadership) and the registration stop side by side:
// each revokes a metad lease, which takes up to metad's request timeout
// when metad is slow, and in turn they would add up.
func (b *Bookie) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.drain()
		var replicator sync.WaitGroup
		if b.replicator != nil {
			replicator.Go(func() {
				b.replicator.Close()
				b.bookies.Close()
			})
		}
		if b.cancel != nil {
			b.cancel()
		}
		b.wg.Wait()
		replicator.Wait()
		storeErr := b.store.Close()
		b.keys.close()
		err = errors.Join(storeErr, b.meta.Close())
	})
	return err
}
