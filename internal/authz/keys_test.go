package authz

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/rpcerror"
)

// TestDefaultKeyPolicy is the table of K1-K9: for each operation on a key
// (or over a prefix), the roles allowed; every other role is refused.
// Callers are named b1 (bookie), k1 (broker) and alike for the others.
func TestDefaultKeyPolicy(t *testing.T) {
	const (
		metad, bookie, broker, admin, user = pki.RoleMetad, pki.RoleBookie, pki.RoleBroker, pki.RoleAdmin, pki.RoleUser
		read, write, watch, delPrefix      = KeyRead, KeyWrite, KeyWatch, KeyDeletePrefix
	)
	names := map[string]string{metad: "m1", bookie: "b1", broker: "k1", admin: "root", user: "alice"}
	all := []string{metad, bookie, broker, admin, user}
	for _, tc := range []struct {
		rule    string
		op      KeyOp
		key     string
		prefix  bool
		allowed []string
	}{
		// K3: nothing outside the table, whatever the operation.
		{"K3", read, "/a", false, []string{metad, admin}},
		{"K3", write, "/strata/unknown", false, []string{metad, admin}},
		{"K3", read, "", true, []string{metad, admin}},
		{"K3", watch, "/strata/", true, []string{metad, admin}},
		{"K3", delPrefix, "/strata/", true, []string{metad, admin}},
		{"K3", delPrefix, "", true, []string{metad, admin}},
		{"K3", read, "/strata/security/", true, []string{metad, admin}},
		// K5: brokers.
		{"K5", write, "/strata/topics/orders", false, []string{metad, admin, broker}},
		{"K5", read, "/strata/topics/", true, []string{metad, admin, broker}},
		{"K5", watch, "/strata/topics/", true, []string{metad, admin, broker}},
		{"K5", delPrefix, "/strata/topics/", true, []string{metad, admin}},
		{"K5", read, "/strata/topicsX", false, []string{metad, admin}},
		{"K5", write, "/strata/owners/orders/0", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/assignments/orders/0", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/partitions/orders/0", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/ledger-index/00000000000000000042", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/controller", false, []string{metad, admin, broker}},
		{"K5", watch, "/strata/controller", true, []string{metad, admin, broker}},
		{"K5", write, "/strata/producer-ids-next", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/tier/bucket-cookie", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/sasl/decoy-key", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/brokers/k1", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/brokers/k2", false, []string{metad, admin}},
		{"K5", write, "/strata/brokers/k1/x", false, []string{metad, admin}},
		{"K5", watch, "/strata/brokers/", true, []string{metad, admin, broker}},
		{"K5", write, "/strata/broker-node-ids/k1", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/broker-node-ids/k2", false, []string{metad, admin}},
		{"K5", read, "/strata/broker-node-ids/k2", false, []string{metad, admin, broker}},
		{"K5", write, "/strata/broker-node-ids-next", false, []string{metad, admin, broker}},
		{"K5", read, "/strata/broker-drains/", true, []string{metad, admin, broker}},
		{"K5", write, "/strata/broker-drains/k1", false, []string{metad, admin}},
		// K6: credentials and ACLs.
		{"K6", write, "/strata/security/users/alice", false, []string{metad, admin}},
		{"K6", read, "/strata/security/users/alice", false, []string{metad, admin, broker}},
		{"K6", watch, "/strata/security/users/", true, []string{metad, admin, broker}},
		{"K6", write, "/strata/security/acls/topic:orders", false, []string{metad, admin}},
		{"K6", read, "/strata/security/acls/", true, []string{metad, admin, broker}},
		{"K6", delPrefix, "/strata/security/acls/", true, []string{metad, admin}},
		// K7: ledger metadata, digest keys included.
		{"K7", read, "/strata/ledgers/00000000000000000042", false, []string{metad, admin, broker, bookie}},
		{"K7", read, "/strata/ledgers/", true, []string{metad, admin, broker, bookie}},
		{"K7", write, "/strata/ledgers/00000000000000000042", false, []string{metad, admin, broker, bookie}},
		{"K7", delPrefix, "/strata/ledgers/", true, []string{metad, admin}},
		{"K7", write, "/strata/ledgers-next-id", false, []string{metad, admin, broker}},
		{"K7", read, "/strata/bookies/registry/", true, []string{metad, admin, broker, bookie}},
		// K8: bookies.
		{"K8", write, "/strata/bookies/registry/b1", false, []string{metad, admin, bookie}},
		{"K8", write, "/strata/bookies/registry/b2", false, []string{metad, admin}},
		{"K8", write, "/strata/bookies/cookies/b1", false, []string{metad, admin, bookie}},
		{"K8", write, "/strata/bookies/cookies/b2", false, []string{metad, admin}},
		{"K8", read, "/strata/bookies/cookies/", true, []string{metad, admin, bookie, broker}},
		{"K8", delPrefix, "/strata/bookies/cookies/b1", true, []string{metad, admin}},
		{"K8", watch, "/strata/bookies/decommissioned/b1", true, []string{metad, admin, bookie}},
		{"K8", write, "/strata/bookies/decommissioned/b1", false, []string{metad, admin}},
		{"K8", write, "/strata/replication/leader", false, []string{metad, admin, bookie}},
		{"K8", read, "/strata/replication/missing/", true, []string{metad, admin, bookie, broker}},
		{"K9", read, "/strata/bookies/decommissioned/", true, []string{metad, admin, bookie, broker}},
		{"K9", watch, "/strata/bookies/decommissioned/", true, []string{metad, admin, bookie}},
	} {
		for _, role := range all {
			want := false
			for _, r := range tc.allowed {
				want = want || r == role
			}
			id := pki.Identity{Role: role, Name: names[role]}
			if got := DefaultKeyPolicy().Allowed(id, tc.op, tc.key, tc.prefix); got != want {
				t.Errorf("%s: %s: %s %q (prefix %t): allowed %t, want %t", tc.rule, id, tc.op, tc.key, tc.prefix, got, want)
			}
		}
	}
}

// Every grant that writes also reads the same keys: metad checks a
// compare-and-set's compare as a read, and a writer that could not read
// what it writes could not use compare-and-set.
func TestDefaultKeyPolicyWritersRead(t *testing.T) {
	p := DefaultKeyPolicy()
	for _, g := range p.Grants {
		if g.Ops&KeyWrite == 0 {
			continue
		}
		id := pki.Identity{Role: g.Role, Name: "n1"}
		key := g.Prefix + "n1"
		if !g.Own {
			key = g.Prefix
		}
		if !p.Allowed(id, KeyRead, key, false) {
			t.Errorf("%s may write %q but not read it", g.Role, key)
		}
	}
}

// A denial is PERMISSION_DENIED naming the caller, the operation, the key
// and who may; it is counted, and logged once per (caller, op, key).
func TestKeyAuthorizerCheck(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	a, err := NewKeyAuthorizer(DefaultKeyPolicy(), slog.New(slog.NewTextHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	b1 := pki.Identity{Role: pki.RoleBookie, Name: "b1"}
	if err := a.Check(b1, KeyWrite, "/strata/bookies/registry/b1", false); err != nil {
		t.Fatalf("a bookie writing its registration: %v", err)
	}
	for range 2 {
		err := a.Check(b1, KeyWrite, "/strata/security/users/alice", false)
		if status.Code(err) != codes.PermissionDenied || rpcerror.Reason(err) != rpcerror.ReasonDenied || rpcerror.Retryable(err) {
			t.Fatalf("a bookie writing a credential: %v", err)
		}
		msg := status.Convert(err).Message()
		for _, want := range []string{"bookie:b1", "may not write key", `"/strata/security/users/alice"`, "open to metad, admin"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
	}
	err = a.Check(b1, KeyDeletePrefix, "/strata/", true)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `may not delete-prefix prefix "/strata/"`) {
		t.Errorf("delete of a prefix: %v", err)
	}
	err = a.Check(b1, KeyWrite, "/strata/bookies/registry/b2", false)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "bookie (its own /strata/bookies/registry/NAME)") {
		t.Errorf("another bookie's registration: %v", err)
	}
	var m dto.Metric
	if err := a.denied.WithLabelValues("write", pki.RoleBookie).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 3 {
		t.Errorf("bookie writes denied: counted %v, want 3", got)
	}
	if n := strings.Count(logs.String(), "metad key access denied"); n != 3 {
		t.Errorf("logged %d denials, want 3 (one per caller, operation and key):\n%s", n, logs.String())
	}
	if _, err := NewKeyAuthorizer(DefaultKeyPolicy(), slog.New(slog.DiscardHandler), reg); err == nil {
		t.Fatal("a second registration of the counter succeeded")
	}
}

func TestKeyOpString(t *testing.T) {
	for op, want := range map[KeyOp]string{
		KeyRead: "read", KeyWrite: "write", KeyWatch: "watch", KeyDeletePrefix: "delete-prefix",
		KeyRead | KeyWatch: "read+watch", 0: "none",
	} {
		if got := op.String(); got != want {
			t.Errorf("%d: %q, want %q", op, got, want)
		}
	}
}
