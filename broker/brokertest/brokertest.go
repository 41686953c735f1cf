package brokertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/kafka"
	"github.com/strata-log/strata/internal/grpcserve"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/metad"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// Options shape a test cluster. The zero value is one broker over three
// bookies.
type Options struct {
	// Brokers is how many brokers to start (1 when 0). They are named
	// IDPrefix1, IDPrefix2, ...
	Brokers int
	// IDPrefix names the brokers ("k" when empty: k1, k2, ...).
	IDPrefix string
	// Bookies is how many in-memory bookies to register (3 when 0).
	Bookies int
	// OffsetsPartitions of __consumer_offsets (1 when 0).
	OffsetsPartitions int32
	// Configure edits each broker's config before it starts (index from 0).
	Configure func(i int, cfg *broker.Config)
	// Interceptor, when set, wraps every unary call broker i (from 0)
	// serves, after the broker's own interceptors: the fault hook (fail,
	// hold or count calls).
	Interceptor func(i int) grpc.UnaryServerInterceptor
	// Logger for metad and the brokers (discarded when nil).
	Logger *slog.Logger
	// ConfigureMetad edits metad's config before it starts.
	ConfigureMetad func(cfg *metad.Config)
	// Kafka gives every broker a Kafka protocol listener on a loopback
	// port (Broker.KafkaAddr).
	Kafka bool
}

// Cluster is a running test cluster.
type Cluster struct {
	t testing.TB
	// Meta is a metad client for the test's own use.
	Meta *metaclient.Client
	// Bookies are the in-memory bookies every broker writes to.
	Bookies *ledgertest.FakeBookies
	// Ledgers is the ledger metadata store the brokers share.
	Ledgers *ledgertest.FakeMetadata
	// Brokers in start order.
	Brokers []*Broker

	metadAddr string
	opts      Options
	log       *slog.Logger
	registry  *ledgertest.FakeRegistry

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn // by broker address
}

// Broker is one running broker.
type Broker struct {
	*broker.Broker
	ID   string
	Addr string
	// KafkaAddr is the Kafka listener's address (Options.Kafka).
	KafkaAddr string

	meta    *metaclient.Client
	srv     *grpcserve.Server
	kafka   *kafka.Server
	done    chan struct{}
	once    sync.Once
	stopped atomic.Bool
}

// Start starts metad, the bookies and the brokers, and waits until every
// broker is ready and a controller is elected (BT1).
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Brokers == 0 {
		opts.Brokers = 1
	}
	if opts.IDPrefix == "" {
		opts.IDPrefix = "k"
	}
	if opts.Bookies == 0 {
		opts.Bookies = 3
	}
	if opts.OffsetsPartitions == 0 {
		opts.OffsetsPartitions = 1
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Cluster{t: t, opts: opts, log: log, Ledgers: ledgertest.NewFakeMetadata()}
	addrs := make([]string, opts.Bookies)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("bookie-%d", i)
	}
	c.Bookies = ledgertest.NewFakeBookies(addrs...)
	c.registry = ledgertest.NewFakeRegistry(addrs...)
	c.startMetad()
	meta, err := metaclient.New(metaclient.Config{Endpoints: []string{c.metadAddr}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { meta.Close() })
	c.Meta = meta
	for i := range opts.Brokers {
		c.StartBroker(i)
	}
	c.waitUntil(30*time.Second, "brokers ready and a controller elected", func() error {
		for _, b := range c.Brokers {
			if err := b.Ready(); err != nil {
				return fmt.Errorf("%s: %w", b.ID, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := c.Client(0).Metadata(ctx, &brokerpb.MetadataRequest{})
		if err != nil {
			return err
		}
		if resp.ControllerId == "" || len(resp.Brokers) < len(c.Brokers) {
			return errors.New("no controller yet")
		}
		return nil
	})
	return c
}

// startMetad runs a one-member metad on a temp dir, serving gRPC on a
// loopback port.
func (c *Cluster) startMetad() {
	t := c.t
	dir := t.TempDir()
	var (
		srv  *metad.Server
		gsrv *grpcserve.Server
		err  error
	)
	for attempt := 0; ; attempt++ {
		cfg := metad.DefaultConfig()
		cfg.ID, cfg.DataDir, cfg.NoSync = "m1", fmt.Sprintf("%s/%d", dir, attempt), true
		// AdminListen is only advertised: no admin server runs in process,
		// so nothing listens on it (and on no ephemeral port).
		cfg.RaftListen, cfg.Listen, cfg.AdminListen = pickAddr(), pickAddr(), "127.0.0.1:0"
		cfg.Peers = "m1=" + cfg.RaftListen
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
		if c.opts.ConfigureMetad != nil {
			c.opts.ConfigureMetad(&cfg)
		}
		srv, err = metad.Open(cfg, c.log, nil)
		if err == nil {
			gsrv, err = grpcserve.New(grpcserve.Config{Addr: cfg.Listen}, srv.ServerOptions()...)
			if err != nil {
				srv.Close()
			}
		}
		if err == nil {
			c.metadAddr = cfg.Listen
			break
		}
		if attempt == 20 {
			t.Fatalf("brokertest: starting metad: %v", err)
		}
	}
	metadpb.RegisterMetadServer(gsrv.Server, srv.Service())
	done := make(chan struct{})
	go func() { defer close(done); _ = gsrv.Serve() }()
	t.Cleanup(func() {
		gsrv.Stop(time.Second)
		<-done
		srv.Close()
	})
	c.waitUntil(10*time.Second, "metad leader", srv.Ready)
}

// StartBroker starts broker i (from 0) of the cluster's options, or a new
// one with i == len(c.Brokers), and returns it without waiting for it to
// be ready.
func (c *Cluster) StartBroker(i int) *Broker {
	t := c.t
	t.Helper()
	id := c.opts.IDPrefix + strconv.Itoa(i+1)
	meta, err := metaclient.New(metaclient.Config{Endpoints: []string{c.metadAddr}, Logger: c.log})
	if err != nil {
		t.Fatal(err)
	}
	var (
		b    *broker.Broker
		gsrv *grpcserve.Server
		ks   *kafka.Server
		addr string
		cfg  broker.Config
	)
	for attempt := 0; ; attempt++ {
		cfg = broker.DefaultConfig()
		cfg.ID, cfg.Metad = id, c.metadAddr
		cfg.Listen, cfg.AdminListen = pickAddr(), "127.0.0.1:0" // advertised only, as for metad
		if c.opts.Kafka {
			cfg.KafkaListen = pickAddr()
		}
		cfg.SessionTTL = 2 * time.Second
		cfg.OffsetsPartitions = c.opts.OffsetsPartitions
		if c.opts.Configure != nil {
			c.opts.Configure(i, &cfg)
		}
		b, err = broker.New(cfg, broker.Deps{
			Meta:    meta,
			Ledgers: ledger.Env{Meta: c.Ledgers, Bookies: c.Bookies, Registry: c.registry, Placement: ledger.Ordered},
			Logger:  c.log.With("broker", id),
		})
		if err != nil {
			t.Fatalf("brokertest: broker %s: %v", id, err)
		}
		opts := b.ServerOptions()
		if c.opts.Interceptor != nil {
			opts = append(opts, grpc.ChainUnaryInterceptor(c.opts.Interceptor(i)))
		}
		gsrv, err = grpcserve.New(grpcserve.Config{Addr: cfg.Listen}, opts...)
		if err == nil {
			if ks, err = kafka.Listen(b, cfg, nil, c.log.With("broker", id)); err != nil {
				gsrv.Stop(0)
			}
		}
		if err == nil {
			addr = cfg.Listen
			break
		}
		b.Close()
		if attempt == 20 {
			t.Fatalf("brokertest: broker %s: %v", id, err)
		}
	}
	brokerpb.RegisterBrokerServer(gsrv.Server, b.GRPC())
	tb := &Broker{Broker: b, ID: id, Addr: addr, KafkaAddr: cfg.KafkaListen, meta: meta, srv: gsrv, kafka: ks, done: make(chan struct{})}
	go func() { defer close(tb.done); _ = gsrv.Serve() }()
	b.Start()
	t.Cleanup(tb.Stop)
	for len(c.Brokers) <= i {
		c.Brokers = append(c.Brokers, nil)
	}
	c.Brokers[i] = tb
	return tb
}

// Stop stops the broker abruptly for its clients (the server stops, the
// broker closes: its session is revoked and its partitions move). Safe to
// call twice.
func (b *Broker) Stop() {
	b.once.Do(func() {
		b.stopped.Store(true)
		if b.kafka != nil {
			b.kafka.Close()
		}
		b.srv.Server.Stop()
		<-b.done
		b.Close()
		b.meta.Close()
	})
}

// Addrs are the brokers' addresses, in start order.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, b := range c.Brokers {
		out = append(out, b.Addr)
	}
	return out
}

// KafkaAddrs are the brokers' Kafka listeners (Options.Kafka), in start
// order.
func (c *Cluster) KafkaAddrs() []string {
	var out []string
	for _, b := range c.Brokers {
		out = append(out, b.KafkaAddr)
	}
	return out
}

// Addr is the first broker's address.
func (c *Cluster) Addr() string { return c.Brokers[0].Addr }

// Client returns a Broker service client of broker i (one connection per
// broker, closed at cleanup). Safe for concurrent use.
func (c *Cluster) Client(i int) brokerpb.BrokerClient {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	addr := c.Brokers[i].Addr
	if conn := c.conns[addr]; conn != nil {
		return brokerpb.NewBrokerClient(conn)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err) // only a malformed target fails here
	}
	if c.conns == nil {
		c.conns = map[string]*grpc.ClientConn{}
		c.t.Cleanup(func() {
			c.connMu.Lock()
			defer c.connMu.Unlock()
			for _, conn := range c.conns {
				conn.Close()
			}
		})
	}
	c.conns[addr] = conn
	return brokerpb.NewBrokerClient(conn)
}

// CreateTopic creates a topic and waits until every partition is served
// (BT1).
func (c *Cluster) CreateTopic(name string, partitions int32, configs map[string]string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client(0).CreateTopic(ctx, &brokerpb.CreateTopicRequest{Name: name, Partitions: partitions, Configs: configs}); err != nil {
		c.t.Fatalf("brokertest: create topic %s: %v", name, err)
	}
	c.WaitServed(name)
}

// WaitServed waits until every partition of each topic has an owner.
func (c *Cluster) WaitServed(topics ...string) {
	c.t.Helper()
	cl := c.Client(0)
	c.waitUntil(30*time.Second, "partitions of "+strings.Join(topics, ",")+" served", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := cl.Metadata(ctx, &brokerpb.MetadataRequest{Topics: topics})
		if err != nil {
			return err
		}
		for _, tm := range resp.Topics {
			if tm.Error != nil {
				return errors.New(tm.Error.Message)
			}
			for _, pm := range tm.Partitions {
				if pm.OwnerId == "" {
					return fmt.Errorf("%s/%d has no owner", tm.Name, pm.Partition)
				}
			}
		}
		return nil
	})
}

// assignmentsPrefix is where the controller writes its decisions
// (broker/doc.go, "State in metad").
const assignmentsPrefix = "/strata/assignments/"

// MovePartition assigns a partition to broker to (index from 0) as the
// controller would, and waits until that broker serves it. Like the
// controller (broker/placement.go, PL3) it moves only a partition that is
// served: it first waits for any hand-over under way to finish, since an
// assignment that changes mid-takeover cancels the takeover. The write is
// a compare-and-set (epoch+1, on the version read), so a move racing the
// controller's fails with metaclient.ErrVersionConflict. The controller
// may move the partition again later to balance the brokers. Safe to call
// from any goroutine.
func (c *Cluster) MovePartition(topic string, partition int32, to int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := fmt.Sprintf("%s%s/%d", assignmentsPrefix, topic, partition)
	var (
		a       brokerpb.Assignment
		version int64
	)
	err := testwait.Poll(30*time.Second, fmt.Sprintf("%s/%d served before the move", topic, partition), func() error {
		kv, err := c.Meta.Get(ctx, key)
		if err != nil {
			return err
		}
		if err := proto.Unmarshal(kv.Value, &a); err != nil {
			return err
		}
		version = kv.Version
		if o := c.ownership(topic, partition); o.GetBrokerId() != a.BrokerId || o.GetEpoch() != a.Epoch {
			return fmt.Errorf("assigned to %s at epoch %d, owner %s at epoch %d", a.BrokerId, a.Epoch, o.GetBrokerId(), o.GetEpoch())
		}
		return nil
	})
	if err != nil {
		return err
	}
	target := c.Brokers[to].ID
	if a.BrokerId != target {
		value, err := proto.Marshal(&brokerpb.Assignment{BrokerId: target, Epoch: a.Epoch + 1})
		if err != nil {
			return err
		}
		if _, err := c.Meta.Put(ctx, key, value, metaclient.WithExpectedVersion(version)); err != nil {
			return err
		}
	}
	return testwait.Poll(30*time.Second, fmt.Sprintf("%s/%d served by %s", topic, partition, target), func() error {
		if id, _ := c.Owner(topic, partition); id != target {
			return fmt.Errorf("owner %q", id)
		}
		return nil
	})
}

// ownersPrefix is where owners publish what they serve (broker/doc.go).
const ownersPrefix = "/strata/owners/"

// Owner returns the id and address of the broker serving a partition, from
// its ownership record in metad ("" when none): the truth, whatever a
// test's interceptor makes Metadata answer.
func (c *Cluster) Owner(topic string, partition int32) (id, addr string) {
	o := c.ownership(topic, partition)
	return o.GetBrokerId(), o.GetAddress()
}

// ownership is a partition's ownership record (nil when none).
func (c *Cluster) ownership(topic string, partition int32) *brokerpb.Ownership {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := c.Meta.Get(ctx, fmt.Sprintf("%s%s/%d", ownersPrefix, topic, partition))
	if err != nil {
		return nil
	}
	var o brokerpb.Ownership
	if proto.Unmarshal(kv.Value, &o) != nil {
		return nil
	}
	return &o
}

func (c *Cluster) waitUntil(timeout time.Duration, what string, cond func() error) {
	c.t.Helper()
	testwait.UntilNil(c.t, timeout, "brokertest: "+what, cond)
}

// pickAddr returns a loopback address with a port in 22000-22999 that was
// free a moment ago (BT2); callers retry when it is taken by then.
func pickAddr() string {
	for {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(22000+rand.IntN(1000)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		return addr
	}
}
