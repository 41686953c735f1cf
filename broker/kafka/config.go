package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Defaults of Config's zero fields.
const (
	// DefaultMaxRequestBytes is Kafka's socket.request.max.bytes.
	DefaultMaxRequestBytes = 100 << 20
	// DefaultMaxUnauthenticatedRequestBytes is Kafka's
	// sasl.server.max.receive.size: far below the cap after
	// authentication, so an anonymous peer cannot make the broker buffer
	// much (CVE-2022-34917).
	DefaultMaxUnauthenticatedRequestBytes = 512 << 10
	// DefaultMaxControlRequestBytes caps every request but Produce: their
	// decoded form is up to ~30 times their frame (an array of near-empty
	// entries), and none needs more than a few MiB (an OffsetCommit of
	// 100,000 partitions is about 2.5 MiB).
	DefaultMaxControlRequestBytes = 8 << 20
	// DefaultIdleTimeout is Kafka's connections.max.idle.ms.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultInFlightPerConnection bounds the requests of one connection
	// read but not yet answered.
	DefaultInFlightPerConnection = 16
	// DefaultMaxConnectionsPerIP bounds one client address's connections,
	// DefaultMaxConnections all clients' together.
	DefaultMaxConnectionsPerIP = 1000
	DefaultMaxConnections      = 10_000
)

// SASL mechanism names.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// tlsHandshakeTimeout bounds a TLS handshake (or IdleTimeout if shorter).
const tlsHandshakeTimeout = 10 * time.Second

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("kafka: invalid config")

// Config is a Server's. Zero fields take the defaults above.
type Config struct {
	// Address is the TCP address to listen on (host:port; port 0 picks
	// one, see Server.Addr).
	Address string
	// TLS, when set, makes the listener speak TLS with it. Client
	// certificates are asked for and verified when given
	// (tls.VerifyClientCertIfGiven, on it and on whatever its
	// GetConfigForClient returns), as on the broker's gRPC listener: a
	// client may authenticate with one or with SASL.
	TLS *tls.Config
	// Handlers answers every API but ApiVersions, SaslHandshake and
	// SaslAuthenticate (the Server's own). New copies it: registering
	// afterwards changes nothing.
	Handlers *Registry
	// Security authenticates clients; nil serves everyone anonymously
	// and does not advertise SASL.
	Security Security
	// Mechanisms are the SASL mechanisms offered (default all three);
	// PLAIN is offered on TLS connections only.
	Mechanisms []string
	// MaxRequestBytes caps a request frame (the size prefix excluded),
	// checked before any byte of it is buffered.
	MaxRequestBytes int32
	// MaxControlRequestBytes caps a frame of any API but Produce, checked
	// on its first bytes, before the rest is read.
	MaxControlRequestBytes int32
	// MaxUnauthenticatedRequestBytes caps a frame while the listener
	// requires authentication and the connection has none yet.
	MaxUnauthenticatedRequestBytes int32
	// IdleTimeout closes a connection that has received nothing for this
	// long while none of its requests is unanswered.
	IdleTimeout time.Duration
	// InFlightPerConnection bounds a connection's requests read and not
	// yet answered; its reader waits at the bound.
	InFlightPerConnection int
	// MaxConnectionsPerIP bounds the open connections from one client
	// IP address, MaxConnections those of all clients together; more are
	// closed at accept (and counted).
	MaxConnectionsPerIP int
	MaxConnections      int
	// Metrics, when nil, are kept unregistered.
	Metrics *Metrics
	// Logger, when nil, is slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxControlRequestBytes == 0 {
		c.MaxControlRequestBytes = min(DefaultMaxControlRequestBytes, c.MaxRequestBytes)
	}
	if c.MaxUnauthenticatedRequestBytes == 0 {
		c.MaxUnauthenticatedRequestBytes = min(DefaultMaxUnauthenticatedRequestBytes, c.MaxRequestBytes)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.InFlightPerConnection == 0 {
		c.InFlightPerConnection = DefaultInFlightPerConnection
	}
	if c.MaxConnectionsPerIP == 0 {
		c.MaxConnectionsPerIP = DefaultMaxConnectionsPerIP
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.Mechanisms == nil {
		c.Mechanisms = []string{MechanismScramSHA256, MechanismScramSHA512, MechanismPlain}
	}
	if c.Handlers == nil {
		c.Handlers = NewRegistry()
	}
	if c.Metrics == nil {
		c.Metrics, _ = NewMetrics(nil) // nothing to register: cannot fail
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports what is wrong with c (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Address == "":
		return fmt.Errorf("%w: no address", ErrConfig)
	case c.MaxRequestBytes < 0:
		return fmt.Errorf("%w: MaxRequestBytes %d", ErrConfig, c.MaxRequestBytes)
	case c.MaxControlRequestBytes < 0 || c.MaxControlRequestBytes > c.MaxRequestBytes:
		return fmt.Errorf("%w: MaxControlRequestBytes %d, want 1 to MaxRequestBytes (%d)", ErrConfig, c.MaxControlRequestBytes, c.MaxRequestBytes)
	case c.MaxUnauthenticatedRequestBytes < 0 || c.MaxUnauthenticatedRequestBytes > c.MaxRequestBytes:
		return fmt.Errorf("%w: MaxUnauthenticatedRequestBytes %d, want 1 to MaxRequestBytes (%d)", ErrConfig, c.MaxUnauthenticatedRequestBytes, c.MaxRequestBytes)
	case c.IdleTimeout < 0:
		return fmt.Errorf("%w: IdleTimeout %v", ErrConfig, c.IdleTimeout)
	case c.InFlightPerConnection < 0:
		return fmt.Errorf("%w: InFlightPerConnection %d", ErrConfig, c.InFlightPerConnection)
	case c.MaxConnectionsPerIP < 0:
		return fmt.Errorf("%w: MaxConnectionsPerIP %d", ErrConfig, c.MaxConnectionsPerIP)
	case c.MaxConnections < 0:
		return fmt.Errorf("%w: MaxConnections %d", ErrConfig, c.MaxConnections)
	}
	for _, m := range c.Mechanisms {
		if !slices.Contains([]string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512}, m) {
			return fmt.Errorf("%w: unknown SASL mechanism %q", ErrConfig, m)
		}
	}
	return nil
}

// String describes c for a log line (no secrets: the TLS config is only
// said to be there).
func (c Config) String() string {
	c = c.withDefaults()
	return fmt.Sprintf("address=%s tls=%t auth=%t mechanisms=%v max_request_bytes=%d max_unauthenticated_request_bytes=%d idle_timeout=%v in_flight_per_connection=%d max_connections_per_ip=%d max_connections=%d",
		c.Address, c.TLS != nil, c.Security != nil && c.Security.AuthRequired(), c.Mechanisms, c.MaxRequestBytes,
		c.MaxUnauthenticatedRequestBytes, c.IdleTimeout, c.InFlightPerConnection, c.MaxConnectionsPerIP, c.MaxConnections)
}
