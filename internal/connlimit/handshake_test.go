package connlimit

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

// handshakeOverTCP runs h on the server end of a loopback connection
// while client runs on the other end, and returns h's result and
// client's error.
func handshakeOverTCP(t *testing.T, h Handshake, client func(net.Conn) error) (net.Conn, error, error) {
	t.Helper()
	ln := proctest.Listen(t)
	defer ln.Close()
	clientErr := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			clientErr <- err
			return
		}
		t.Cleanup(func() { c.Close() })
		clientErr <- client(c)
	}()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := h(ctx, server)
	if err != nil {
		server.Close() // as the Listener does: the client's handshake ends too
	}
	return got, err, testwait.Recv(t, 10*time.Second, "the client's side", clientErr)
}

// TLSOrPlain serves a TLS client (its certificate checked in the
// handshake, a wrong role refused) and a plaintext one on one port.
func TestTLSOrPlain(t *testing.T) {
	ca := mtlstest.NewCA(t)
	check := mtls.RequireRole(pki.RoleMetad)
	member, broker := ca.Credentials(t, pki.RoleMetad, "m1"), ca.Credentials(t, pki.RoleBroker, "k1")
	h := TLSOrPlain(member.ServerTLS(check))
	dialTLS := func(creds *mtls.Credentials) func(net.Conn) error {
		return func(c net.Conn) error {
			tc := tls.Client(c, creds.ClientTLS("127.0.0.1", check))
			if err := tc.Handshake(); err != nil {
				return err
			}
			_, err := tc.Write([]byte("ping"))
			return err
		}
	}

	got, err, clientErr := handshakeOverTCP(t, h, dialTLS(member))
	if err != nil || clientErr != nil {
		t.Fatalf("a member: server %v, client %v", err, clientErr)
	}
	tc, ok := got.(*tls.Conn)
	if !ok {
		t.Fatalf("a TLS client was handed out as %T", got)
	}
	if id, err := pki.IdentityOf(tc.ConnectionState().PeerCertificates[0]); err != nil || id.Role != pki.RoleMetad {
		t.Fatalf("peer %v %v", id, err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q %v over TLS", buf, err)
	}

	if _, err, _ := handshakeOverTCP(t, h, dialTLS(broker)); !errors.Is(err, mtls.ErrWrongRole) {
		t.Fatalf("a broker certificate: %v, want ErrWrongRole", err)
	}

	got, err, clientErr = handshakeOverTCP(t, h, func(c net.Conn) error {
		_, err := c.Write([]byte("GET /metrics HTTP/1.1\r\n"))
		return err
	})
	if err != nil || clientErr != nil {
		t.Fatalf("plaintext: server %v, client %v", err, clientErr)
	}
	line := make([]byte, len("GET /metrics HTTP/1.1\r\n"))
	if _, err := io.ReadFull(got, line); err != nil || string(line) != "GET /metrics HTTP/1.1\r\n" {
		t.Fatalf("plaintext read %q %v", line, err)
	}

	// ServerTLS alone refuses a plaintext client.
	if _, err, _ := handshakeOverTCP(t, ServerTLS(member.ServerTLS(check)), func(c net.Conn) error {
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		_, _ = io.Copy(io.Discard, c)
		return nil
	}); err == nil {
		t.Fatal("ServerTLS accepted a plaintext client")
	}
}

// streamConn serves a fixed byte stream then EOF, discards writes, and
// ignores deadlines: what a fuzzed peer sends.
type streamConn struct {
	net.Conn // nil: only the methods below are called
	r        *bytes.Reader
}

func (c *streamConn) Read(p []byte) (int, error)          { return c.r.Read(p) }
func (c *streamConn) Write(p []byte) (int, error)         { return len(p), nil }
func (c *streamConn) Close() error                        { return nil }
func (c *streamConn) SetDeadline(time.Time) error         { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error     { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error    { return nil }
func (c *streamConn) RemoteAddr() net.Addr                { return &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)} }
func (c *streamConn) LocalAddr() net.Addr                 { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *streamConn) SetNoDelay(bool) error               { return nil }
func (c *streamConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(io.Discard, r) }

// FuzzTLSOrPlain: whatever a peer sends, TLSOrPlain returns (no hang, no
// panic); a stream not opening with a TLS handshake record is handed
// over byte for byte; one that does gets a TLS handshake, which garbage
// fails.
func FuzzTLSOrPlain(f *testing.F) {
	ca, err := pki.NewCA("fuzz CA", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.Request{Role: pki.RoleMetad, Name: "m", Hosts: []string{"127.0.0.1"}, NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		f.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		f.Fatal(err)
	}
	h := TLSOrPlain(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	f.Add([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	f.Add([]byte{0x16})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := h(ctx, &streamConn{r: bytes.NewReader(data)})
		switch {
		case len(data) == 0:
			if err == nil {
				t.Fatal("an empty stream was handed over")
			}
		case data[0] != recordTypeHandshake:
			if err != nil {
				t.Fatalf("plaintext refused: %v", err)
			}
			back, err := io.ReadAll(got)
			if err != nil || !bytes.Equal(back, data) {
				t.Fatalf("handed over %q (%v), want %q", back, err, data)
			}
		case err == nil:
			if _, ok := got.(*tls.Conn); !ok {
				t.Fatalf("a TLS record was handed over as %T", got)
			}
		}
	})
}
