package metad

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/proto/metadpb"
)

// peerOf is a call context whose verified TLS peer has role/name (empty
// role: a plaintext peer), at mtlstest.PeerAddr.
func peerOf(t *testing.T, role, name string) context.Context {
	t.Helper()
	if role == "" {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: mtlstest.PeerAddr})
	}
	return mtlstest.NewCA(t).PeerContext(t, role, name)
}

// TestAuditLogsOperatorChanges: changes to users and ACLs are logged with
// who made them whoever it was; an admin's changes anywhere are; the
// cluster's own writes elsewhere, reads, failed transactions and
// forwarded requests are not.
func TestAuditLogsOperatorChanges(t *testing.T) {
	var out bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&out, nil))}
	admin, broker, plaintext := peerOf(t, pki.RoleAdmin, "root"), peerOf(t, pki.RoleBroker, "k1"), peerOf(t, "", "")
	forwarded := metadata.NewIncomingContext(admin, metadata.Pairs(forwardedKey, "m2"))
	put := func(key string) *metadpb.PutRequest { return &metadpb.PutRequest{Key: key} }
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		req    any
		resp   any
		logged string // "" for no line
	}{
		{"user created by an admin", admin, put("/strata/security/users/bob"), nil, "principal=admin:root"},
		{"ACL by a plaintext caller", plaintext, put("/strata/security/acls/x"), nil, "principal=anonymous"},
		{"credential written by a broker", broker, put("/strata/security/users/eve"), nil, "principal=broker:k1"},
		{"everything deleted by a broker", broker, &metadpb.DeleteRequest{Key: "/strata/", Prefix: true}, nil, "keys=[/strata/*]"},
		{"a topic key by an admin", admin, put("/strata/topics/t"), nil, "principal=admin:root"},
		{"an admin's transaction", admin, &metadpb.TxnRequest{Ops: []*metadpb.Op{{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: "/strata/a"}}}}},
			&metadpb.TxnResponse{Succeeded: true}, "keys=[/strata/a]"},
		{"a topic key by a broker", broker, put("/strata/topics/t"), nil, ""},
		{"a failed transaction", admin, &metadpb.TxnRequest{Ops: []*metadpb.Op{{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: "/strata/security/users/x"}}}}},
			&metadpb.TxnResponse{Succeeded: false}, ""},
		{"a read", admin, &metadpb.GetRequest{Key: "/strata/security/users/bob"}, nil, ""},
		{"forwarded by a follower", forwarded, put("/strata/security/users/bob"), nil, ""},
	} {
		out.Reset()
		h := func(context.Context, any) (any, error) { return tc.resp, nil }
		if _, err := s.audit(tc.ctx, tc.req, &grpc.UnaryServerInfo{FullMethod: "/strata.metad.v1.Metad/X"}, h); err != nil {
			t.Fatal(err)
		}
		line := out.String()
		switch {
		case tc.logged == "" && line != "":
			t.Errorf("%s: logged %q", tc.name, line)
		case tc.logged != "" && (!strings.Contains(line, tc.logged) || !strings.Contains(line, "source=192.0.2.4:5000")):
			t.Errorf("%s: logged %q, want a line with %s and the source", tc.name, line, tc.logged)
		}
	}
}
