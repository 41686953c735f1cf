package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Limits bound what a node's gRPC and admin HTTP listeners accept; every
// role's config embeds it (squashed: its keys are plain flags). A
// connection over a cap is closed at once and counted
// (NAME_connections_refused_total); one that completes no TLS handshake
// (or, in plaintext, sends nothing) within HandshakeTimeout is closed.
type Limits struct {
	// GRPCMaxConnections and GRPCMaxConnectionsPerIP bound the gRPC
	// connections open at once, in total and from one source IP.
	GRPCMaxConnections      int `mapstructure:"grpc-max-connections"`
	GRPCMaxConnectionsPerIP int `mapstructure:"grpc-max-connections-per-ip"`
	// GRPCMaxConcurrentStreams bounds the calls one gRPC connection may
	// have open at once; a client past it waits for one to end.
	GRPCMaxConcurrentStreams int `mapstructure:"grpc-max-concurrent-streams"`
	// GRPCIdleTimeout closes a gRPC connection that had no call open for
	// this long (the client reconnects when it needs to).
	GRPCIdleTimeout time.Duration `mapstructure:"grpc-idle-timeout"`
	// AdminMaxConnections and AdminMaxConnectionsPerIP bound the admin
	// HTTP listener's connections.
	AdminMaxConnections      int `mapstructure:"admin-max-connections"`
	AdminMaxConnectionsPerIP int `mapstructure:"admin-max-connections-per-ip"`
	// HandshakeTimeout bounds a new connection's TLS handshake (in
	// plaintext, its first bytes: the HTTP/2 preface on gRPC, the request
	// header on the admin address, the first byte on metad's Raft
	// address) on those listeners. The Kafka listener has its own
	// (broker/kafka).
	HandshakeTimeout time.Duration `mapstructure:"handshake-timeout"`
}

// DefaultLimits are the defaults: far above what a cluster's own traffic
// needs (a bookie or metad member has a few connections per node; a
// broker one or two per client), far below what exhausts a node's memory.
func DefaultLimits() Limits {
	return Limits{
		GRPCMaxConnections:       4096,
		GRPCMaxConnectionsPerIP:  512,
		GRPCMaxConcurrentStreams: 128,
		GRPCIdleTimeout:          10 * time.Minute,
		AdminMaxConnections:      128,
		AdminMaxConnectionsPerIP: 32,
		HandshakeTimeout:         10 * time.Second,
	}
}

// LimitsFlags defines the flags of Limits with d's values as defaults.
func LimitsFlags(fs *pflag.FlagSet, d Limits) {
	fs.Int("grpc-max-connections", d.GRPCMaxConnections, "gRPC connections open at once; more are closed at accept (counted)")
	fs.Int("grpc-max-connections-per-ip", d.GRPCMaxConnectionsPerIP, "gRPC connections one client IP may hold open")
	fs.Int("grpc-max-concurrent-streams", d.GRPCMaxConcurrentStreams, "calls one gRPC connection may have open at once (a client past it waits)")
	fs.Duration("grpc-idle-timeout", d.GRPCIdleTimeout, "close a gRPC connection that had no call open for this long")
	fs.Int("admin-max-connections", d.AdminMaxConnections, "admin HTTP connections open at once")
	fs.Int("admin-max-connections-per-ip", d.AdminMaxConnectionsPerIP, "admin HTTP connections one client IP may hold open")
	fs.Duration("handshake-timeout", d.HandshakeTimeout, "close a new connection that completes no TLS handshake (plaintext: sends no request) within this long")
}

// Validate checks that every bound is positive.
func (l Limits) Validate() error {
	var errs []error
	for _, v := range []struct {
		flag string
		n    int
	}{
		{"grpc-max-connections", l.GRPCMaxConnections}, {"grpc-max-connections-per-ip", l.GRPCMaxConnectionsPerIP},
		{"grpc-max-concurrent-streams", l.GRPCMaxConcurrentStreams},
		{"admin-max-connections", l.AdminMaxConnections}, {"admin-max-connections-per-ip", l.AdminMaxConnectionsPerIP},
	} {
		if v.n < 1 {
			errs = append(errs, fmt.Errorf("--%s %d: want at least 1", v.flag, v.n))
		}
	}
	for _, v := range []struct {
		flag string
		d    time.Duration
	}{{"grpc-idle-timeout", l.GRPCIdleTimeout}, {"handshake-timeout", l.HandshakeTimeout}} {
		if v.d < time.Millisecond {
			errs = append(errs, fmt.Errorf("--%s %v: want at least 1ms", v.flag, v.d))
		}
	}
	return errors.Join(errs...)
}

// String summarises l for the start-up log line.
func (l Limits) String() string {
	return fmt.Sprintf("grpc-max-connections=%d grpc-max-connections-per-ip=%d grpc-max-concurrent-streams=%d grpc-idle-timeout=%v admin-max-connections=%d admin-max-connections-per-ip=%d handshake-timeout=%v",
		l.GRPCMaxConnections, l.GRPCMaxConnectionsPerIP, l.GRPCMaxConcurrentStreams, l.GRPCIdleTimeout,
		l.AdminMaxConnections, l.AdminMaxConnectionsPerIP, l.HandshakeTimeout)
}
