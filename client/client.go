package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/scram"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Defaults for Config's zero fields.
const (
	DefaultRequestTimeout = 30 * time.Second
	DefaultMetadataMaxAge = 30 * time.Second
)

// Config configures a Client.
type Config struct {
	// Brokers are bootstrap broker addresses (host:port); any one that
	// answers is enough. At least one.
	Brokers  []string
	ClientID string
	// RequestTimeout bounds one attempt of one RPC. Default 30s.
	RequestTimeout time.Duration
	// MetadataMaxAge: cached partition owners older than this are
	// refreshed on next use. Default 30s.
	MetadataMaxAge time.Duration
	// Logger receives retries and routing changes at debug level.
	// Default: discard.
	Logger *slog.Logger
	// TLSCAFile, TLSCertFile and TLSKeyFile, all three or none, connect
	// over mutual TLS: the CA bundle the brokers' certificates must chain
	// to, and this client's certificate and key (PEM files, read again
	// when they change, for the next connection). None: plaintext.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// User and Password log in as User:USER (the broker checks the
	// password against the salted hash metad keeps), sent with every call.
	// They need TLS: TLSCAFile alone is enough (no client certificate);
	// with a certificate too, the password names the principal. The
	// client never sends a password over plaintext.
	User, Password string
}

func (c Config) withDefaults() Config {
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MetadataMaxAge <= 0 {
		c.MetadataMaxAge = DefaultMetadataMaxAge
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Brokers = append([]string(nil), c.Brokers...)
	return c
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("client: config: no brokers")
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("client: config: broker %q: %w", b, err)
		}
	}
	if (c.User != "") != (c.Password != "") {
		return errors.New("client: config: User and Password go together")
	}
	if c.User != "" && c.TLSCAFile == "" {
		return errors.New("client: config: a password is sent over TLS only: set TLSCAFile")
	}
	if c.User != "" && c.TLSCertFile == "" && c.TLSKeyFile == "" {
		// TLS without a client certificate: the password authenticates.
	} else if set := btoi(c.TLSCAFile != "") + btoi(c.TLSCertFile != "") + btoi(c.TLSKeyFile != ""); set != 0 && set != 3 {
		return fmt.Errorf("client: config: TLS needs a CA, a certificate and a key file (got %q, %q, %q)",
			c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile)
	}
	if c.RequestTimeout < 0 || c.MetadataMaxAge < 0 {
		return errors.New("client: config: negative duration")
	}
	return nil
}

func (c Config) String() string {
	return fmt.Sprintf("brokers=%v client_id=%q request_timeout=%s metadata_max_age=%s tls=%t user=%q",
		c.Brokers, c.ClientID, c.RequestTimeout, c.MetadataMaxAge, c.TLSCAFile != "", c.User)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Client holds connections to brokers and a cache of which broker owns
// which partition. It is safe for concurrent use; producers and consumers
// made from it share both.
type Client struct {
	cfg Config
	log *slog.Logger
	// creds secure every connection (nil: plaintext, unless transport).
	creds *mtls.Credentials
	// transport, when not nil, replaces creds: TLS without a client
	// certificate, for a password login.
	transport credentials.TransportCredentials

	// refreshSem (one slot) serializes metadata refreshes so a burst of
	// misses makes one Metadata call. Waiting for it ends with the
	// waiter's ctx, and its holder keeps it at most RequestTimeout: a
	// caller without a deadline, with no broker answering, held a mutex
	// here for ever, and every other refresh (and the Close that waits
	// for them) with it.
	refreshSem chan struct{}

	mu struct {
		sync.Mutex
		closed  bool
		conns   map[string]*grpc.ClientConn
		topics  map[string]*topicInfo
		brokers []string // addresses learned from metadata
		next    int      // rotation over bootstrap+learned addresses
		// unreachable holds, by address, until when nextAddr passes over
		// a broker whose last call timed out or found no connection: a
		// broker cut off or paused answers nothing, and each metadata
		// refresh sent to it would cost a whole RequestTimeout.
		unreachable map[string]time.Time
	}
}

// topicInfo is the cached metadata of one topic. It is immutable once in
// Client.mu.topics (changes replace it), so it may be read without the
// lock by whoever got it.
type topicInfo struct {
	owners   []string // owner address per partition; "" = none serving
	internal bool
	fetched  time.Time
	stale    bool
}

// New returns a client after one successful Metadata call to any of
// cfg.Brokers (retried until ctx is done).
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg.withDefaults(), refreshSem: make(chan struct{}, 1)}
	if cfg.TLSCertFile != "" {
		creds, err := mtls.Load(pki.Files{Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile, CA: cfg.TLSCAFile})
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		c.creds = creds
	} else if cfg.User != "" {
		t, err := caOnlyTLS(cfg.TLSCAFile)
		if err != nil {
			return nil, err
		}
		c.transport = t
	}
	c.log = c.cfg.Logger.With("component", "client")
	c.mu.conns = map[string]*grpc.ClientConn{}
	c.mu.topics = map[string]*topicInfo{}
	c.mu.unreachable = map[string]time.Time{}
	if _, err := c.Metadata(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes every connection. Producers and consumers made from c must
// be closed first.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil
	}
	c.mu.closed = true
	var errs []error
	for _, cc := range c.mu.conns {
		errs = append(errs, cc.Close())
	}
	c.mu.conns = nil
	return errors.Join(errs...)
}

func (c *Client) dialOptions() []grpc.DialOption {
	bc := backoff.DefaultConfig
	bc.BaseDelay = 100 * time.Millisecond
	bc.MaxDelay = 3 * time.Second
	transport := c.transport
	if transport == nil {
		transport = c.creds.Transport()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(transport),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 5 * time.Second}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	}
	if c.cfg.User != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(passwordCredentials{user: c.cfg.User, password: c.cfg.Password}))
	}
	if c.cfg.ClientID != "" {
		opts = append(opts, grpc.WithUserAgent("strata-client/"+c.cfg.ClientID))
	}
	return append(opts, grpcopts.DialOptions()...)
}

// broker returns a stub on the (shared) connection to addr.
func (c *Client) broker(addr string) (brokerpb.BrokerClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return nil, ErrClosed
	}
	cc, ok := c.mu.conns[addr]
	if !ok {
		var err error
		if cc, err = grpc.NewClient(addr, c.dialOptions()...); err != nil {
			return nil, fmt.Errorf("client: broker %s: %w", addr, err)
		}
		c.mu.conns[addr] = cc
	}
	return brokerpb.NewBrokerClient(cc), nil
}

// nextAddr rotates over the bootstrap and learned broker addresses,
// passing over those found unreachable lately while another remains.
func (c *Client) nextAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := append(append([]string(nil), c.cfg.Brokers...), c.mu.brokers...)
	now := time.Now()
	for range all {
		c.mu.next++
		addr := all[c.mu.next%len(all)]
		if until, ok := c.mu.unreachable[addr]; !ok || now.After(until) {
			return addr
		}
	}
	c.mu.next++
	return all[c.mu.next%len(all)]
}

// noteCall records how a call to addr went, for nextAddr: a call that
// timed out or found the broker unavailable without the broker saying so
// (no error details: the broker did not answer) marks addr unreachable
// for a RequestTimeout; any answer clears the mark.
func (c *Client) noteCall(addr string, err error) {
	unreachable := err != nil && rpcerror.Info(err) == nil &&
		(status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded)
	if err != nil && !unreachable {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if unreachable {
		c.mu.unreachable[addr] = time.Now().Add(c.cfg.RequestTimeout)
	} else {
		delete(c.mu.unreachable, addr)
	}
}

// anyBroker runs call on some broker, moving to the next address and
// backing off on retryable failures until ctx is done.
func (c *Client) anyBroker(ctx context.Context, call func(context.Context, brokerpb.BrokerClient) error) error {
	bo := newBackoff(50*time.Millisecond, time.Second)
	addr := c.nextAddr()
	for {
		stub, err := c.broker(addr)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		err = call(actx, stub)
		cancel()
		if ctx.Err() == nil {
			c.noteCall(addr, err)
		}
		if err == nil {
			return nil
		}
		if !retryableCall(err) {
			return classify(err)
		}
		if e := ctxErr(ctx, err); e != nil {
			return e
		}
		c.log.Debug("retrying broker call", "broker", addr, "err", err)
		if info := rpcerror.Info(err); info != nil && info.Redirect != "" {
			addr = info.Redirect
		} else {
			addr = c.nextAddr()
		}
		// The call's error, not the sleep's: it says why (a refused TLS
		// handshake, a broker down).
		if ctxtime.Sleep(ctx, bo.next()) != nil {
			return ctxErr(ctx, err)
		}
	}
}

// refresh fetches metadata for topics (all when empty) and updates the
// cache. Topics that do not exist are removed from the cache.
func (c *Client) refresh(ctx context.Context, topics ...string) (*brokerpb.MetadataResponse, error) {
	var resp *brokerpb.MetadataResponse
	err := c.anyBroker(ctx, func(ctx context.Context, b brokerpb.BrokerClient) error {
		var err error
		resp, err = b.Metadata(ctx, &brokerpb.MetadataRequest{Topics: topics})
		return err
	})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.brokers = c.mu.brokers[:0]
	for _, b := range resp.Brokers {
		if b.Address != "" {
			c.mu.brokers = append(c.mu.brokers, b.Address)
		}
	}
	for _, t := range resp.Topics {
		if t.Error != nil {
			delete(c.mu.topics, t.Name)
			continue
		}
		ti := &topicInfo{internal: t.Internal, fetched: now}
		for _, p := range t.Partitions {
			if p.Partition < 0 || p.Partition > 1<<20 {
				continue
			}
			for int(p.Partition) >= len(ti.owners) {
				ti.owners = append(ti.owners, "")
			}
			ti.owners[p.Partition] = p.OwnerAddress
		}
		c.mu.topics[t.Name] = ti
	}
	return resp, nil
}

// topic returns the cached metadata of name, refreshing it when missing,
// stale or older than MetadataMaxAge.
func (c *Client) topic(ctx context.Context, name string) (*topicInfo, error) {
	if ti := c.freshTopic(name); ti != nil {
		return ti, nil
	}
	select {
	case c.refreshSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.refreshSem }()
	if ti := c.freshTopic(name); ti != nil { // another caller refreshed it
		return ti, nil
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := c.refresh(rctx, name)
	if err != nil {
		return nil, err
	}
	for _, t := range resp.Topics {
		if t.Name == name && t.Error != nil {
			return nil, partitionError(t.Error)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ti := c.mu.topics[name]
	if ti == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownTopic, name)
	}
	return ti, nil
}

func (c *Client) freshTopic(name string) *topicInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	ti := c.mu.topics[name]
	if ti == nil || ti.stale || time.Since(ti.fetched) > c.cfg.MetadataMaxAge {
		return nil
	}
	return ti
}

// partitionCount returns the number of partitions of topic.
func (c *Client) partitionCount(ctx context.Context, topic string) (int32, error) {
	ti, err := c.topic(ctx, topic)
	if err != nil {
		return 0, err
	}
	return int32(len(ti.owners)), nil
}

// owner returns the address of tp's owner, waiting (with metadata
// refreshes) while the partition has none, until ctx is done.
func (c *Client) owner(ctx context.Context, tp TopicPartition) (string, error) {
	bo := newBackoff(20*time.Millisecond, 500*time.Millisecond)
	for {
		ti, err := c.topic(ctx, tp.Topic)
		if err != nil {
			return "", err
		}
		if tp.Partition < 0 || int(tp.Partition) >= len(ti.owners) {
			return "", fmt.Errorf("%w: %s (topic has %d)", ErrUnknownPartition, tp, len(ti.owners))
		}
		if addr, _ := c.cachedOwner(tp); addr != "" {
			return addr, nil
		}
		c.invalidate(tp.Topic)
		if err := ctxtime.Sleep(ctx, bo.next()); err != nil {
			return "", fmt.Errorf("client: %s has no owner: %w", tp, err)
		}
	}
}

// cachedOwner returns tp's owner from the cache without blocking: the last
// one known, even when the topic is marked stale (it is a hint: a broker
// that no longer owns tp redirects, a dead one fails and is retried), ""
// when none is known. refresh is true when the caller should refresh the
// topic's metadata (in the background, using addr meanwhile). Keeping the
// hint matters: the cache is shared, and a stale mark set by one user (a
// producer that saw an error) must not stop the others until a refresh
// ends.
func (c *Client) cachedOwner(tp TopicPartition) (addr string, refresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ti := c.mu.topics[tp.Topic]
	if ti == nil || tp.Partition < 0 || int(tp.Partition) >= len(ti.owners) {
		return "", true
	}
	addr = ti.owners[tp.Partition]
	return addr, addr == "" || ti.stale || time.Since(ti.fetched) > c.cfg.MetadataMaxAge
}

// setOwner records a redirect: addr owns tp now.
func (c *Client) setOwner(tp TopicPartition, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ti := c.mu.topics[tp.Topic]; ti != nil && tp.Partition >= 0 && int(tp.Partition) < len(ti.owners) {
		if ti.owners[tp.Partition] == addr {
			return
		}
		c.log.Debug("partition owner moved", "partition", tp.String(), "from", ti.owners[tp.Partition], "to", addr)
		moved := *ti // copy on write: callers hold ti without c.mu
		moved.owners = slices.Clone(ti.owners)
		moved.owners[tp.Partition] = addr
		c.mu.topics[tp.Topic] = &moved
	}
}

// invalidate marks topic's metadata stale: the next use refreshes it.
func (c *Client) invalidate(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ti := c.mu.topics[topic]; ti != nil && !ti.stale {
		stale := *ti // copy on write: callers hold ti without c.mu
		stale.stale = true
		c.mu.topics[topic] = &stale
	}
}

// routeError updates the cache after a partition request failed with err:
// follows a NOT_OWNER redirect, otherwise marks the topic stale.
func (c *Client) routeError(tp TopicPartition, err error) {
	info := rpcerror.Info(err)
	if info != nil && info.Reason == rpcerror.ReasonNotOwner && info.Redirect != "" {
		c.setOwner(tp, info.Redirect)
		return
	}
	c.invalidate(tp.Topic)
}

// onOwner runs call at tp's owner, following redirects and retrying
// retryable failures until ctx is done.
func (c *Client) onOwner(ctx context.Context, tp TopicPartition, call func(context.Context, brokerpb.BrokerClient) error) error {
	bo := newBackoff(20*time.Millisecond, time.Second)
	for {
		addr, err := c.owner(ctx, tp)
		if err != nil {
			return err
		}
		stub, err := c.broker(addr)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		err = call(actx, stub)
		cancel()
		if ctx.Err() == nil {
			c.noteCall(addr, err)
		}
		if err == nil {
			return nil
		}
		if !retryableCall(err) && rpcerror.Reason(err) != rpcerror.ReasonNotOwner {
			return classify(err)
		}
		if e := ctxErr(ctx, err); e != nil {
			return e
		}
		c.routeError(tp, err)
		if info := rpcerror.Info(err); info != nil && info.Redirect != "" {
			continue // go straight to the new owner
		}
		// The call's error, not the sleep's: it says why (a refused TLS
		// handshake, a broker down).
		if ctxtime.Sleep(ctx, bo.next()) != nil {
			return ctxErr(ctx, err)
		}
	}
}

// backoffState yields exponentially growing waits with jitter.
type backoffState struct{ cur, max time.Duration }

func newBackoff(minWait, maxWait time.Duration) *backoffState {
	return &backoffState{cur: minWait, max: maxWait}
}

// next returns a wait uniformly random in [cur/2, cur], then doubles cur.
func (b *backoffState) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	return d/2 + rand.N(d/2+1)
}

// backoffFor is the wait before retry number attempt (1-based).
func backoffFor(base time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < time.Second; i++ {
		d *= 2
	}
	d = min(d, max(base, time.Second))
	return d/2 + rand.N(d/2+1)
}

// refreshTopic reloads topic's metadata (one attempt, bounded by
// RequestTimeout). When the topic is unknown or a partition has no owner
// (being taken over) it then waits a little before returning, so the
// background refreshes of the producer and the consumer do not spin on
// Metadata.
func (c *Client) refreshTopic(ctx context.Context, topic string) (*topicInfo, error) {
	c.invalidate(topic)
	tctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	ti, err := c.topic(tctx, topic)
	cancel()
	missing := err != nil
	if ti != nil {
		for _, o := range ti.owners {
			missing = missing || o == ""
		}
	}
	if missing {
		_ = ctxtime.Sleep(ctx, 100*time.Millisecond)
	}
	return ti, err
}

// PasswordCredentials are the per-call credentials of a password login
// (what Config.User and Config.Password install), for a gRPC connection
// made by hand; gRPC sends them over TLS only.
func PasswordCredentials(user, password string) credentials.PerRPCCredentials {
	return passwordCredentials{user: user, password: password}
}

// passwordCredentials send the user name and password with every call;
// gRPC refuses to send them over a connection without TLS.
type passwordCredentials struct{ user, password string }

func (p passwordCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{scram.MetadataUser: p.user, scram.MetadataPassword: p.password}, nil
}

func (passwordCredentials) RequireTransportSecurity() bool { return true }

// caOnlyTLS is TLS checking the brokers' certificates against the CA
// bundle in caFile, presenting no certificate.
func caOnlyTLS(caFile string) (credentials.TransportCredentials, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client: %s: no PEM certificate", caFile)
	}
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}), nil
}
