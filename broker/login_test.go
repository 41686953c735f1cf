package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/loginlimit"
	"github.com/strata-log/strata/internal/mtls/mtlstest"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/rpctest"
	"github.com/strata-log/strata/internal/scram"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

func addUser(t *testing.T, s *security, name, password string) {
	t.Helper()
	u, err := scram.NewUser(name, password, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.users.kvs[acl.UserKey(name)] = &metadpb.KeyValue{Key: acl.UserKey(name), Value: u.Marshal(), ModRevision: 5}
}

// TestPasswordGuessingThrottledPerSource: past its budget of failures a
// source's next guesses are refused (RESOURCE_EXHAUSTED, THROTTLED,
// retryable) without a password check, while another source logs in,
// and a password already verified (cached) still logs in from the
// throttled source.
func TestPasswordGuessingThrottledPerSource(t *testing.T) {
	s := testSecurity(t)
	addUser(t, s, "bob", "pw")
	ctx := context.Background()
	const attacker, other = "192.0.2.1", "192.0.2.2"
	burst := s.logins.Config().Burst
	for i := range burst {
		if err := check(ctx, s, attacker, "bob", "guess"); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("guess %d: %v, want UNAUTHENTICATED", i, err)
		}
	}
	err := check(ctx, s, attacker, "bob", "guess")
	if info := rpcerror.Info(err); status.Code(err) != codes.ResourceExhausted || info.GetReason() != rpcerror.ReasonThrottled || !info.GetRetryable() {
		t.Fatalf("guess past the budget: %v (%v), want RESOURCE_EXHAUSTED, THROTTLED, retryable", err, info)
	}
	// The right password from the throttled source is refused too (the
	// source may be the attacker's)...
	if err := check(ctx, s, attacker, "bob", "pw"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("right password from the throttled source: %v", err)
	}
	// ...but another source is not slowed,
	if err := check(ctx, s, other, "bob", "pw"); err != nil {
		t.Fatalf("another source: %v", err)
	}
	// and once verified, the password is a cache hit from anywhere.
	if err := check(ctx, s, attacker, "bob", "pw"); err != nil {
		t.Fatalf("a cached password from the throttled source: %v", err)
	}
	if got := failures(s, "throttled"); got != 2 {
		t.Errorf("%v throttled attempts counted, want 2", got)
	}
}

func failures(s *security, reason string) float64 {
	return testutil.ToFloat64(s.authFailures.WithLabelValues(reason))
}

// TestFailedLoginsLoggedWithSource: a failed login is logged with its
// source and mechanism; a loop of them is not logged line by line.
func TestFailedLoginsLoggedWithSource(t *testing.T) {
	s := testSecurity(t)
	var out bytes.Buffer
	s.log = slog.New(slog.NewTextHandler(&out, nil))
	addUser(t, s, "bob", "pw")
	for range 8 {
		_ = check(context.Background(), s, "192.0.2.7", "bob", "guess")
	}
	lines := strings.Count(out.String(), "login failed")
	if lines != 1 || !strings.Contains(out.String(), "source=192.0.2.7") || !strings.Contains(out.String(), "mechanism=password") ||
		!strings.Contains(out.String(), "user=bob") {
		t.Fatalf("8 failed logins logged as %d lines, want 1 naming source, user and mechanism:\n%s", lines, out.String())
	}
	if got := failures(s, "bad_password"); got != 8 {
		t.Errorf("%v failures counted, want 8", got)
	}
}

// TestScramFailuresSpendTheSourceBudget: a SCRAM exchange's failed proof
// counts against its source as a wrong password does, and the next
// exchanges of the source are refused before any credential is given out.
func TestScramFailuresSpendTheSourceBudget(t *testing.T) {
	s := testSecurity(t)
	addUser(t, s, "bob", "pw")
	k := &KafkaSecurity{b: &Broker{sec: s}}
	source := &net.TCPAddr{IP: net.ParseIP("192.0.2.9"), Port: 4000}
	ctx := context.Background()
	for range s.logins.Config().Burst {
		if _, err := k.ScramCredential(ctx, source, "bob", scram.MechanismSHA256); err != nil {
			t.Fatal(err)
		}
		if got := k.ScramDone(ctx, source, "bob", scram.MechanismSHA256, scram.ErrBadPassword); got != nil {
			t.Fatal("a failed exchange returned a context")
		}
	}
	if _, err := k.ScramCredential(ctx, source, "bob", scram.MechanismSHA256); !errors.Is(err, loginlimit.ErrThrottled) {
		t.Fatalf("past the budget: %v, want ErrThrottled", err)
	}
	other := &net.TCPAddr{IP: net.ParseIP("192.0.2.10"), Port: 4000}
	if _, err := k.ScramCredential(ctx, other, "bob", scram.MechanismSHA256); err != nil {
		t.Fatalf("another source: %v", err)
	}
	if p, ok := principalFrom(k.ScramDone(ctx, other, "bob", scram.MechanismSHA256, nil)); !ok || p.name != "User:bob" {
		t.Fatalf("a proved exchange: principal %+v", p)
	}
}

type produceCounter struct {
	brokerpb.UnimplementedBrokerServer
	calls atomic.Int64
}

func (p *produceCounter) Produce(context.Context, *brokerpb.ProduceRequest) (*brokerpb.ProduceResponse, error) {
	p.calls.Add(1)
	return &brokerpb.ProduceResponse{}, nil
}

// TestUnauthenticatedBodyNeverDecoded: a call without credentials, or
// with a wrong password, is refused by the tap handle before gRPC reads
// its request (no message is received, let alone decoded); a call with
// the right password is served.
func TestUnauthenticatedBodyNeverDecoded(t *testing.T) {
	ca := mtlstest.NewCA(t)
	s := testSecurity(t)
	addUser(t, s, "bob", "pw")
	b := &Broker{log: slog.New(slog.DiscardHandler), creds: ca.Credentials(t, pki.RoleBroker, "b1"), sec: s,
		fetchBudget: newFetchBudget(minInflightFetchBytes, prometheus.NewRegistry())}
	var in rpctest.Received
	srv := grpc.NewServer(append(b.ServerOptions(), grpc.StatsHandler(&in))...)
	svc := &produceCounter{}
	brokerpb.RegisterBrokerServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	bc := brokerpb.NewBrokerClient(cc)
	req := &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{{Topic: "t", Records: make([]byte, 1<<20)}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, opts := range map[string][]grpc.CallOption{
		"no credentials": nil,
		"wrong password": {grpc.PerRPCCredentials(client.PasswordCredentials("bob", "wrong"))},
		"unknown user":   {grpc.PerRPCCredentials(client.PasswordCredentials("eve", "pw"))},
	} {
		if _, err := bc.Produce(ctx, req, opts...); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want UNAUTHENTICATED", name, err)
		}
	}
	if n := in.Count(); n != 0 || svc.calls.Load() != 0 {
		t.Fatalf("refused calls: %d request messages received, %d handled; want none", n, svc.calls.Load())
	}
	if _, err := bc.Produce(ctx, req, grpc.PerRPCCredentials(client.PasswordCredentials("bob", "pw"))); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if n := in.Count(); n != 1 || svc.calls.Load() != 1 {
		t.Fatalf("an authenticated call: %d messages received, %d handled; want 1 and 1", n, svc.calls.Load())
	}
}
