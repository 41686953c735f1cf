// Package admin is the HTTP server every Strata node runs on its admin
// address: /metrics (Prometheus, from the node's own registry), /livez
// (200 while the process runs), /readyz (200 only while the node can serve)
// and, when enabled (--enable-pprof), /debug/pprof/ with the flight
// recorder's last seconds of execution trace at /debug/pprof/flight.
//
// # Protection
//
// Optionally the server speaks TLS (Config.TLS: the node's certificate;
// a client certificate is optional and verified when given) and asks for
// a bearer token (Config.TokenFile) on /metrics and /debug/: a request
// needs "Authorization: Bearer TOKEN" with the file's token, or a
// verified client certificate of role admin; anything else is answered
// 401 with a WWW-Authenticate challenge. /livez and /readyz stay open for
// orchestrators' probes. The token file is read at Start (an empty or
// unreadable file is an error) and again when it changes (checked at most
// every second, by size and modification time); a change that does not
// load keeps the previous token, so a half-written file never opens or
// locks the endpoints. Tokens are compared in constant time.
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	// TLS, when not nil, serves HTTPS with it (pki.Reloader.HTTPSConfig).
	TLS *tls.Config
	// TokenFile, when set, holds the bearer token /metrics and /debug/
	// require.
	TokenFile string
}

// Server is a running admin HTTP server.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan error
}

// Start listens on cfg.Addr and serves in the background until Close.
func Start(cfg Config, log *slog.Logger) (*Server, error) {
	var token *tokenSource
	if cfg.TokenFile != "" {
		var err error
		if token, err = newTokenSource(cfg.TokenFile, time.Second, log); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", cfg.Addr, err)
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", guard(token, promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{Registry: cfg.Registry})))
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
		mux.Handle("/debug/", guard(token, debug))
	} else if token != nil {
		// Without pprof /debug/ is a 404, but only to whoever may see it.
		mux.Handle("/debug/", guard(token, http.NotFoundHandler()))
	}
	s := &Server{
		ln:   ln,
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
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
