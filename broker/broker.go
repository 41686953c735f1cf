package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/drain"
	"github.com/strata-log/strata/broker/group"
	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/bytebudget"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgergrpc"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering"
)

// Broker is one broker process's state.
type Broker struct {
	cfg   Config
	log   *slog.Logger
	meta  *metaclient.Client
	clock Clock
	// closers are what Open connected to; Close closes them last.
	closers []io.Closer
	// creds is the broker's TLS (nil: plaintext): its gRPC server, and its
	// connections to metad, bookies and other brokers.
	creds   *mtls.Credentials
	env     ledger.Env
	store   partlog.Store
	metrics *metrics
	plm     *partlog.Metrics
	gm      *group.Metrics
	cache   *partlog.TailCache
	// produceBudget holds the batch bytes of the Produce requests being
	// served (--max-inflight-produce-bytes).
	produceBudget *bytebudget.Budget
	// fetchBudget bounds the bytes of fetch responses and read-ahead
	// (--max-inflight-fetch-bytes; fetchbudget.go).
	fetchBudget *fetchBudget
	// compaction: the compactor's metrics (compactor.go).
	compaction *compactionMetrics
	// tier: the object store (nil without --tier-store).
	tier        *tierState
	tierMetrics *tiering.Metrics
	started     time.Time

	brokers, topics, assignments, owners, controller *mirror
	// topicConfigs: the topics mirror's records, parsed (topicConfig).
	topicConfigs parsedTopics
	// drains mirrors the operators' drain requests (package broker/drain).
	drains *mirror
	// sec: client authentication and ACLs (security.go).
	sec *security
	// ctrl: the controller role (controller.go); passes: the background
	// work over served partitions (housekeeping.go).
	ctrl   *controller
	passes *passes

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	draining   atomic.Bool
	registered atomic.Bool
	lease      atomic.Int64 // current session's lease id, 0 without one
	node       atomic.Int32 // the broker's node id once known (nodeID)
	cluster    atomic.Value // the cluster id (string) once read (Service.ClusterID)
	topicIDs   topicIndex
	isCtrl     atomic.Bool
	stateCh    chan struct{} // registration must be rewritten

	mu    sync.Mutex
	parts map[tp]*partition
	// partsChanged wakes the ownership reconciler when a partition's
	// goroutine ended (runPartition), and endedParts names them.
	partsChanged chan struct{}
	endedParts   []tp
	// takeovers is a semaphore: at most cfg.MaxConcurrentTakeovers
	// partitions are being taken over at once (takeOver).
	takeovers chan struct{}

	peers peerConns

	pidMu             sync.Mutex
	pidNext, pidLimit int64
}

// Clock is where the broker reads the time it decides with and stamps on
// records (creation times, ages, expiries, the orphan sweep's ages). The
// loops' timers and tickers, and the hand-over wait, stay the runtime's.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the wall clock.
var SystemClock Clock = systemClock{}

// Deps are what a broker runs against. New takes them; Open builds the real
// ones (a metad client and gRPC bookies). The caller owns them: it closes
// Meta and Ledgers.Bookies after Broker.Close.
type Deps struct {
	// Meta is the metad client (required): registration, leases, the
	// mirrors, topic and partition records.
	Meta *metaclient.Client
	// Ledgers is the ledger environment partitions write through (Meta,
	// Bookies and Registry required). New sets its Logger, Metrics and Now
	// (from Clock).
	Ledgers ledger.Env
	// Clock: SystemClock when nil.
	Clock Clock
	// Logger: slog.Default() when nil.
	Logger *slog.Logger
	// Registerer receives the broker's metrics; nil: a private registry.
	Registerer prometheus.Registerer
	// Credentials are the broker's TLS (nil: plaintext): its gRPC server
	// and its connections to other brokers. Open loads them from
	// cfg.Security.
	Credentials *mtls.Credentials
}

// Validate reports a missing dependency.
func (d Deps) Validate() error {
	switch {
	case d.Meta == nil:
		return errors.New("broker: Deps.Meta is required")
	case d.Ledgers.Meta == nil || d.Ledgers.Bookies == nil || d.Ledgers.Registry == nil:
		return errors.New("broker: Deps.Ledgers needs Meta, Bookies and Registry")
	}
	return nil
}

// Open connects to metad and the bookies over gRPC and prepares the broker
// (New) with clock (nil: SystemClock); Start starts it. Close also closes
// those connections.
func Open(cfg Config, log *slog.Logger, reg prometheus.Registerer, clock Clock) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	creds, err := mtls.Load(cfg.Security.Files())
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	meta, err := metaclient.New(metaclient.Config{Endpoints: strings.Split(cfg.Metad, ","), Logger: log, Credentials: creds.Transport()})
	if err != nil {
		return nil, err
	}
	bookies := ledgergrpc.New(ledgergrpc.Options{Logger: log, Credentials: creds.Transport()})
	b, err := New(cfg, Deps{
		Meta: meta,
		Ledgers: ledger.Env{Meta: ledgermetad.NewStore(meta), Bookies: bookies,
			Registry: ledgermetad.NewRegistry(meta)},
		Logger: log, Registerer: reg, Credentials: creds, Clock: clock,
	})
	if err != nil {
		bookies.Close()
		meta.Close()
		return nil, err
	}
	b.closers = []io.Closer{bookies, meta}
	return b, nil
}

// New prepares a broker over deps; Start starts it. It does no I/O but the
// tier store's check (with cfg.TierStore).
func New(cfg Config, deps Deps) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	log, reg, clock := deps.Logger, deps.Registerer, deps.Clock
	if log == nil {
		log = slog.Default()
	}
	if clock == nil {
		clock = SystemClock
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	meta, creds := deps.Meta, deps.Credentials
	env := deps.Ledgers
	env.Logger, env.Now = log, clock.Now
	b := &Broker{
		cfg: cfg, log: log, meta: meta, creds: creds, clock: clock,
		peers:   peerConns{creds: creds},
		env:     env,
		store:   partlog.MetaStore(meta),
		started: clock.Now(),
		parts:   map[tp]*partition{},

		partsChanged: make(chan struct{}, 1),
		takeovers:    make(chan struct{}, cfg.MaxConcurrentTakeovers),
		stateCh:      make(chan struct{}, 1),

		produceBudget: bytebudget.New(cfg.MaxInflightProduceBytes),
	}
	// Takeovers recover ledgers: a stuck recovery is counted, not silent.
	b.env.Metrics = ledger.NewMetrics()
	if err := b.env.Metrics.Register(reg); err != nil {
		return nil, err
	}
	b.metrics = newMetrics(reg, b)
	b.fetchBudget = newFetchBudget(cfg.MaxInflightFetchBytes, reg)
	b.plm = partlog.NewMetrics(reg)
	b.gm = group.NewMetrics(reg)
	b.compaction = newCompactionMetrics(reg)
	b.cache = partlog.NewTailCache(cfg.TailCacheBytes, b.plm)
	b.tierMetrics = tiering.NewMetrics(reg)
	tctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.openTier(tctx); err != nil {
		return nil, err
	}
	b.brokers = newMirror(meta, brokersPrefix, log)
	b.topics = newMirror(meta, topicsPrefix, log)
	b.assignments = newMirror(meta, assignmentsPrefix, log)
	b.owners = newMirror(meta, ownersPrefix, log)
	b.controller = newMirror(meta, controllerKey, log)
	b.drains = newMirror(meta, drainsPrefix, log)
	var err error
	if b.sec, err = newSecurity(b, reg); err != nil {
		b.tier.close()
		return nil, err
	}
	b.ctrl, b.passes = &controller{b: b}, &passes{b: b}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// Start runs the mirrors and the session loop in the background.
func (b *Broker) Start() {
	for _, m := range []*mirror{b.brokers, b.topics, b.assignments, b.owners, b.controller, b.drains, b.sec.users, b.sec.acls} {
		b.goRun(m.run)
	}
	b.goRun(b.sec.followACLs)
	b.goRun(b.sessions)
	b.goRun(b.passes.reportLag)
	b.goRun(b.followTopicConfigs)
	b.goRun(b.passes.compactLoop)
	b.goRun(b.passes.retentionLoop)
	b.goRun(b.passes.tierLoop)
}

func (b *Broker) goRun(fn func(ctx context.Context)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn(b.ctx)
	}()
}

// Ready reports nil once the broker is registered and its view of metad is
// loaded.
func (b *Broker) Ready() error {
	mirrors := []*mirror{b.brokers, b.topics, b.assignments, b.owners}
	if b.creds.Enabled() {
		mirrors = append(mirrors, b.sec.users, b.sec.acls)
	}
	for _, m := range mirrors {
		if !m.isLoaded() {
			return fmt.Errorf("loading %s from metad", m.prefix)
		}
	}
	if !b.registered.Load() {
		return errors.New("not registered in metad")
	}
	return nil
}

// Drain hands every partition over before a clean shutdown: the broker
// registers as DRAINING, the controller moves its partitions, and each is
// released (ledger closed, list written) before its new owner takes it over,
// so clients see a NOT_OWNER redirect, not an error. It returns when the
// broker owns nothing or ctx ends.
func (b *Broker) Drain(ctx context.Context) {
	if !b.otherActiveBroker() {
		b.log.Info("no other active broker to hand partitions to; releasing them in place")
		return
	}
	b.draining.Store(true)
	b.signalState()
	b.log.Info("draining: handing partitions over")
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		b.mu.Lock()
		n := len(b.parts)
		b.mu.Unlock()
		if n == 0 {
			b.log.Info("drained")
			return
		}
		select {
		case <-ctx.Done():
			b.log.Warn("drain timed out", "partitions_left", n)
			return
		case <-t.C:
		}
	}
}

// otherActiveBroker reports whether another broker could take partitions:
// one ACTIVE and not drained.
func (b *Broker) otherActiveBroker() bool {
	drained := b.drainedBrokers()
	for _, info := range b.liveBrokers() {
		if info.Id != b.cfg.ID && info.State == brokerpb.BrokerState_BROKER_ACTIVE && !drained[info.Id] {
			return true
		}
	}
	return false
}

// drainedBrokers returns the ids of the brokers an operator drained, as
// mirrored.
func (b *Broker) drainedBrokers() map[string]bool {
	kvs, _ := b.drains.snapshot()
	keys := make([]string, 0, len(kvs))
	for k := range kvs {
		keys = append(keys, k)
	}
	return drain.IDs(keys)
}

// Close releases every partition still owned (cleanly when possible),
// revokes the session and disconnects.
func (b *Broker) Close() {
	b.cancel()
	b.wg.Wait()
	b.peers.close()
	b.tier.close()
	for _, c := range b.closers {
		c.Close()
	}
}

func (b *Broker) signalState() {
	select {
	case b.stateCh <- struct{}{}:
	default:
	}
}

func (b *Broker) info() *brokerpb.BrokerInfo {
	state := brokerpb.BrokerState_BROKER_ACTIVE
	if b.draining.Load() {
		state = brokerpb.BrokerState_BROKER_DRAINING
	}
	return &brokerpb.BrokerInfo{Id: b.cfg.ID, Address: b.cfg.AdvertiseAddress(), AdminAddress: b.cfg.AdminListen,
		Rack: b.cfg.Rack, State: state, StartedAtMs: b.started.UnixMilli(), KafkaAddress: b.cfg.KafkaAdvertisedAddress()}
}

// sessions holds a metad session (lease) at a time; everything the broker
// owns is tied to it. When it is lost the broker drops every partition at
// once (another broker may already be taking them over) and starts again.
func (b *Broker) sessions(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := b.session(ctx)
		if ctx.Err() != nil {
			return
		}
		b.log.Warn("metad session lost; dropped every partition, registering again", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

var errSessionLost = errors.New("broker: metad session lost")

func (b *Broker) session(ctx context.Context) error {
	sess, err := b.meta.NewSession(ctx, b.cfg.SessionTTL)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		b.registered.Store(false)
		b.lease.Store(0)
		// Every partition goroutine is a child of sctx: each closes its log
		// (a zombie's close fails harmlessly on the fenced ledger).
		owner{b}.dropAll()
		sess.Close()
	}()
	b.lease.Store(sess.Lease())
	register := func() error {
		info := b.info()
		node, err := b.nodeID(sctx)
		if err != nil {
			return err
		}
		info.NodeId = node
		value, err := proto.Marshal(info)
		if err != nil {
			return err
		}
		pctx, pcancel := context.WithTimeout(sctx, b.cfg.SessionTTL)
		defer pcancel()
		_, err = b.meta.Put(pctx, brokerKey(b.cfg.ID), value, metaclient.WithLease(sess.Lease()))
		return err
	}
	if err := register(); err != nil {
		return err
	}
	b.registered.Store(true)
	b.log.Info("registered in metad", "key", brokerKey(b.cfg.ID), "lease", sess.Lease())
	wg.Add(2)
	go func() { defer wg.Done(); b.ctrl.campaign(sctx, sess) }()
	go func() { defer wg.Done(); owner{b}.reconcileOwnership(sctx, sess) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
			return errSessionLost
		case <-b.stateCh:
			if err := register(); err != nil {
				b.log.Warn("registration update failed", "err", err)
				b.signalState()
			}
		}
	}
}

func sessionAlive(s *metaclient.Session) bool {
	select {
	case <-s.Done():
		return false
	default:
		return true
	}
}

// Credentials are the broker's TLS (nil: plaintext), for its gRPC server.
func (b *Broker) Credentials() *mtls.Credentials { return b.creds }
