package grpcserve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/internal/connlimit"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/bookiepb"
)

// A TLS server answers a verified certificate's allowed calls, refuses its
// other calls with PERMISSION_DENIED before the handler runs, and leaves
// health open to any verified certificate; a plaintext client gets no
// answer at all.
func TestSecure(t *testing.T) {
	ca := mtlstest.NewCA(t)
	issue := func(role string) *mtls.Credentials { return ca.Credentials(t, role, role+"-1") }
	server := issue(pki.RoleBookie)
	a, err := authz.New(authz.DefaultPolicy(), "bookie", slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Addr: proctest.FreeAddr(t), Reflection: true, TLS: true}, Secure(server, a)...)
	if err != nil {
		t.Fatal(err)
	}
	bookiepb.RegisterBookieServer(s.Server, bookiepb.UnimplementedBookieServer{})
	go func() { _ = s.Serve() }()
	defer s.Stop(time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := func(creds *mtls.Credentials) (healthErr, fenceErr error) {
		cc, err := grpc.NewClient(s.Addr(), creds.DialOption())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		_, healthErr = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		_, fenceErr = bookiepb.NewBookieClient(cc).Fence(ctx, &bookiepb.FenceRequest{})
		return
	}
	for _, tc := range []struct {
		role        string
		health      codes.Code
		fence       codes.Code
		description string
	}{
		{pki.RoleBroker, codes.OK, codes.Unimplemented, "a broker passes the check and reaches the handler"},
		{pki.RoleUser, codes.OK, codes.PermissionDenied, "a user may ask for health, not fence"},
	} {
		h, f := call(issue(tc.role))
		if status.Code(h) != tc.health || status.Code(f) != tc.fence {
			t.Errorf("%s: health %v, fence %v", tc.description, h, f)
		}
	}
	if h, _ := call(nil); status.Code(h) != codes.Unavailable {
		t.Errorf("plaintext client: health %v, want UNAVAILABLE", h)
	}
	if Secure(nil, a) != nil {
		t.Error("Secure without credentials returned options")
	}
}

// startLimited serves health on a server with limits; it returns the
// server and a plaintext client from 127.0.0.1.
func startLimited(t *testing.T, limits config.Limits) (*Server, *grpc.ClientConn) {
	t.Helper()
	s, err := New(Config{Addr: proctest.FreeAddr(t), Limits: limits, Role: "test"}, grpc.Creds(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	t.Cleanup(func() { s.Stop(time.Second) })
	cc, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return s, cc
}

// Connections over the per-IP cap are refused (counted); an idle one,
// which sends no HTTP/2 preface, is closed at the handshake timeout; a
// client from another IP is served meanwhile.
func TestConnectionLimits(t *testing.T) {
	limits := config.DefaultLimits()
	limits.GRPCMaxConnectionsPerIP, limits.HandshakeTimeout = 2, 200*time.Millisecond
	s, cc := startLimited(t, limits)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var idle []net.Conn
	for range 5 {
		c, err := d.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	testwait.Until(t, 10*time.Second, "3 refused at the per-IP cap", func() bool {
		return s.ln.Refused(connlimit.ReasonMaxConnectionsPerIP) == 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a client from another IP: %v", err)
	}
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("an idle connection was not closed: %v", err)
		}
	}
	testwait.Until(t, 10*time.Second, "only the real client's connection open", func() bool { return s.OpenConnections() == 1 })
}

// A connection holds at most GRPCMaxConcurrentStreams calls: one more
// waits until a call ends. A connection with no call open for
// GRPCIdleTimeout is closed (the client goes idle and reconnects).
func TestStreamsAndIdleTimeout(t *testing.T) {
	limits := config.DefaultLimits()
	limits.GRPCMaxConcurrentStreams, limits.GRPCIdleTimeout = 2, 300*time.Millisecond
	s, cc := startLimited(t, limits)
	health := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var watches []context.CancelFunc
	for range 2 {
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		w, err := health.Watch(wctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
		watches = append(watches, wcancel)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := health.Check(short, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third call beside two open streams: %v, want it to wait (DEADLINE_EXCEEDED)", err)
	}
	watches[0]()
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call once a stream ended: %v", err)
	}
	watches[1]()
	testwait.Until(t, 10*time.Second, "the idle connection closed", func() bool { return s.OpenConnections() == 0 })
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call after the idle close: %v", err)
	}
}
