package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgergrpc"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/ledger/replication"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// expectDenied records that the test itself makes principal touch key
// where it may not, so that checkNodesNeverDenied does not count it.
func (c *tlsCluster) expectDenied(principal, key string) {
	c.provoked = append(c.provoked, [2]string{principal, key})
}

// checkNodesNeverDenied fails t when a metad member refused a key to
// anyone but the test's own attempts (expectDenied), or a bookie refused
// the elected replicator: the key table and the replicator gate must let
// the cluster's own nodes do all their work.
func (c *tlsCluster) checkNodesNeverDenied(t *testing.T) {
	t.Helper()
	for _, m := range c.meta.Members {
		out, err := os.ReadFile(m.LogPath)
		if err != nil {
			t.Error(err)
			continue
		}
		for line := range strings.Lines(string(out)) {
			if !strings.Contains(line, "metad key access denied") {
				continue
			}
			fields := map[string]string{}
			for _, f := range strings.Fields(line) {
				if k, v, ok := strings.Cut(f, "="); ok {
					fields[k] = v
				}
			}
			if !slices.Contains(c.provoked, [2]string{fields["principal"], fields["key"]}) {
				t.Errorf("metad member %s refused a node: %s", m.ID, line)
			}
		}
	}
	for _, b := range c.bookies {
		out, err := os.ReadFile(b.LogPath)
		if err != nil {
			t.Error(err)
			continue
		}
		if i := strings.Index(string(out), "only as the elected replicator"); i >= 0 {
			t.Errorf("bookie %s logged a refused replicator: %s", b.ID, out[max(0, i-300):i+100])
		}
	}
}

// wantKeyDenied checks that err is PERMISSION_DENIED naming the caller,
// the operation and the key.
func wantKeyDenied(t *testing.T, what string, err error, principal, op, key string) {
	t.Helper()
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(msg, principal) ||
		!strings.Contains(msg, "may not "+op) || !strings.Contains(msg, fmt.Sprintf("%q", key)) {
		t.Errorf("%s: %v; want PERMISSION_DENIED naming %s, %s and %q", what, err, principal, op, key)
	}
}

// tlsMetaClient is a metad client of c with files' certificate.
func tlsMetaClient(t *testing.T, c *tlsCluster, files pki.Files) (*metaclient.Client, *mtls.Credentials) {
	t.Helper()
	creds, err := mtls.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := metaclient.New(metaclient.Config{Endpoints: c.meta.Endpoints(), Credentials: creds.Transport(), RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { meta.Close() })
	return meta, creds
}

// tlsLedgerEnv is a ledger client of c with files' certificate.
func tlsLedgerEnv(t *testing.T, c *tlsCluster, files pki.Files) ledger.Env {
	t.Helper()
	meta, creds := tlsMetaClient(t, c, files)
	bookies := ledgergrpc.New(ledgergrpc.Options{Credentials: creds.Transport()})
	t.Cleanup(func() { bookies.Close() })
	return ledger.Env{Meta: ledgermetad.NewStore(meta), Bookies: bookies, Registry: ledgermetad.NewRegistry(meta)}
}

// TestTLSLeastPrivilege runs a TLS cluster of 4 bookies and a broker
// doing their work (topics, produce, consume, re-replication) without a
// single refusal, while each role's certificate is refused what its node
// never does: a bookie writing a credential, deleting every key under
// /strata/ or overwriting another bookie's registration; a broker writing
// an ACL or revoking a bookie's registration lease; a user fencing a
// ledger; a bookie other than the elected replicator fencing, adding to
// or deleting a ledger.
func TestTLSLeastPrivilege(t *testing.T) {
	skipShort(t)
	c := startTLSClusterWith(t, 4, nil, []string{"--autorecovery-interval", "1s", "--autorecovery-grace", "3s"})
	root := c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "root"})
	alice := c.pki.issue(pki.Request{Role: pki.RoleUser, Name: "alice"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cl, err := c.client(ctx, t, root)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	createTopic(t, cl, "orders", 2, nil)
	produceN(t, cl, "orders", 2, "before", 0, 100)

	b1, k1 := c.bookieCerts[0], c.brokerCert
	asB1 := metadpb.NewMetadClient(dial(t, c.meta.Members[0].Listen, b1))
	asK1 := metadpb.NewMetadClient(dial(t, c.meta.Members[1].Listen, k1))
	asRoot := metadpb.NewMetadClient(dial(t, c.meta.Members[2].Listen, root))
	mustExist := func(t *testing.T, key string) {
		t.Helper()
		if resp, err := asRoot.Get(ctx, &metadpb.GetRequest{Key: key}); err != nil || !resp.Found {
			t.Fatalf("%s after the attack: %v, %v", key, resp, err)
		}
	}

	t.Run("bookie certificate writes a credential", func(t *testing.T) {
		key := acl.UserKey("mallory")
		c.expectDenied("bookie:b1", key)
		_, err := asB1.Put(ctx, &metadpb.PutRequest{Key: key, Value: []byte(`{"mechanism":"SCRAM-SHA-512"}`)})
		wantKeyDenied(t, "Put", err, "bookie:b1", "write", key)
		if resp, err := asRoot.Get(ctx, &metadpb.GetRequest{Key: key}); err != nil || resp.Found {
			t.Fatalf("%s: %v, %v", key, resp, err)
		}
		c.expectDenied("bookie:b1", acl.UsersPrefix)
		_, err = asB1.List(ctx, &metadpb.ListRequest{Prefix: acl.UsersPrefix})
		wantKeyDenied(t, "List", err, "bookie:b1", "read", acl.UsersPrefix)
		testwait.UntilNil(t, 10*time.Second, "key denials counted", func() error {
			v, err := c.metricValue(c.meta.Members[0].AdminAddr, `strata_metad_key_denied_total{op="write",role="bookie"}`)
			if err == nil && v != 1 {
				err = fmt.Errorf("counter %v, want 1", v)
			}
			return err
		})
	})

	t.Run("bookie certificate deletes /strata/", func(t *testing.T) {
		c.expectDenied("bookie:b1", `/strata/`)
		_, err := asB1.Delete(ctx, &metadpb.DeleteRequest{Key: "/strata/", Prefix: true})
		wantKeyDenied(t, "Delete", err, "bookie:b1", "delete-prefix", "/strata/")
		_, err = asB1.Txn(ctx, &metadpb.TxnRequest{Ops: []*metadpb.Op{{Op: &metadpb.Op_Delete{Delete: &metadpb.DeleteOp{Key: "/strata/", Prefix: true}}}}})
		wantKeyDenied(t, "Txn", err, "bookie:b1", "delete-prefix", "/strata/")
		mustExist(t, "/strata/topics/orders")
		mustExist(t, "/strata/bookies/registry/b1")
	})

	t.Run("bookie certificate overwrites another bookie's registration", func(t *testing.T) {
		key := "/strata/bookies/registry/b2"
		c.expectDenied("bookie:b1", key)
		_, err := asB1.Put(ctx, &metadpb.PutRequest{Key: key, Value: []byte("x")})
		wantKeyDenied(t, "Put", err, "bookie:b1", "write", key)
		mustExist(t, key)
		stream, err := asB1.Watch(ctx, &metadpb.WatchRequest{Prefix: "/strata/"})
		if err == nil {
			_, err = stream.Recv()
		}
		wantKeyDenied(t, "Watch", err, "bookie:b1", "watch", "/strata/")
	})

	t.Run("broker certificate writes an ACL", func(t *testing.T) {
		key := acl.ACLsPrefix + "topic:orders:allow:user:mallory:write"
		c.expectDenied("broker:k1", key)
		_, err := asK1.Put(ctx, &metadpb.PutRequest{Key: key, Value: []byte("{}")})
		wantKeyDenied(t, "Put", err, "broker:k1", "write", key)
		// A transaction is checked key by key: its compare is allowed
		// (brokers read credentials), its put is not.
		_, err = asK1.Txn(ctx, &metadpb.TxnRequest{
			Compares: []*metadpb.Compare{{Key: acl.UserKey("alice")}},
			Ops:      []*metadpb.Op{{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: key, Value: []byte("{}")}}}},
		})
		wantKeyDenied(t, "Txn", err, "broker:k1", "write", key)
		c.expectDenied("broker:k1", `/strata/`)
		_, err = asK1.Delete(ctx, &metadpb.DeleteRequest{Key: "/strata/", Prefix: true})
		wantKeyDenied(t, "Delete", err, "broker:k1", "delete-prefix", "/strata/")
		// What brokers need they still have.
		if _, err := asK1.List(ctx, &metadpb.ListRequest{Prefix: acl.UsersPrefix}); err != nil {
			t.Fatalf("a broker listing credentials: %v", err)
		}
	})

	t.Run("broker certificate revokes a bookie's registration lease", func(t *testing.T) {
		key := "/strata/bookies/registry/b2"
		resp, err := asK1.Get(ctx, &metadpb.GetRequest{Key: key}) // brokers read registrations
		if err != nil || resp.Kv.GetLease() == 0 {
			t.Fatalf("%s: %v, %v", key, resp, err)
		}
		c.expectDenied("broker:k1", key)
		_, err = asK1.LeaseRevoke(ctx, &metadpb.LeaseRevokeRequest{Id: resp.Kv.Lease})
		wantKeyDenied(t, "LeaseRevoke", err, "broker:k1", "write", key)
		_, err = asK1.LeaseKeepAlive(ctx, &metadpb.LeaseKeepAliveRequest{Id: resp.Kv.Lease})
		wantKeyDenied(t, "LeaseKeepAlive", err, "broker:k1", "write", key)
		mustExist(t, key)
	})

	// An open ledger written with the broker's certificate (the writers'
	// role): the target of the bookie RPCs below, then of the
	// replicator's recovery.
	env := tlsLedgerEnv(t, c, k1)
	meta, _ := tlsMetaClient(t, c, root)
	w, err := ledger.Create(ctx, env, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done, stop := context.WithCancel(context.Background())
		stop()
		_ = w.Close(done) // recovered: Close can only fail; this stops its background work
	})
	const entries = 20
	for range entries {
		if _, err := w.AppendSync(ctx, []byte("entry")); err != nil {
			t.Fatal(err)
		}
	}
	ensemble := w.Metadata().GetFragments()[0].GetBookies()
	var leader string
	testwait.UntilNil(t, 20*time.Second, "a replicator elected", func() error {
		l, err := replication.Leader(ctx, replication.MetaKV(meta))
		if err == nil && l == nil {
			err = fmt.Errorf("none yet")
		}
		if err == nil {
			leader = l.ID
		}
		return err
	})
	// An attacker: a bookie that is not the elected replicator.
	attacker := -1
	for i, b := range c.bookies {
		if b.ID != leader {
			attacker = i
		}
	}
	target := ensemble[0]

	t.Run("user certificate fences a ledger", func(t *testing.T) {
		asAlice := bookiepb.NewBookieClient(dial(t, target, alice))
		_, err := asAlice.Fence(ctx, &bookiepb.FenceRequest{LedgerId: w.ID()})
		wantDenied(t, "user, Fence", err, "needs role broker or bookie or admin")
		_, err = asAlice.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: w.ID(), Fence: true})
		wantDenied(t, "user, ReadEntry with fence", err, "needs role broker or bookie or admin")
	})

	t.Run("bookie certificate fences a ledger", func(t *testing.T) {
		who := "bookie:" + c.bookies[attacker].ID
		asBookie := bookiepb.NewBookieClient(dial(t, target, c.bookieCerts[attacker]))
		_, err := asBookie.Fence(ctx, &bookiepb.FenceRequest{LedgerId: w.ID()})
		wantDenied(t, who+", Fence", err, "only as the elected replicator (now "+leader+"); caller "+who)
		_, err = asBookie.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: w.ID(), Fence: true})
		wantDenied(t, who+", ReadEntry with fence", err, "only as the elected replicator")
		_, err = sendAdd(ctx, asBookie, &bookiepb.AddRequest{LedgerId: w.ID(), EntryId: entries, Payload: []byte("forged")})
		wantDenied(t, who+", AddEntries", err, "only as the elected replicator")
		_, err = asBookie.DeleteLedger(ctx, &bookiepb.DeleteLedgerRequest{LedgerId: w.ID()})
		wantDenied(t, who+", DeleteLedger", err, "needs role broker or admin")
		_, err = asBookie.WriteLAC(ctx, &bookiepb.WriteLACRequest{LedgerId: w.ID(), Lac: entries - 1})
		wantDenied(t, who+", WriteLAC", err, "needs role broker or admin")
		// Reads stay open to bookies: a ReadEntry without fence is served.
		if resp, err := asBookie.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: w.ID(), EntryId: 0}); err != nil || resp.Status != bookiepb.ReadStatus_READ_OK {
			t.Fatalf("%s reading entry 0: %v, %v", who, resp, err)
		}
	})

	// None of it fenced the ledger: its writer still appends.
	if _, err := w.AppendSync(ctx, []byte("entry")); err != nil {
		t.Fatalf("the writer after the attacks: %v", err)
	}
	produceN(t, cl, "orders", 2, "after", 100, 10)

	t.Run("the elected replicator recovers and re-replicates", func(t *testing.T) {
		// Kill a bookie of the open ledger other than the replicator's:
		// after the grace period the replicator recovers the ledger
		// (fencing its writer on the other bookies, writing its metadata)
		// and copies its entries to a live bookie.
		var victim int
		for i, b := range c.bookies {
			if b.ID != leader && slices.Contains(ensemble, b.Listen) {
				victim = i
			}
		}
		c.bookies[victim].Kill()
		store := ledgermetad.NewStore(meta)
		testwait.UntilNil(t, 60*time.Second, "the open ledger recovered and re-replicated off the killed bookie", func() error {
			md, _, err := store.Get(ctx, w.ID())
			if err != nil {
				return err
			}
			if md.GetState() != ledgerpb.LedgerState_CLOSED {
				return fmt.Errorf("ledger %d is %s", md.GetId(), md.GetState())
			}
			for _, f := range md.GetFragments() {
				if slices.Contains(f.GetBookies(), c.bookies[victim].Listen) {
					return fmt.Errorf("fragment %v still names %s", f.GetBookies(), c.bookies[victim].Listen)
				}
			}
			if md.GetLastEntryId() != entries {
				return fmt.Errorf("closed at entry %d, want %d", md.GetLastEntryId(), entries)
			}
			return nil
		})
		// The elected replicator did it (not the writer, nor a broker).
		for _, b := range c.bookies {
			if b.ID != leader {
				continue
			}
			if v, err := c.metricValue(b.AdminAddr, "strata_replication_ledgers_recovered_total"); err != nil || v < 1 {
				t.Fatalf("replicator %s: ledgers recovered %v, %v", b.ID, v, err)
			}
		}
	})
	if got := loadtest.Counts(loadtest.ReadAll(t, cl, "orders", 2)); got[0]+got[1] != 110 {
		t.Fatalf("consumed %v, want 110 records", got)
	}
	// An operator's `strata cluster status` in a broker's container runs
	// with the broker's certificate: every key it reads is open to it
	// (it may still report the killed bookie: exit 2).
	out, err := aclCLI{t: t, c: c, files: k1}.run("", "cluster", "status")
	var exit *exec.ExitError
	if (err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 2)) || strings.Contains(strings.ToLower(out), "permission denied") {
		t.Fatalf("strata cluster status with the broker's certificate: %v\n%s", err, out)
	}
}
