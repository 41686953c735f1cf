package broker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/loginlimit"
	"github.com/strata-log/strata/internal/scram"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// testSecurity is a security over in-memory mirrors (no metad).
func testSecurity(t *testing.T) *security {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	s := &security{
		log:          log,
		users:        newMirror(nil, acl.UsersPrefix, log),
		acls:         newMirror(nil, acl.ACLsPrefix, log),
		cache:        scram.NewCache(10, passwordCacheTTL),
		denied:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "d"}, []string{"operation", "resource"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "f"}, []string{"reason"}),
		tls:          true,
		policy:       authz.DefaultPolicy(),
	}
	s.mu.logged = map[string]bool{}
	var err error
	if s.logins, err = loginlimit.New(loginlimit.Config{Slots: 1, MaxDelay: time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	close(s.users.ready)
	close(s.acls.ready)
	return s
}

// check runs checkPassword for a gRPC login from source and returns the
// status a call would get.
func check(ctx context.Context, s *security, source, user, password string) error {
	return rpcError(s.checkPassword(ctx, passwordLogin{source: netip.MustParseAddr(source), mechanism: "password", user: user, password: password}))
}

func withPassword(user, password string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(scram.MetadataUser, user, scram.MetadataPassword, password))
}

func TestCheckPassword(t *testing.T) {
	s := testSecurity(t)
	cred, err := scram.NewCredential("bob", "pw", 0)
	if err != nil {
		t.Fatal(err)
	}
	s.users.kvs[acl.UserKey("bob")] = &metadpb.KeyValue{Key: acl.UserKey("bob"), Value: cred.Marshal(), ModRevision: 5}
	ctx := context.Background()
	if err := check(ctx, s, "192.0.2.1", "bob", "pw"); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if s.cache.Len() != 1 || !s.cache.Check("bob", "pw", 5, time.Now()) {
		t.Fatal("a verified password is not cached")
	}
	for _, tc := range [][2]string{{"bob", "wrong"}, {"nobody", "pw"}, {"bob", ""}, {"a/b", "pw"}} {
		err := check(ctx, s, "192.0.2.1", tc[0], tc[1])
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%q/%q: %v, want UNAUTHENTICATED", tc[0], tc[1], err)
		}
	}
	// A changed record is checked again: the old password no longer works.
	cred2, _ := scram.NewCredential("bob", "new", 0)
	s.users.kvs[acl.UserKey("bob")] = &metadpb.KeyValue{Key: acl.UserKey("bob"), Value: cred2.Marshal(), ModRevision: 9}
	if err := check(ctx, s, "192.0.2.1", "bob", "pw"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("old password after the change: %v", err)
	}
	if err := check(ctx, s, "192.0.2.1", "bob", "new"); err != nil {
		t.Errorf("new password: %v", err)
	}
}

func TestPasswordOverPlaintextRefused(t *testing.T) {
	s := testSecurity(t)
	if _, err := s.authenticatePlaintext(withPassword("bob", "pw"), "/strata.broker.v1.Broker/Metadata"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("password over plaintext: %v, want UNAUTHENTICATED", err)
	}
	if _, err := s.authenticatePlaintext(context.Background(), "/strata.broker.v1.Broker/Metadata"); err != nil {
		t.Errorf("plaintext without a password: %v", err)
	}
}

func TestNoCredentialsRefused(t *testing.T) {
	s := testSecurity(t)
	if _, err := s.authenticate(context.Background(), "/strata.broker.v1.Broker/Metadata"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no certificate, no password: %v, want UNAUTHENTICATED", err)
	}
}

// AddPartitions on an internal topic is refused, as DeleteTopic and
// Produce are (AC1): a group's coordinator is partition
// group.PartitionFor(group, count) of __consumer_offsets, so a new count
// sends every group to a partition that holds none of its offsets, and
// each group's committed offsets are lost. ALTER on "*" (or a super-user,
// or any client of a plaintext broker) could do it.
func TestAddPartitionsToInternalTopicRefused(t *testing.T) {
	// Nothing listens there: the refusal must come before any metad call.
	meta, err := metaclient.New(metaclient.Config{Endpoints: []string{"127.0.0.1:26001"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	b := &Broker{cfg: DefaultConfig(), log: slog.New(slog.DiscardHandler), meta: meta}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = b.GRPC().AddPartitions(ctx, &brokerpb.AddPartitionsRequest{Name: OffsetsTopic, Total: 64})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "internal") {
		t.Fatalf("AddPartitions on %s: %v, want INVALID_ARGUMENT (internal topic)", OffsetsTopic, err)
	}
}

// An unknown user costs what a wrong password costs: a PBKDF2 check, in
// one of the same bounded slots. It was answered at once, without one, so
// the answer's timing (and, with the slots busy, its code) told whether a
// user exists.
func TestUnknownUserCostsAPasswordCheck(t *testing.T) {
	s := testSecurity(t)
	cred, err := scram.NewCredential("bob", "pw", 0)
	if err != nil {
		t.Fatal(err)
	}
	s.users.kvs[acl.UserKey("bob")] = &metadpb.KeyValue{Key: acl.UserKey("bob"), Value: cred.Marshal(), ModRevision: 5}
	busy, err := s.logins.Begin(context.Background(), netip.MustParseAddr("192.0.2.200")) // every check slot busy
	if err != nil {
		t.Fatal(err)
	}
	answer := func(user string) codes.Code {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		return status.Code(check(ctx, s, "192.0.2.1", user, "wrong"))
	}
	if known, unknown := answer("bob"), answer("nobody"); known != unknown {
		t.Fatalf("with every check slot busy, a wrong password for an existing user answers %v, for an unknown user %v: the answer tells whether a user exists", known, unknown)
	}
	busy.Release()
	for _, user := range []string{"bob", "nobody"} {
		if code := answer(user); code != codes.Unauthenticated {
			t.Errorf("%s with a wrong password: %v, want UNAUTHENTICATED", user, code)
		}
	}
}

// An internal topic's settings change only where they cannot lose what
// the brokers keep there: cleanup.policy=delete with retention.ms=0 on
// __consumer_offsets would delete every group's committed offsets.
// Setting, changing or removing anything but how segments roll and how
// soon compaction runs is refused, for any principal.
func TestInternalTopicConfigChanges(t *testing.T) {
	stored := map[string]string{"cleanup.policy": "compact", "segment.bytes": "1048576", "max.message.bytes": "1048576"}
	for _, tc := range []struct {
		name string
		next map[string]string
		ok   bool
	}{
		{"segments and compaction", map[string]string{"cleanup.policy": "compact", "segment.bytes": "16384", "max.message.bytes": "1048576",
			"min.cleanable.dirty.ratio": "0.01", "segment.ms": "60000", "max.compaction.lag.ms": "60000"}, true},
		{"a safe setting removed", map[string]string{"cleanup.policy": "compact", "max.message.bytes": "1048576"}, true},
		{"cleanup.policy changed", map[string]string{"cleanup.policy": "delete", "segment.bytes": "1048576", "max.message.bytes": "1048576"}, false},
		{"retention.ms set", map[string]string{"cleanup.policy": "compact", "segment.bytes": "1048576", "max.message.bytes": "1048576", "retention.ms": "0"}, false},
		{"max.message.bytes removed (replace mode)", map[string]string{"cleanup.policy": "compact", "segment.bytes": "16384"}, false},
		{"ack.quorum set", map[string]string{"cleanup.policy": "compact", "segment.bytes": "1048576", "max.message.bytes": "1048576", "ack.quorum": "1"}, false},
	} {
		err := checkInternalConfigChange(OffsetsTopic, maps.Clone(stored), tc.next)
		if tc.ok != (err == nil) || err != nil && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "internal")) {
			t.Errorf("%s: %v, want ok=%v (else ErrInvalidConfig naming the topic internal)", tc.name, err, tc.ok)
		}
	}
}
