package grpcserve

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
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
	s, err := New(proctest.FreeAddr(t), true, Secure(server, a)...)
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
