package connlimit

import (
	"context"
	"crypto/tls"
	"io"
	"net"
)

// recordTypeHandshake is the first byte of a TLS ClientHello (the content
// type of a handshake record).
const recordTypeHandshake = 0x16

// FirstByte is a Handshake that waits for the connection's first byte: a
// peer that connects and sends nothing never reaches the server. The
// connection it returns yields that byte again first.
func FirstByte(_ context.Context, c net.Conn) (net.Conn, error) {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return nil, err
	}
	return &prefixConn{Conn: c, prefix: b[:]}, nil
}

// ServerTLS is a Handshake that completes a TLS handshake with cfg (whose
// VerifyConnection, client authentication and the like all run in it) and
// returns the *tls.Conn.
func ServerTLS(cfg *tls.Config) Handshake {
	return func(ctx context.Context, c net.Conn) (net.Conn, error) {
		tc := tls.Server(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		return tc, nil
	}
}

// TLSOrPlain is a Handshake that serves TLS and plaintext on one port: it
// reads the first byte and, when it opens a TLS handshake record, returns
// ServerTLS(cfg)'s *tls.Conn, else the plaintext connection (that byte
// put back).
func TLSOrPlain(cfg *tls.Config) Handshake {
	serverTLS := ServerTLS(cfg)
	return func(ctx context.Context, c net.Conn) (net.Conn, error) {
		first, err := FirstByte(ctx, c)
		if err != nil {
			return nil, err
		}
		if first.(*prefixConn).prefix[0] != recordTypeHandshake {
			return first, nil
		}
		return serverTLS(ctx, first)
	}
}

// prefixConn is a connection whose first reads return prefix, bytes
// already read from Conn.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.prefix)
	c.prefix = c.prefix[n:]
	return n, nil
}
