package metad

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/metad/kv"
	"github.com/strata-log/strata/proto/metadpb"
)

// keyServer is a member's request checks over a store holding bookie
// b1's registration on lease 7 (no Raft: a refused call never reaches it).
func keyServer(t *testing.T) *Server {
	t.Helper()
	keys, err := authz.NewKeyAuthorizer(authz.DefaultKeyPolicy(), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{MaxTxnOps: 128}, store: kv.New(kv.Options{}), keys: keys}
	for i, cmd := range []*metadpb.Command{
		{Command: &metadpb.Command_LeaseGrant{LeaseGrant: &metadpb.LeaseGrantCommand{Id: 7, TtlMs: 1000}}},
		{Command: &metadpb.Command_Txn{Txn: &metadpb.TxnRequest{Ops: []*metadpb.Op{{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{
			Key: "/strata/bookies/registry/b1", Value: []byte("b1"), Lease: 7}}}}}}},
	} {
		if _, err := s.store.Apply(uint64(i+1), cmd); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// wantRefused checks that err is PERMISSION_DENIED and its message holds
// each of want.
func wantRefused(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("%s: %v, want PERMISSION_DENIED", what, err)
		return
	}
	for _, w := range want {
		if msg := status.Convert(err).Message(); !strings.Contains(msg, w) {
			t.Errorf("%s: message %q lacks %q", what, msg, w)
		}
	}
}

// Every key a transaction names is checked: compares as reads, puts and
// one-key deletes as writes, deletes of a prefix over the prefix, and a
// put's lease as a write of every key already on it.
func TestCheckTxn(t *testing.T) {
	s := keyServer(t)
	ca := mtlstest.NewCA(t)
	b1 := ca.PeerContext(t, pki.RoleBookie, "b1")
	k1 := ca.PeerContext(t, pki.RoleBroker, "k1")
	root := ca.PeerContext(t, pki.RoleAdmin, "root")
	put := func(key string, lease int64) *metadpb.Op {
		return &metadpb.Op{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: key, Lease: lease}}}
	}
	del := func(key string, prefix bool) *metadpb.Op {
		return &metadpb.Op{Op: &metadpb.Op_Delete{Delete: &metadpb.DeleteOp{Key: key, Prefix: prefix}}}
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		txn  *metadpb.TxnRequest
		want []string // nil: allowed
	}{
		{"bookie writes its registration", b1, &metadpb.TxnRequest{
			Compares: []*metadpb.Compare{{Key: "/strata/bookies/registry/b1", Version: 1}},
			Ops:      []*metadpb.Op{put("/strata/bookies/registry/b1", 7)}}, nil},
		{"bookie writes a credential", b1, &metadpb.TxnRequest{Ops: []*metadpb.Op{put("/strata/security/users/alice", 0)}},
			[]string{"bookie:b1 may not write key", "/strata/security/users/alice"}},
		{"bookie compares a credential", b1, &metadpb.TxnRequest{
			Compares: []*metadpb.Compare{{Key: "/strata/security/users/alice"}},
			Ops:      []*metadpb.Op{put("/strata/bookies/registry/b1", 0)}},
			[]string{"may not read key", "/strata/security/users/alice"}},
		{"bookie deletes /strata/", b1, &metadpb.TxnRequest{Ops: []*metadpb.Op{del("/strata/", true)}},
			[]string{`may not delete-prefix prefix "/strata/"`}},
		{"broker deletes a ledger", k1, &metadpb.TxnRequest{Ops: []*metadpb.Op{del("/strata/ledgers/00000000000000000042", false)}}, nil},
		{"broker deletes every ledger", k1, &metadpb.TxnRequest{Ops: []*metadpb.Op{del("/strata/ledgers/", true)}},
			[]string{"delete-prefix", "/strata/ledgers/"}},
		{"broker writes on a bookie's lease", k1, &metadpb.TxnRequest{Ops: []*metadpb.Op{put("/strata/topics/t", 7)}},
			[]string{"broker:k1 may not write key", "/strata/bookies/registry/b1", "(a key of lease 7)"}},
		{"broker checks a credential and writes an ACL", k1, &metadpb.TxnRequest{
			Compares: []*metadpb.Compare{{Key: "/strata/security/users/alice"}},
			Ops:      []*metadpb.Op{put("/strata/security/acls/x", 0)}},
			[]string{"may not write key", "/strata/security/acls/x"}},
		{"admin deletes everything", root, &metadpb.TxnRequest{Ops: []*metadpb.Op{del("", true)}}, nil},
		{"no certificate", context.Background(), &metadpb.TxnRequest{Ops: []*metadpb.Op{put("/strata/topics/t", 0)}},
			[]string{"names no Strata role"}},
	} {
		err := s.checkTxn(tc.ctx, tc.txn)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		wantRefused(t, tc.name, err, tc.want...)
	}
	// Without TLS nothing is checked.
	plain := &Server{store: s.store}
	if err := plain.checkTxn(context.Background(), &metadpb.TxnRequest{Ops: []*metadpb.Op{del("", true)}}); err != nil {
		t.Fatalf("without TLS: %v", err)
	}
}

// watchStream is a Watch stream that only has a context.
type watchStream struct {
	grpc.ServerStreamingServer[metadpb.WatchResponse]
	ctx context.Context
}

func (w watchStream) Context() context.Context { return w.ctx }

// Every key-value call of the service checks its keys before anything
// else: refused calls never reach Raft (this server has none).
func TestServiceChecksKeys(t *testing.T) {
	s := keyServer(t)
	v := &service{s: s}
	ca := mtlstest.NewCA(t)
	b2 := ca.PeerContext(t, pki.RoleBookie, "b2")
	users := "/strata/security/users/alice"
	_, err := v.Get(b2, &metadpb.GetRequest{Key: users})
	wantRefused(t, "Get", err, "bookie:b2 may not read key")
	_, err = v.List(b2, &metadpb.ListRequest{Prefix: "/strata/"})
	wantRefused(t, "List", err, `may not read prefix "/strata/"`)
	_, err = v.Put(b2, &metadpb.PutRequest{Key: users})
	wantRefused(t, "Put", err, "may not write key")
	_, err = v.Put(b2, &metadpb.PutRequest{Key: "/strata/bookies/registry/b1"})
	wantRefused(t, "Put of another bookie's registration", err, "bookie (its own /strata/bookies/registry/NAME)")
	_, err = v.Delete(b2, &metadpb.DeleteRequest{Key: "/strata/", Prefix: true})
	wantRefused(t, "Delete", err, "may not delete-prefix")
	_, err = v.Txn(b2, &metadpb.TxnRequest{Ops: []*metadpb.Op{{Op: &metadpb.Op_Delete{Delete: &metadpb.DeleteOp{Key: users}}}}})
	wantRefused(t, "Txn", err, "may not write key")
	err = v.Watch(&metadpb.WatchRequest{Prefix: "/strata/security/"}, watchStream{ctx: b2})
	wantRefused(t, "Watch", err, `may not watch prefix "/strata/security/"`)
	// Bookie b1's registration lease is b1's: b2 may neither renew nor
	// revoke it.
	_, err = v.LeaseKeepAlive(b2, &metadpb.LeaseKeepAliveRequest{Id: 7})
	wantRefused(t, "LeaseKeepAlive", err, "(a key of lease 7)")
	_, err = v.LeaseRevoke(b2, &metadpb.LeaseRevokeRequest{Id: 7})
	wantRefused(t, "LeaseRevoke", err, "(a key of lease 7)")
	if err := s.checkLease(ca.PeerContext(t, pki.RoleBookie, "b1"), 7); err != nil {
		t.Fatalf("b1 renewing its own lease: %v", err)
	}
}
