// Package admin is the HTTP server every Strata node runs on its admin
// address: /metrics (Prometheus, from the node's own registry), /livez
// (200 while the process runs), /readyz (200 only while the node can serve)
// and, when enabled (--enable-pprof), /debug/pprof/ with the flight
// recorder's last seconds of execution trace at /debug/pprof/flight.
//
// # Protection
//
// With Config.TLS (the node's certificate; a client certificate is
// optional there and verified when given) the address serves TLS, and
// unless TLSOnly also plain HTTP on the same port (a connection's first
// byte tells them apart: internal/connlimit.TLSOrPlain), so probes that
// speak HTTP keep working. /metrics and /debug/ ask for authentication
// when a token file is set (Config.TokenFile) or RequireAuth (a node that
// runs with TLS): a request needs "Authorization: Bearer TOKEN" with the
// file's token, or a verified client certificate of role admin; anything
// else is answered 401 with a WWW-Authenticate challenge. /livez and
// /readyz stay open for orchestrators' probes. The token file is read at
// Start (an empty or unreadable file is an error) and again when it
// changes (checked at most every second, by size and modification time);
// a change that does not load keeps the previous token, so a half-written
// file never opens or locks the endpoints. Tokens are compared in
// constant time.
//
// # Limits
//
// The listener caps its connections in total and per source IP
// (internal/connlimit; refusals counted in
// strata_ROLE_admin_connections_refused_total); a TLS handshake, and a
// request's header, must complete within HandshakeTimeout; a kept-alive
// connection idle for idleTimeout is closed; a request header is at most
// maxHeaderBytes.
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/internal/connlimit"
)

// Bounds of a kept-alive connection's idleness and of a request header
// (scrapes and probes send a few hundred bytes).
const (
	idleTimeout    = 2 * time.Minute
	maxHeaderBytes = 16 << 10
)

// ReadyFunc reports nil when the node can serve, or why it cannot.
type ReadyFunc func() error

// Config is what an admin server serves.
type Config struct {
	// Addr is the listen address (host:port).
	Addr     string
	Registry *prometheus.Registry
	Ready    ReadyFunc
	// Pprof serves /debug/pprof/.
	Pprof bool
	// TLS, when not nil, serves TLS with it (pki.Reloader.HTTPSConfig);
	// plain HTTP too on the same port unless TLSOnly.
	TLS     *tls.Config
	TLSOnly bool
	// TokenFile, when set, holds the bearer token /metrics and /debug/
	// require.
	TokenFile string
	// RequireAuth guards /metrics and /debug/ even without TokenFile (an
	// admin client certificate, over TLS, then is the only way in).
	RequireAuth bool
	// MaxConnections and MaxConnectionsPerIP cap the listener's
	// connections; HandshakeTimeout bounds a TLS handshake and a request
	// header.
	MaxConnections, MaxConnectionsPerIP int
	HandshakeTimeout                    time.Duration
	// Role names the node's role in the metric names
	// (strata_ROLE_admin_connections_open, ..._refused_total).
	Role string
}

// Server is a running admin HTTP server.
type Server struct {
	ln   *connlimit.Listener
	srv  *http.Server
	done chan error
}

// withDefaults fills the zero limits from config.DefaultLimits and the
// zero Role.
func (c Config) withDefaults() Config {
	d := config.DefaultLimits()
	if c.MaxConnections == 0 {
		c.MaxConnections = d.AdminMaxConnections
	}
	if c.MaxConnectionsPerIP == 0 {
		c.MaxConnectionsPerIP = d.AdminMaxConnectionsPerIP
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = d.HandshakeTimeout
	}
	if c.Role == "" {
		c.Role = "node"
	}
	return c
}

// Start listens on cfg.Addr and serves in the background until Close.
// Zero limits take config.DefaultLimits' admin values.
func Start(cfg Config, log *slog.Logger) (*Server, error) {
	cfg = cfg.withDefaults()
	auth, err := newAuthorizer(cfg, log)
	if err != nil {
		return nil, err
	}
	ln, err := listen(cfg, log)
	if err != nil {
		return nil, err
	}
	s := &Server{
		ln: ln,
		srv: &http.Server{Handler: routes(cfg, auth, log), ReadHeaderTimeout: cfg.HandshakeTimeout,
			IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes},
		done: make(chan error, 1),
	}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			log.Error("admin server stopped", "err", err)
		}
		s.done <- err
	}()
	return s, nil
}

// listen opens the capped listener, with the TLS handshake (or the
// choice between TLS and plain HTTP) before the HTTP server sees a
// connection, and registers its metrics on cfg.Registry.
func listen(cfg Config, log *slog.Logger) (*connlimit.Listener, error) {
	lc := connlimit.Config{
		MaxConnections: cfg.MaxConnections, MaxConnectionsPerIP: cfg.MaxConnectionsPerIP, HandshakeTimeout: cfg.HandshakeTimeout,
		Name: "strata_" + cfg.Role + "_admin", Help: "Admin HTTP", Logger: log,
	}
	switch {
	case cfg.TLS != nil && cfg.TLSOnly:
		lc.Handshake = connlimit.ServerTLS(cfg.TLS)
	case cfg.TLS != nil:
		lc.Handshake = connlimit.TLSOrPlain(cfg.TLS)
	}
	ln, err := connlimit.Listen(cfg.Addr, lc)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", cfg.Addr, err)
	}
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(ln); err != nil {
			ln.Close()
			return nil, fmt.Errorf("admin: register metrics: %w", err)
		}
	}
	return ln, nil
}

// routes is the server's handler: every endpoint, those behind auth
// guarded.
func routes(cfg Config, auth *authorizer, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", guard(auth, promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{Registry: cfg.Registry})))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := cfg.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if cfg.Pprof {
		if err := StartFlight(); err != nil {
			log.Warn("no flight recorder (/debug/pprof/flight)", "err", err)
		}
		debug := http.NewServeMux()
		debug.HandleFunc("/debug/pprof/", pprof.Index)
		debug.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		debug.HandleFunc("/debug/pprof/profile", pprof.Profile)
		debug.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		debug.HandleFunc("/debug/pprof/trace", pprof.Trace)
		debug.HandleFunc("/debug/pprof/flight", serveFlight)
		mux.Handle("/debug/", guard(auth, debug))
	} else if auth != nil {
		// Without pprof /debug/ is a 404, but only to whoever may see it.
		mux.Handle("/debug/", guard(auth, http.NotFoundHandler()))
	}
	return mux
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, waiting briefly for in-flight requests.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serveErr := <-s.done; err == nil {
		err = serveErr
	}
	return err
}
