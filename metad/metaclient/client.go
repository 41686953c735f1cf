package metaclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/metadpb"
)

// Defaults for Config's zero fields.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 5 * time.Second
)

// maxLearnedEndpoints bounds how many addresses learned from redirects are
// added to the rotation next to the configured ones.
const maxLearnedEndpoints = 8

// Config configures a Client.
type Config struct {
	// Endpoints are metad client addresses, host:port. At least one.
	Endpoints []string
	// DialTimeout bounds one attempt to connect to an endpoint.
	// Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds one attempt of a call at one endpoint; a call
	// may make several attempts within its context. Default 5s.
	RequestTimeout time.Duration
	// Logger receives retry and session events at debug and warn level.
	// Default: discard.
	Logger *slog.Logger
	// Credentials secure every connection (mtls.Credentials.Transport for
	// a node, a client's TLS for the CLI). Default: plaintext.
	Credentials credentials.TransportCredentials
}

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Credentials == nil {
		c.Credentials = insecure.NewCredentials()
	}
	c.Endpoints = append([]string(nil), c.Endpoints...)
	return c
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("metaclient: config: no endpoints")
	}
	seen := map[string]bool{}
	for _, ep := range c.Endpoints {
		if err := validateEndpoint(ep); err != nil {
			return fmt.Errorf("metaclient: config: %w", err)
		}
		if seen[ep] {
			return fmt.Errorf("metaclient: config: endpoint %q listed twice", ep)
		}
		seen[ep] = true
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("metaclient: config: negative dial timeout %v", c.DialTimeout)
	}
	if c.RequestTimeout < 0 {
		return fmt.Errorf("metaclient: config: negative request timeout %v", c.RequestTimeout)
	}
	return nil
}

func validateEndpoint(ep string) error {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return fmt.Errorf("endpoint %q: want host:port: %w", ep, err)
	}
	if host == "" || port == "" {
		return fmt.Errorf("endpoint %q: want host:port", ep)
	}
	return nil
}

func (c Config) String() string {
	return fmt.Sprintf("endpoints=%s dial-timeout=%v request-timeout=%v",
		strings.Join(c.Endpoints, ","), c.DialTimeout, c.RequestTimeout)
}

// Client talks to a metad cluster. It is safe for concurrent use.
type Client struct {
	cfg Config
	log *slog.Logger

	// ctx is canceled by Close; watches and sessions derive from it.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts watch and session goroutines; Close waits for them.
	wg sync.WaitGroup

	mu struct {
		sync.Mutex
		closed bool
		// endpoints is the rotation: the configured endpoints, then up to
		// maxLearnedEndpoints addresses learned from redirects.
		endpoints []string
		learned   int
		// current is the endpoint the next call tries first: the last one
		// that worked, or the leader a redirect named.
		current string
		// conns has one connection per address ever used (configured,
		// learned or asked for by StatusOf); all are closed by Close.
		conns map[string]*grpc.ClientConn
	}
}

// New validates cfg and returns a client. Connections are created for every
// endpoint but connect lazily, on first use.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Client{cfg: cfg, log: cfg.Logger.With("component", "metaclient")}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.endpoints = append([]string(nil), cfg.Endpoints...)
	c.mu.current = cfg.Endpoints[0]
	c.mu.conns = make(map[string]*grpc.ClientConn)
	for _, ep := range cfg.Endpoints {
		c.mu.Lock()
		_, err := c.connLocked(ep)
		c.mu.Unlock()
		if err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Close stops every watch and session of the client, waits for their
// goroutines and closes the connections. Calls made after Close fail with
// ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	conns := c.mu.conns
	c.mu.conns = nil
	c.mu.Unlock()
	var errs []error
	for ep, cc := range conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("metaclient: close %s: %w", ep, err))
		}
	}
	return errors.Join(errs...)
}

// dialOptions are the options of every connection.
func (c *Client) dialOptions() []grpc.DialOption {
	bc := backoff.DefaultConfig
	// gRPC's default caps reconnect backoff at 2 minutes: a metad member that
	// restarts would stay unusable through this connection for that long.
	bc.MaxDelay = 3 * time.Second
	bc.BaseDelay = 200 * time.Millisecond
	return []grpc.DialOption{
		grpc.WithTransportCredentials(c.cfg.Credentials),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: c.cfg.DialTimeout}),
		// Pings find dead peers under long-lived watch streams. 10s stays
		// above the servers' enforcement minimum (grpcserve: 5s).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcopts.MaxMessageBytes),
			grpc.MaxCallSendMsgSize(grpcopts.MaxMessageBytes)),
	}
}

// connLocked returns the connection to ep, creating it (without connecting)
// if needed.
// REQUIRES: c.mu held.
func (c *Client) connLocked(ep string) (*grpc.ClientConn, error) {
	if c.mu.closed {
		return nil, ErrClosed
	}
	if cc, ok := c.mu.conns[ep]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(ep, c.dialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("metaclient: endpoint %s: %w", ep, err)
	}
	c.mu.conns[ep] = cc
	return cc, nil
}

// stub returns a Metad client on ep's connection.
func (c *Client) stub(ep string) (metadpb.MetadClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc, err := c.connLocked(ep)
	if err != nil {
		return nil, err
	}
	return metadpb.NewMetadClient(cc), nil
}

// preferred returns the endpoint a call tries first.
func (c *Client) preferred() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.current
}

// worked records that ep just served a call.
func (c *Client) worked(ep string) {
	c.mu.Lock()
	c.mu.current = ep
	c.mu.Unlock()
}

// next returns the endpoint to try after ep failed, and makes it the
// preferred one so that concurrent and later calls skip ep too.
func (c *Client) next(ep string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := 0
	for j, e := range c.mu.endpoints {
		if e == ep {
			i = (j + 1) % len(c.mu.endpoints)
			break
		}
	}
	n := c.mu.endpoints[i]
	if c.mu.current == ep {
		c.mu.current = n
	}
	return n
}

// redirect makes addr (a leader's client address named by a server) the
// preferred endpoint, adding it to the rotation if it is new.
func (c *Client) redirect(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.current = addr
	for _, e := range c.mu.endpoints {
		if e == addr {
			return
		}
	}
	if c.mu.learned < maxLearnedEndpoints {
		c.mu.endpoints = append(c.mu.endpoints, addr)
		c.mu.learned++
	}
}

// goAttach runs f in a goroutine that Close waits for, unless the client is
// closed.
func (c *Client) goAttach(f func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return ErrClosed
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return nil
}

// callKind decides the retry rule of a call.
type callKind int

const (
	// kindRead calls retry on any Unavailable or per-attempt deadline.
	kindRead callKind = iota
	// kindWrite calls retry only when the server says retryable or when
	// the request never left the client.
	kindWrite
)

// op describes a call for retries and error messages.
type op struct {
	name string
	key  string
	kind callKind
	// lease: NOT_FOUND means the lease is missing, not the key.
	lease bool
}

func (o *op) notFound() error {
	if o.lease {
		return ErrLeaseNotFound
	}
	return ErrNotFound
}

// attemptFunc makes one attempt of a call at one endpoint. It must pass
// opts to the RPC.
type attemptFunc func(ctx context.Context, mc metadpb.MetadClient, opts ...grpc.CallOption) error

// call runs fn against the preferred endpoint and retries it, on the next
// endpoint or where a redirect points, as o.kind allows, until it succeeds,
// fails for good, or ctx ends. See doc.go for the rules.
func (c *Client) call(ctx context.Context, o op, fn attemptFunc) error {
	b := newBackoff()
	ep := c.preferred()
	var (
		lastRetried   error  // the error that made the call retry last
		lastRetriedEp string // where lastRetried came from
	)
	followedRedirect := false
	for {
		if ctx.Err() != nil {
			return giveUp(ctx, &o, attempt{}, attempt{lastRetried, lastRetriedEp}, false)
		}
		mc, err := c.stub(ep)
		if err != nil {
			return translate(&o, err, false)
		}
		var p peer.Peer
		var header metadata.MD
		actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		err = fn(actx, mc, grpc.Peer(&p), grpc.Header(&header))
		cancel()
		if err == nil {
			c.worked(ep)
			// A follower forwarded the call: go to the leader next time.
			if leader := header.Get(rpcerror.LeaderHeader); len(leader) > 0 && leader[0] != ep {
				c.redirect(leader[0])
			}
			return nil
		}
		// gRPC fills the peer only once a transport stream exists: without
		// one, no byte of the request reached a server.
		sent := p.Addr != nil
		// A retryable answer says the request was not applied.
		mayHaveApplied := sent && !rpcerror.Retryable(err)
		if c.isClosed() {
			return translate(&o, ErrClosed, mayHaveApplied)
		}
		retry := retryable(o.kind, err, sent)
		if ctx.Err() != nil && (retry || isContextStatus(err)) {
			// Out of time; a definitive answer that raced the deadline is
			// still reported as itself, below.
			return giveUp(ctx, &o, attempt{err, ep}, attempt{lastRetried, lastRetriedEp}, mayHaveApplied)
		}
		if !retry {
			return at(translate(&o, err, sent), ep)
		}
		lastRetried, lastRetriedEp = err, ep
		wait := b.next()
		if info := rpcerror.Info(err); info != nil && info.Redirect != "" && info.Redirect != ep {
			c.redirect(info.Redirect)
			c.log.Debug("following redirect", "op", o.name, "from", ep, "to", info.Redirect, "err", err)
			ep = info.Redirect
			if !followedRedirect {
				// A fresh redirect names where to go: no reason to wait.
				followedRedirect = true
				continue
			}
		} else {
			next := c.next(ep)
			c.log.Debug("retrying", "op", o.name, "endpoint", ep, "next", next, "wait", wait, "err", err)
			ep = next
		}
		if !c.sleep(ctx, wait) {
			if c.isClosed() {
				return translate(&o, ErrClosed, false)
			}
			return giveUp(ctx, &o, attempt{}, attempt{lastRetried, lastRetriedEp}, false)
		}
	}
}

// retryable applies the retry rules to an attempt's error.
func retryable(kind callKind, err error, sent bool) bool {
	if rpcerror.Retryable(err) {
		return true
	}
	code := status.Code(err)
	if kind == kindRead {
		// The caller's context is still live (checked before), so a
		// DeadlineExceeded is the per-attempt timeout.
		return code == codes.Unavailable || code == codes.DeadlineExceeded
	}
	return !sent && (code == codes.Unavailable || code == codes.DeadlineExceeded)
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.closed
}

// sleep waits d; it returns false if ctx ended or the client closed first.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-c.ctx.Done():
		return false
	}
}
