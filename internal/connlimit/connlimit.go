package connlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Refusal reasons: the values of the refused metric's reason label.
const (
	ReasonMaxConnections      = "max_connections"
	ReasonMaxConnectionsPerIP = "max_connections_per_ip"
	ReasonHandshake           = "handshake"
)

// fullSweepInterval: while the total cap is reached, an arriving
// connection looks for closed ones among all of them at most this often.
const fullSweepInterval = 10 * time.Millisecond

// ErrConfig is wrapped by every error Config.Validate returns.
var ErrConfig = errors.New("connlimit: invalid config")

// Handshake makes an admitted connection fit to serve (a TLS handshake, a
// first byte read) or fails. It must return when ctx ends; the Listener
// also puts the connection's deadline in the past then.
type Handshake func(ctx context.Context, c net.Conn) (net.Conn, error)

// Config is a Listener's.
type Config struct {
	// MaxConnections bounds the admitted connections open at once;
	// MaxConnectionsPerIP those from one source IP.
	MaxConnections      int
	MaxConnectionsPerIP int
	// Handshake, when set, runs on every admitted connection before Accept
	// returns what it returns; HandshakeTimeout bounds it.
	Handshake        Handshake
	HandshakeTimeout time.Duration
	// Name prefixes the metrics' names (NAME_connections_open,
	// NAME_connections_refused_total), e.g. strata_metad_raft; Help names
	// the listener in their help ("Raft").
	Name, Help string
	// Logger, when nil, is slog.Default(). Refusals are logged at debug
	// level.
	Logger *slog.Logger

	now func() time.Time // for tests; time.Now when nil
}

// Validate reports what is wrong with c.
func (c Config) Validate() error {
	switch {
	case c.MaxConnections < 1:
		return fmt.Errorf("%w: MaxConnections %d, want at least 1", ErrConfig, c.MaxConnections)
	case c.MaxConnectionsPerIP < 1:
		return fmt.Errorf("%w: MaxConnectionsPerIP %d, want at least 1", ErrConfig, c.MaxConnectionsPerIP)
	case c.Handshake != nil && c.HandshakeTimeout <= 0:
		return fmt.Errorf("%w: HandshakeTimeout %v, want a positive bound with a Handshake", ErrConfig, c.HandshakeTimeout)
	case c.Name == "":
		return fmt.Errorf("%w: no Name for the metrics", ErrConfig)
	}
	return nil
}

// Listener is a net.Listener that admits connections within its Config's
// caps (see the package doc). It is a prometheus.Collector of its metrics.
type Listener struct {
	inner    net.Listener
	cfg      Config
	refused  *prometheus.CounterVec // reason
	openDesc *prometheus.Desc

	// With a Handshake: the accept loop and handshakes run in goroutines
	// and hand over on ready; errs carries the inner Accept's errors.
	ready     chan net.Conn
	errs      chan error
	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	mu struct {
		sync.Mutex
		byIP          map[string][]probe // open (or not yet swept) admitted connections
		open          int                // sum of len(byIP[ip])
		lastFullSweep time.Time
	}
}

var _ net.Listener = (*Listener)(nil)
var _ prometheus.Collector = (*Listener)(nil)

// Wrap guards inner with cfg. The Listener owns inner: its Close closes it.
func Wrap(inner net.Listener, cfg Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	l := &Listener{
		inner: inner,
		cfg:   cfg,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: cfg.Name + "_connections_refused_total",
			Help: cfg.Help + " connections closed before being served, by reason (max_connections, max_connections_per_ip, handshake).",
		}, []string{"reason"}),
		openDesc: prometheus.NewDesc(cfg.Name+"_connections_open",
			cfg.Help+" connections admitted and not yet closed.", nil, nil),
		ready: make(chan net.Conn),
		errs:  make(chan error),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.mu.byIP = map[string][]probe{}
	if cfg.Handshake != nil {
		l.wg.Add(1)
		go l.acceptLoop()
	}
	return l, nil
}

// Listen listens on the TCP address addr and wraps the listener with cfg.
func Listen(addr string, cfg Config) (*Listener, error) {
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l, err := Wrap(inner, cfg)
	if err != nil {
		_ = inner.Close()
		return nil, err
	}
	return l, nil
}

// Accept returns the next admitted connection (handshaken, with a
// Handshake); it returns net.ErrClosed once the Listener is closed.
func (l *Listener) Accept() (net.Conn, error) {
	if l.cfg.Handshake == nil {
		for {
			c, err := l.inner.Accept()
			if err != nil {
				return nil, err
			}
			if c, ok := l.admit(c); ok {
				return c, nil
			}
		}
	}
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Addr is the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Close closes the inner listener and the connections still handshaking,
// and waits for the Listener's goroutines. Admitted connections already
// returned by Accept are the server's to close.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.cancel()
		l.closeErr = l.inner.Close()
		l.wg.Wait()
	})
	return l.closeErr
}

// Open is the number of admitted connections not yet closed.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepAllLocked()
	return l.mu.open
}

// Refused is the number of connections refused for reason.
func (l *Listener) Refused(reason string) float64 {
	m := &dto.Metric{}
	if err := l.refused.WithLabelValues(reason).Write(m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// Describe is part of prometheus.Collector.
func (l *Listener) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.openDesc
	l.refused.Describe(ch)
}

// Collect is part of prometheus.Collector.
func (l *Listener) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(l.openDesc, prometheus.GaugeValue, float64(l.Open()))
	l.refused.Collect(ch)
}

// acceptLoop accepts, admits and starts a handshake per admitted
// connection, until the inner listener is closed.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.cancel() // closed under us: Accept says so from now on
				return
			}
			// A transient failure (out of file descriptors): the server's
			// accept loop backs off, as it would on its own listener.
			select {
			case l.errs <- err:
				continue
			case <-l.ctx.Done():
				return
			}
		}
		c, ok := l.admit(c)
		if !ok {
			continue
		}
		l.wg.Add(1)
		go l.handshake(c)
	}
}

// aLongTimeAgo is a deadline in the past: it makes blocked I/O return.
var aLongTimeAgo = time.Unix(1, 0)

// handshake runs the Handshake on c and hands the result to Accept.
func (l *Listener) handshake(c net.Conn) {
	defer l.wg.Done()
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.HandshakeTimeout)
	defer cancel()
	// On timeout or Close, blocked reads and writes return at once.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(aLongTimeAgo) })
	out, err := l.cfg.Handshake(ctx, c)
	if !stop() && err == nil {
		err = context.Cause(ctx) // finished as the deadline was forced: it may have hit a write
	}
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	if err != nil {
		l.refuse(c, ReasonHandshake, err)
		return
	}
	select {
	case l.ready <- out:
	case <-l.ctx.Done():
		_ = out.Close()
	}
}

// admit tracks c if the caps allow it, and returns what to hand out (c,
// or c wrapped when it is no syscall.Conn); else it refuses c.
func (l *Listener) admit(c net.Conn) (net.Conn, bool) {
	ip := RemoteIP(c.RemoteAddr())
	p, out := newProbe(c)
	if reason := l.track(ip, p); reason != "" {
		l.refuse(c, reason, nil)
		return nil, false
	}
	return out, true
}

func (l *Listener) refuse(c net.Conn, reason string, err error) {
	_ = c.Close()
	l.refused.WithLabelValues(reason).Inc()
	l.cfg.Logger.Debug("connection refused", "listener", l.cfg.Name, "remote", c.RemoteAddr().String(), "reason", reason, "err", err)
}

// track counts p against ip's cap and the total; when a cap is reached it
// first forgets the closed connections of ip, then (the total, at most
// every fullSweepInterval) of every IP. It returns the reason of a
// refusal, or "" when p is counted.
func (l *Listener) track(ip string, p probe) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.mu.byIP[ip]) >= l.cfg.MaxConnectionsPerIP || l.mu.open >= l.cfg.MaxConnections {
		l.sweepLocked(ip) // its own, bounded by the per-IP cap
	}
	if len(l.mu.byIP[ip]) >= l.cfg.MaxConnectionsPerIP {
		return ReasonMaxConnectionsPerIP
	}
	if l.mu.open >= l.cfg.MaxConnections {
		if now := l.cfg.now(); now.Sub(l.mu.lastFullSweep) >= fullSweepInterval {
			l.mu.lastFullSweep = now
			l.sweepAllLocked()
		}
		if l.mu.open >= l.cfg.MaxConnections {
			return ReasonMaxConnections
		}
	}
	l.mu.byIP[ip] = append(l.mu.byIP[ip], p)
	l.mu.open++
	return ""
}

// REQUIRES: l.mu held.
func (l *Listener) sweepAllLocked() {
	for ip := range l.mu.byIP {
		l.sweepLocked(ip)
	}
}

// sweepLocked forgets ip's closed connections.
// REQUIRES: l.mu held.
func (l *Listener) sweepLocked(ip string) {
	ps := l.mu.byIP[ip]
	kept := ps[:0]
	for _, p := range ps {
		if !p.closed() {
			kept = append(kept, p)
		}
	}
	clear(ps[len(kept):]) // drop the references to closed connections
	l.mu.open -= len(ps) - len(kept)
	if len(kept) == 0 {
		delete(l.mu.byIP, ip)
		return
	}
	l.mu.byIP[ip] = kept
}

// probe tells whether an admitted connection was closed.
type probe interface{ closed() bool }

// newProbe returns c's probe and the connection to hand out: c itself
// when its file descriptor can be asked, else c wrapped to see its Close.
func newProbe(c net.Conn) (probe, net.Conn) {
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			return fdProbe{raw}, c
		}
	}
	w := &closeSeen{Conn: c}
	return w, w
}

// fdProbe asks the file descriptor: Control fails once it is closed.
type fdProbe struct{ raw syscall.RawConn }

func (p fdProbe) closed() bool { return p.raw.Control(func(uintptr) {}) != nil }

// closeSeen is a connection whose Close is recorded.
type closeSeen struct {
	net.Conn
	done atomic.Bool
}

func (c *closeSeen) Close() error {
	c.done.Store(true)
	return c.Conn.Close()
}

func (c *closeSeen) closed() bool { return c.done.Load() }

// RemoteIP is the IP of a connection's remote address (the address itself
// when it has no port).
func RemoteIP(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}
