package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// aclCLI runs the strata CLI against a TLS cluster with files' certificate
// (or, with user set, a password login) and returns its output.
type aclCLI struct {
	t     *testing.T
	c     *tlsCluster
	files pki.Files
	env   []string
}

func (a aclCLI) run(stdin string, args ...string) (string, error) {
	base := []string{"--metad", strings.Join(a.c.meta.Endpoints(), ","), "--broker", a.c.broker.Listen,
		"--timeout", "15s", "--tls-ca", a.files.CA}
	if a.files.Cert != "" {
		base = append(base, "--tls-cert", a.files.Cert, "--tls-key", a.files.Key)
	}
	cmd := exec.Command(bins["strata"], append(base, args...)...)
	cmd.Env = append(cmd.Environ(), append([]string{"STRATA_PROFILE=" + filepath.Join(a.t.TempDir(), "none.json"),
		"STRATA_METAD=", "STRATA_BROKER=", "STRATA_TLS_CA=", "STRATA_TLS_CERT=", "STRATA_TLS_KEY=", "STRATA_PASSWORD="}, a.env...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (a aclCLI) must(stdin string, args ...string) string {
	a.t.Helper()
	out, err := a.run(stdin, args...)
	if err != nil {
		a.t.Fatalf("strata %v: %v\n%s", args, err, out)
	}
	return out
}

// denied reports whether err is a refusal naming what was missing.
func denied(err error, principal, op string) bool {
	return err != nil && strings.Contains(err.Error(), "permission denied") &&
		strings.Contains(err.Error(), principal) && strings.Contains(err.Error(), op)
}

// produceOne writes one record to topic with a new producer (a refused
// producer stays refused).
func produceOne(ctx context.Context, cl *client.Client, topic string) error {
	p, err := cl.NewProducer(client.ProducerConfig{})
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	_, err = p.ProduceSync(ctx, &client.Record{Topic: topic, Partition: 0, Value: []byte("v")})
	return err
}

// TestACL runs a TLS cluster and checks the ACL contract (internal/acl)
// with real processes: a user without WRITE cannot produce and without
// READ cannot fetch or join a group, until `strata acl add` allows it; a
// deny overrides an allow; prefixed ACLs match; passwords log in (over
// TLS only) and a wrong one is refused.
func TestACL(t *testing.T) {
	skipShort(t)
	c := startTLSCluster(t)
	admin := c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "root"})
	alice := c.pki.issue(pki.Request{Role: pki.RoleUser, Name: "alice"})
	asAdmin := aclCLI{t: t, c: c, files: admin}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The admin certificate is a super-user: it creates the topics.
	adminCl, err := c.client(ctx, t, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer adminCl.Close()
	for _, topic := range []string{"orders", "logs-app", "other"} {
		createTopic(t, adminCl, topic, 1, nil)
		if err := produceOne(ctx, adminCl, topic); err != nil {
			t.Fatalf("admin produce to %s: %v", topic, err)
		}
	}

	aliceCl, err := c.client(ctx, t, alice)
	if err != nil {
		t.Fatalf("alice connects (metadata lists nothing she may not describe): %v", err)
	}
	defer aliceCl.Close()
	raw := brokerpb.NewBrokerClient(dial(t, c.broker.Listen, alice))
	fetch := func(topic string) error {
		_, err := raw.Fetch(ctx, &brokerpb.FetchRequest{Partitions: []*brokerpb.FetchPartition{{Topic: topic, Offset: 0}}, MaxWaitMs: 10})
		return err
	}
	join := func(group string) error {
		_, err := raw.GroupHeartbeat(ctx, &brokerpb.GroupHeartbeatRequest{GroupId: group, MemberEpoch: 0,
			SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 10_000, SubscribedTopics: []string{"orders"}})
		return err
	}

	t.Run("no ACL, no access", func(t *testing.T) {
		// The client's metadata lookup is refused first (no DESCRIBE, which
		// WRITE or READ would imply); the Produce call itself needs WRITE.
		if err := produceOne(ctx, aliceCl, "orders"); !denied(err, "User:alice", `topic "orders"`) {
			t.Errorf("produce: %v; want permission denied naming User:alice and the topic", err)
		}
		_, err := raw.Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{{Topic: "orders", Partition: 0, Records: []byte("x")}}})
		if status.Code(err) != codes.PermissionDenied || !denied(err, "User:alice", "WRITE") {
			t.Errorf("raw produce: %v; want PERMISSION_DENIED naming User:alice and WRITE", err)
		}
		if err := fetch("orders"); status.Code(err) != codes.PermissionDenied || !denied(err, "User:alice", "READ") {
			t.Errorf("fetch: %v; want PERMISSION_DENIED naming User:alice and READ", err)
		}
		if err := join("g1"); status.Code(err) != codes.PermissionDenied || !denied(err, "User:alice", `group "g1"`) {
			t.Errorf("join: %v; want PERMISSION_DENIED naming group g1", err)
		}
		if topics, err := aliceCl.ListTopics(ctx, true); err != nil || len(topics) != 0 {
			t.Errorf("list topics: %v %v; want none she may describe", topics, err)
		}
		testwait.UntilNil(t, 5*time.Second, "denials counted", func() error {
			v, err := c.metricValue(c.broker.AdminAddr, `strata_broker_acl_denied_total{operation="write",resource="topic"}`)
			if err == nil && v < 1 {
				err = fmt.Errorf("counter %v", v)
			}
			return err
		})
	})

	t.Run("acl add allows", func(t *testing.T) {
		asAdmin.must("", "acl", "add", "--allow", "--principal", "User:alice", "--operation", "write", "--topic", "orders")
		asAdmin.must("", "acl", "add", "--allow", "--principal", "User:alice", "--operation", "read", "--topic", "orders")
		asAdmin.must("", "acl", "add", "--allow", "--principal", "User:alice", "--operation", "read", "--group", "g1")
		testwait.UntilNil(t, 10*time.Second, "alice produces", func() error { return produceOne(ctx, aliceCl, "orders") })
		testwait.UntilNil(t, 10*time.Second, "alice fetches", func() error { return fetch("orders") })
		testwait.UntilNil(t, 30*time.Second, "alice joins g1", func() error { return join("g1") })
		if err := fetch("other"); !denied(err, "User:alice", "READ") {
			t.Errorf("fetch of another topic: %v", err)
		}
		if topics, err := aliceCl.ListTopics(ctx, true); err != nil || len(topics) != 1 || topics[0].Name != "orders" {
			t.Errorf("list topics: %v %v; want orders only", topics, err)
		}
		out := asAdmin.must("", "acl", "list")
		if !strings.Contains(out, "User:alice") || strings.Count(out, "\n") != 4 {
			t.Errorf("acl list:\n%s", out)
		}
	})

	t.Run("deny overrides allow", func(t *testing.T) {
		asAdmin.must("", "acl", "add", "--deny", "--principal", "User:*", "--operation", "write", "--topic", "orders")
		testwait.UntilNil(t, 10*time.Second, "alice refused again", func() error {
			if err := produceOne(ctx, aliceCl, "orders"); !denied(err, "User:alice", "WRITE") {
				return fmt.Errorf("produce: %v", err)
			}
			return nil
		})
		asAdmin.must("", "acl", "remove", "--deny", "--principal", "User:*", "--operation", "write", "--topic", "orders")
		testwait.UntilNil(t, 10*time.Second, "alice produces after the deny is removed", func() error { return produceOne(ctx, aliceCl, "orders") })
	})

	t.Run("prefixed", func(t *testing.T) {
		if err := fetch("logs-app"); !denied(err, "User:alice", "READ") {
			t.Fatalf("fetch before the ACL: %v", err)
		}
		asAdmin.must("", "acl", "add", "--allow", "--principal", "User:alice", "--operation", "read", "--topic", "logs-", "--prefixed")
		testwait.UntilNil(t, 10*time.Second, "prefixed read", func() error { return fetch("logs-app") })
		if err := fetch("other"); !denied(err, "User:alice", "READ") {
			t.Errorf("fetch outside the prefix: %v", err)
		}
	})

	t.Run("internal topics", func(t *testing.T) {
		asAdmin.must("", "acl", "add", "--allow", "--principal", "User:alice", "--operation", "all", "--topic", "*")
		testwait.UntilNil(t, 10*time.Second, "alice may read other", func() error { return fetch("other") })
		_, err := raw.Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{{Topic: "__consumer_offsets", Partition: 0, Records: []byte("x")}}})
		if !denied(err, "User:alice", "internal") {
			t.Errorf("produce to __consumer_offsets: %v", err)
		}
		asAdmin.must("", "acl", "remove", "--allow", "--principal", "User:alice", "--operation", "all", "--topic", "*")
	})

	t.Run("passwords", func(t *testing.T) {
		out := asAdmin.must("s3cret-bob\n", "user", "create", "bob", "--password-stdin")
		if !strings.Contains(out, "SCRAM-SHA-256") {
			t.Errorf("user create: %s", out)
		}
		if out := asAdmin.must("", "user", "list"); !strings.Contains(out, "bob") || strings.Contains(out, "s3cret") {
			t.Errorf("user list:\n%s", out)
		}
		login := func(password string) (*client.Client, error) {
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			return client.New(cctx, client.Config{Brokers: []string{c.broker.Listen}, ClientID: "bob", RequestTimeout: 5 * time.Second,
				TLSCAFile: c.pki.caFile, User: "bob", Password: password})
		}
		var bob *client.Client
		testwait.UntilNil(t, 10*time.Second, "bob logs in with his password", func() error {
			var err error
			bob, err = login("s3cret-bob")
			return err
		})
		defer bob.Close()
		if err := produceOne(ctx, bob, "orders"); !denied(err, "User:bob", `topic "orders"`) {
			t.Errorf("bob without ACL: %v", err)
		}
		asAdmin.must("", "acl", "add", "--allow", "--principal", "User:bob", "--operation", "write", "--topic", "ord", "--prefixed")
		testwait.UntilNil(t, 10*time.Second, "bob produces", func() error { return produceOne(ctx, bob, "orders") })

		if cl, err := login("wrong"); err == nil {
			cl.Close()
			t.Error("a wrong password logged in")
		} else if !strings.Contains(err.Error(), "wrong user name or password") {
			t.Errorf("a wrong password: %v; want it refused as such", err)
		}
		// The CLI logs in with --user and $STRATA_PASSWORD, the CA only.
		asBob := aclCLI{t: t, c: c, files: pki.Files{CA: c.pki.caFile}, env: []string{"STRATA_PASSWORD=s3cret-bob"}}
		asBob.must("from-cli\n", "--user", "bob", "produce", "orders")
		wrong := aclCLI{t: t, c: c, files: pki.Files{CA: c.pki.caFile}, env: []string{"STRATA_PASSWORD=nope"}}
		if out, err := wrong.run("x\n", "--user", "bob", "produce", "orders"); err == nil || !strings.Contains(out, "wrong user name or password") {
			t.Errorf("CLI with a wrong password: %v\n%s", err, out)
		}
		// Deleting the user refuses its password from then on (the cache
		// is keyed by the record's revision).
		asAdmin.must("", "user", "delete", "bob")
		testwait.UntilNil(t, 10*time.Second, "bob refused after delete", func() error {
			if err := produceOne(ctx, bob, "orders"); err == nil || !strings.Contains(err.Error(), "wrong user name or password") {
				return fmt.Errorf("produce: %v", err)
			}
			return nil
		})
	})

	t.Run("password over plaintext refused", func(t *testing.T) {
		_, err := client.New(ctx, client.Config{Brokers: []string{c.broker.Listen}, User: "bob", Password: "x"})
		if err == nil || !strings.Contains(err.Error(), "TLS") {
			t.Errorf("client without a CA: %v", err)
		}
		plain := aclCLI{t: t, c: c, files: pki.Files{}, env: []string{"STRATA_PASSWORD=x"}}
		if out, err := plain.run("", "--user", "bob", "topic", "list"); err == nil || !strings.Contains(out, "TLS") {
			t.Errorf("CLI --user without TLS: %v\n%s", err, out)
		}
		// gRPC itself refuses to put the password on a plaintext connection.
		cc, err := grpc.NewClient(c.broker.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(client.PasswordCredentials("bob", "x")))
		if err == nil {
			cc.Close()
			t.Error("gRPC accepted password credentials on a plaintext connection")
		} else if !strings.Contains(err.Error(), "transport level security") {
			t.Errorf("password on a plaintext connection: %v", err)
		}
	})
}
