package authz

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/rpctest"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// TestDefaultPolicy is the table of A1-A7, role by role.
func TestDefaultPolicy(t *testing.T) {
	const (
		metad, bookie, broker, admin, user = pki.RoleMetad, pki.RoleBookie, pki.RoleBroker, pki.RoleAdmin, pki.RoleUser
	)
	all := []string{metad, bookie, broker, admin, user}
	for _, tc := range []struct {
		rule, method string
		allowed      []string
	}{
		{"A1", bookiepb.Bookie_AddEntries_FullMethodName, []string{broker, bookie, admin}},
		{"A1", bookiepb.Bookie_Fence_FullMethodName, []string{broker, bookie, admin}},
		{"A1", bookiepb.Bookie_WriteLAC_FullMethodName, []string{broker, admin}},
		{"A1", bookiepb.Bookie_DeleteLedger_FullMethodName, []string{broker, admin}},
		{"A2", bookiepb.Bookie_ReadEntry_FullMethodName, []string{broker, bookie, admin}},
		{"A2", bookiepb.Bookie_ReadEntries_FullMethodName, []string{broker, bookie, admin}},
		{"A2", bookiepb.Bookie_ReadLAC_FullMethodName, []string{broker, bookie, admin}},
		{"A2", bookiepb.Bookie_Info_FullMethodName, []string{broker, bookie, admin}},
		{"A3", metadpb.Metad_MemberAdd_FullMethodName, []string{metad, admin}},
		{"A3", metadpb.Metad_MemberRemove_FullMethodName, []string{metad, admin}},
		{"A3", metadpb.Metad_RegisterMember_FullMethodName, []string{metad, admin}},
		{"A3", metadpb.Metad_Snapshot_FullMethodName, []string{metad, admin}},
		{"A4", metadpb.Metad_Txn_FullMethodName, []string{metad, bookie, broker, admin}},
		{"A4", metadpb.Metad_Watch_FullMethodName, []string{metad, bookie, broker, admin}},
		{"A4", metadpb.Metad_LeaseKeepAlive_FullMethodName, []string{metad, bookie, broker, admin}},
		{"A4", metadpb.Metad_Status_FullMethodName, []string{metad, bookie, broker, admin}},
		{"A5", brokerpb.Broker_Produce_FullMethodName, []string{user, admin, broker}},
		{"A5", brokerpb.Broker_DeleteTopic_FullMethodName, []string{user, admin, broker}},
		{"A5", brokerpb.Broker_FetchOffsets_FullMethodName, []string{user, admin, broker}},
		{"A6", "/grpc.health.v1.Health/Check", all},
		{"A6", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", all},
		{"A7", "/strata.bookie.v2.Bookie/AddEntries", nil},
		{"A7", "/strata.metad.v1.Metad", nil},
		{"A7", "", nil},
	} {
		for _, role := range all {
			want := false
			for _, r := range tc.allowed {
				want = want || r == role
			}
			if got := DefaultPolicy().Allowed(tc.method, role); got != want {
				t.Errorf("%s: %s calling %q: allowed %t, want %t", tc.rule, role, tc.method, got, want)
			}
		}
	}
}

// Every method of every Strata service is named by the table (A7 would
// otherwise make a new RPC unreachable with TLS on, unnoticed).
func TestDefaultPolicyCoversEveryMethod(t *testing.T) {
	p := DefaultPolicy()
	for _, sd := range []struct {
		name    string
		methods []string
	}{
		{bookiepb.Bookie_ServiceDesc.ServiceName, names(bookiepb.Bookie_ServiceDesc.Methods, bookiepb.Bookie_ServiceDesc.Streams)},
		{metadpb.Metad_ServiceDesc.ServiceName, names(metadpb.Metad_ServiceDesc.Methods, metadpb.Metad_ServiceDesc.Streams)},
		{brokerpb.Broker_ServiceDesc.ServiceName, names(brokerpb.Broker_ServiceDesc.Methods, brokerpb.Broker_ServiceDesc.Streams)},
	} {
		for _, m := range sd.methods {
			if roles, ok := p.Roles("/" + sd.name + "/" + m); !ok || len(roles) == 0 {
				t.Errorf("/%s/%s: no entry", sd.name, m)
			}
		}
	}
}

func names(methods []grpc.MethodDesc, streams []grpc.StreamDesc) []string {
	var out []string
	for _, m := range methods {
		out = append(out, m.MethodName)
	}
	for _, s := range streams {
		out = append(out, s.StreamName)
	}
	return out
}

// A denial answers PERMISSION_DENIED naming what was missing, is counted,
// and is logged once per (principal, method).
func TestCheck(t *testing.T) {
	ca := mtlstest.NewCA(t)
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	a, err := New(DefaultPolicy(), "bookie", slog.New(slog.NewTextHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	fence := bookiepb.Bookie_Fence_FullMethodName
	if err := a.Check(ca.PeerContext(t, pki.RoleBroker, "k1"), fence); err != nil {
		t.Fatalf("a broker fencing: %v", err)
	}
	alice := ca.PeerContext(t, pki.RoleUser, "alice")
	for range 3 {
		err := a.Check(alice, fence)
		if status.Code(err) != codes.PermissionDenied || rpcerror.Reason(err) != rpcerror.ReasonDenied || rpcerror.Retryable(err) {
			t.Fatalf("a user fencing: %v", err)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "needs role broker or bookie or admin") || !strings.Contains(msg, "user:alice") {
			t.Fatalf("message %q names neither the roles needed nor the caller", msg)
		}
	}
	if err := a.Check(alice, bookiepb.Bookie_Info_FullMethodName); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a user asking Info: %v", err)
	}
	if err := a.Check(context.Background(), fence); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("no certificate: %v", err)
	}
	var m dto.Metric
	if err := a.denied.WithLabelValues(fence, pki.RoleUser).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 3 {
		t.Fatalf("denials of user Fence counted %v, want 3", got)
	}
	if n := strings.Count(logs.String(), "call denied"); n != 3 {
		t.Fatalf("logged %d denials, want 3 (one per principal and method):\n%s", n, logs.String())
	}
	if _, err := New(DefaultPolicy(), "bookie", slog.New(slog.DiscardHandler), reg); err == nil {
		t.Fatal("a second registration of the counter succeeded")
	}
}

type metadStub struct {
	metadpb.UnimplementedMetadServer
}

func (metadStub) Put(context.Context, *metadpb.PutRequest) (*metadpb.PutResponse, error) {
	return &metadpb.PutResponse{}, nil
}

// A call the caller's role may not make is refused before gRPC reads its
// request: a user certificate sending metad a large Put costs metad no
// decoding (it was read whole, up to 16 MiB, and only then refused).
func TestRefusedBeforeTheBodyIsRead(t *testing.T) {
	ca := mtlstest.NewCA(t)
	a, err := New(DefaultPolicy(), "metad", slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	var in rpctest.Received
	srv := grpc.NewServer(append([]grpc.ServerOption{ca.Credentials(t, pki.RoleMetad, "m1").ServerOption(), grpc.StatsHandler(&in)}, a.ServerOptions()...)...)
	metadpb.RegisterMetadServer(srv, metadStub{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	call := func(role string) error {
		cc, err := grpc.NewClient(ln.Addr().String(), ca.Credentials(t, role, role+"-1").DialOption())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = metadpb.NewMetadClient(cc).Put(ctx, &metadpb.PutRequest{Key: "/k", Value: make([]byte, 1<<20)})
		return err
	}
	if err := call(pki.RoleUser); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a user's Put: %v, want PERMISSION_DENIED", err)
	}
	if n := in.Count(); n != 0 {
		t.Fatalf("the refused call's request was received (%d messages)", n)
	}
	if err := call(pki.RoleBroker); err != nil {
		t.Fatalf("a broker's Put: %v", err)
	}
	if n := in.Count(); n != 1 {
		t.Fatalf("an allowed call: %d messages received, want 1", n)
	}
}
