package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/strata-log/strata/internal/connlimit"
)

// Accept retries after a failed Accept (out of file descriptors) back off
// from the first to the last delay.
const (
	acceptRetryFirst = 5 * time.Millisecond
	acceptRetryMax   = time.Second
)

// Server is a Kafka listener: it accepts connections and serves each
// (see the package doc). Close stops it.
type Server struct {
	cfg          Config
	ln           net.Listener
	tls          *tls.Config // nil: plaintext
	routes       routes
	metrics      *Metrics
	log          *slog.Logger
	authRequired bool

	ctx    context.Context // cancelled by Close; every connection's parent
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection

	mu struct {
		sync.Mutex
		closed bool
		conns  map[*Conn]struct{}
		perIP  map[string]int
	}
}

// New validates cfg, listens on cfg.Address and starts serving.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := newServer(cfg)
	ln, err := net.Listen("tcp", s.cfg.Address)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("kafka: listen: %w", err)
	}
	s.ln = ln
	s.log.Info("kafka listener started", "addr", ln.Addr().String(), "config", s.cfg.String())
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// newServer builds a Server that does not listen (tests hand it
// connections with accept). cfg must be valid.
func newServer(cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:     cfg,
		routes:  newRoutes(cfg.Handlers, cfg.Security != nil && len(cfg.Mechanisms) > 0),
		metrics: cfg.Metrics,
		log:     cfg.Logger.With("component", "kafka"),
	}
	s.authRequired = cfg.Security != nil && cfg.Security.AuthRequired()
	if cfg.TLS != nil {
		s.tls = verifyClientCertIfGiven(cfg.TLS)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.conns = map[*Conn]struct{}{}
	s.mu.perIP = map[string]int{}
	return s
}

// verifyClientCertIfGiven asks for a client certificate and verifies one
// when given, also on the configs GetConfigForClient returns.
func verifyClientCertIfGiven(cfg *tls.Config) *tls.Config {
	cfg = cfg.Clone()
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	if perClient := cfg.GetConfigForClient; perClient != nil {
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := perClient(h)
			if err != nil || c == nil {
				return c, err
			}
			c = c.Clone()
			c.ClientAuth = tls.VerifyClientCertIfGiven
			return c, nil
		}
	}
	return cfg
}

// Addr is the address listened on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	delay := acceptRetryFirst
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("kafka accept failed; retrying", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			}
			delay = min(2*delay, acceptRetryMax)
			continue
		}
		delay = acceptRetryFirst
		s.accept(nc)
	}
}

// accept serves nc unless the server is closed, or nc's IP or the whole
// listener is at its cap.
func (s *Server) accept(nc net.Conn) {
	ip := connlimit.RemoteIP(nc.RemoteAddr())
	s.mu.Lock()
	refused := ""
	switch {
	case s.mu.closed:
		refused = "shutdown"
	case s.mu.perIP[ip] >= s.cfg.MaxConnectionsPerIP:
		refused = "per_ip_cap"
	case len(s.mu.conns) >= s.cfg.MaxConnections:
		refused = "total_cap"
	}
	if refused != "" {
		s.mu.Unlock()
		_ = nc.Close()
		s.metrics.refused.WithLabelValues(refused).Inc()
		s.log.Debug("kafka connection refused", "remote", nc.RemoteAddr().String(), "reason", refused)
		return
	}
	if s.tls != nil {
		nc = tls.Server(nc, s.tls)
	}
	c := newConn(s, nc)
	s.mu.perIP[ip]++
	s.mu.conns[c] = struct{}{}
	s.wg.Add(1) // under mu, before closed is set: Close's Wait sees it
	s.mu.Unlock()
	s.metrics.open.Inc()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.release(c, ip)
	}()
}

func (s *Server) release(c *Conn, ip string) {
	s.mu.Lock()
	delete(s.mu.conns, c)
	if s.mu.perIP[ip]--; s.mu.perIP[ip] <= 0 {
		delete(s.mu.perIP, ip)
	}
	s.mu.Unlock()
	s.metrics.open.Dec()
}

// Close stops accepting, closes every connection (their contexts are
// cancelled, so Replies end) and returns once every goroutine of the
// Server has.
func (s *Server) Close() error {
	s.mu.Lock()
	s.mu.closed = true
	conns := make([]*Conn, 0, len(s.mu.conns))
	for c := range s.mu.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.cancel()
	var err error
	if s.ln != nil {
		if err = s.ln.Close(); errors.Is(err, net.ErrClosed) {
			err = nil
		}
	}
	for _, c := range conns {
		c.fail(reasonShutdown, errors.New("server closing"))
	}
	s.wg.Wait()
	return err
}
