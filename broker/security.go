package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/authz"
	"github.com/strata-log/strata/internal/loginlimit"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/scram"
)

// Client authentication and ACLs (the rules are internal/acl's AC1-AC5,
// the password format internal/scram's).
//
// With TLS the broker's listener asks for a client certificate but does
// not require one, so a client may log in with a user name and password
// instead (over TLS only). Every call gets a principal before its body is
// read (see below):
//   - a verified certificate: its role is checked against
//     internal/authz's table first; role user is User:CN, role admin is
//     User:CN and a super-user, role broker is internal (never checked
//     against ACLs: brokers read each other's offsets);
//   - strata-user/strata-password metadata: User:NAME once the password
//     matches the user's credential in metad (mirrored, never read per
//     call; successful checks cached);
//   - neither: UNAUTHENTICATED.
//
// Each handler then asks authorize for the operation it performs. Without
// TLS there are no principals and nothing is checked (as before); a call
// carrying a password over plaintext is refused.
//
// Authentication runs in gRPC's tap handle (grpc.InTapHandle), when a
// call's headers arrive and before any of its body is read: a caller
// without a valid certificate or password never has a byte of its request
// read or decoded. The interceptors only pass the tap's principal on (and
// authenticate themselves should a call arrive without it). The tap runs
// on the connection's reader goroutine, so a check there holds up that
// connection's other calls: a cached password costs an HMAC; a cache miss
// runs the full PBKDF2 check there too (milliseconds, once per user and
// password per passwordCacheTTL), since deferring it to the interceptor
// would read and decode the body of every guess. Only the caller's own
// connection waits, for at most the login limiter's bounds (turn and
// budget 1s, a shared check slot 5s).
//
// Failed logins (gRPC passwords, Kafka PLAIN and SCRAM) go through one
// internal/loginlimit.Limiter: per source address, a budget of failures
// (10 at once, one more a second) past which attempts wait or are refused
// (RESOURCE_EXHAUSTED, reason THROTTLED, retryable, answered after a
// second: loginRefused); one PBKDF2 check per source at a time in 4
// shared slots, so a guessing source cannot starve other sources'
// logins; failures counted by reason in
// strata_broker_authentication_failures_total and logged with their
// source, rate-limited (the limiter's per-source counts, bounded by its
// LRU of sources, go in the line).

// Tunables of password checks.
const (
	passwordCacheEntries = 10_000
	passwordCacheTTL     = 5 * time.Minute
	// maxDenialsLogged bounds the (principal, operation, resource)
	// triples remembered for log-once.
	maxDenialsLogged = 10_000
	// maxLoggedUserBytes bounds a user name as written in a log line: it
	// is the caller's, unchecked.
	maxLoggedUserBytes = 128
)

// unknownUser is the credential a password for a user that does not
// exist is checked against (and never matches: its salt is random).
var unknownUser = sync.OnceValue(func() scram.Credential {
	c, err := scram.NewCredential("", "unknown user", scram.DefaultIterations)
	if err != nil {
		panic(err) // only crypto/rand can fail, and it does not
	}
	return c
})

// ErrDenied means the principal may not do what the call does (ACLs).
var ErrDenied = errors.New("permission denied")

// ErrUnauthenticated means the call's credentials did not authenticate:
// none given, a wrong user name or password, or a password over
// plaintext. The message never tells a wrong password from an unknown
// user.
var ErrUnauthenticated = errors.New("unauthenticated")

// principal is who makes a call.
type principal struct {
	name     string // User:NAME (or ROLE:CN for cluster roles)
	super    bool   // an admin certificate
	internal bool   // a broker certificate
	via      string // "certificate" or "password"
}

type principalKey struct{}

func withPrincipal(ctx context.Context, p principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principalFrom(ctx context.Context) (principal, bool) {
	p, ok := ctx.Value(principalKey{}).(principal)
	return p, ok
}

// security is the broker's authentication and ACL state.
type security struct {
	log        *slog.Logger
	users      *mirror // acl.UsersPrefix
	acls       *mirror // acl.ACLsPrefix
	superUsers []string
	// tls: the broker serves TLS, so calls have principals and ACLs are
	// checked (without TLS nothing is).
	tls    bool
	roles  *authz.Authorizer // nil without TLS
	policy authz.Policy
	cache  *scram.Cache
	logins *loginlimit.Limiter
	rules  atomic.Pointer[acl.Authorizer]

	denied       *prometheus.CounterVec
	authFailures *prometheus.CounterVec

	mu struct {
		sync.Mutex
		logged map[string]bool // principal|operation|resource
	}
}

func newSecurity(b *Broker, reg prometheus.Registerer) (*security, error) {
	s := &security{
		log:        b.log.With("component", "acl"),
		users:      newMirror(b.meta, acl.UsersPrefix, b.log),
		acls:       newMirror(b.meta, acl.ACLsPrefix, b.log),
		superUsers: b.cfg.SuperUserList(),
		cache:      scram.NewCache(passwordCacheEntries, passwordCacheTTL),
		policy:     authz.DefaultPolicy(),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_acl_denied_total",
			Help: "Calls refused because no ACL allows the principal the operation on the resource (or a deny rule matched), by operation and resource type.",
		}, []string{"operation", "resource"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_broker_authentication_failures_total",
			Help: "Calls refused because their credentials did not authenticate, by reason.",
		}, []string{"reason"}),
	}
	s.mu.logged = map[string]bool{}
	var err error
	if s.logins, err = loginlimit.New(loginlimit.Config{}, nil); err != nil {
		return nil, err
	}
	s.tls = b.creds.Enabled()
	if s.tls {
		roles, err := authz.New(s.policy, "broker", b.log, reg)
		if err != nil {
			return nil, err
		}
		s.roles = roles
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.denied, s.authFailures} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("broker: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// followACLs rebuilds the ACL evaluator at every change of the mirrored
// rules, until ctx ends.
func (s *security) followACLs(ctx context.Context) {
	for {
		snap, changed := s.acls.snapshot()
		if s.acls.isLoaded() {
			rules := make([]acl.Rule, 0, len(snap))
			for key, kv := range snap {
				r, err := acl.Unmarshal(kv.Value)
				if err != nil {
					s.log.Warn("skipping an ACL that does not decode", "key", key, "err", err)
					continue
				}
				rules = append(rules, r)
			}
			s.rules.Store(acl.NewAuthorizer(rules, s.superUsers))
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// ServerOptions are the broker's gRPC transport and authentication: with
// TLS, a listener that verifies a client certificate when one is given
// (a password login needs none); the tap handle that names every call's
// principal before its body is read, or refuses it; and interceptors
// that pass the principal on. Without TLS the tap refuses passwords.
func (b *Broker) ServerOptions() []grpc.ServerOption {
	s := b.sec
	opts := []grpc.ServerOption{}
	if b.creds.Enabled() {
		cfg := b.creds.ServerTLS(nil)
		perClient := cfg.GetConfigForClient
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := perClient(h)
			if err != nil {
				return nil, err
			}
			c.ClientAuth = tls.VerifyClientCertIfGiven
			return c, nil
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	auth := s.authenticatePlaintext
	if b.creds.Enabled() {
		auth = s.authenticate
		b.log.Info("client authentication on: certificates, or passwords over TLS; ACLs checked per call",
			"super_users", s.superUsers, "login_limits", s.logins.Config().String())
	} else {
		b.log.Warn("no TLS: clients are not authenticated and ACLs are not checked")
	}
	// authenticated is ctx with its principal: the tap's, or auth's for
	// a call that reached the interceptors without passing the tap.
	authenticated := func(ctx context.Context, method string) (context.Context, error) {
		if ctx.Value(tappedKey{}) != nil {
			return ctx, nil
		}
		return auth(ctx, method)
	}
	opts = append(opts,
		grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			authed, err := auth(ctx, info.FullMethodName)
			if err != nil {
				return ctx, err
			}
			return context.WithValue(authed, tappedKey{}, true), nil
		}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx, err := authenticated(ctx, info.FullMethod)
			if err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx, err := authenticated(ss.Context(), info.FullMethod)
			if err != nil {
				return err
			}
			return h(srv, &principalStream{ServerStream: ss, ctx: ctx})
		}))
	// After authentication: a refused call holds no fetch budget.
	return append(opts, b.fetchServerOptions()...)
}

// tappedKey marks a context authenticated by the tap handle.
type tappedKey struct{}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (p *principalStream) Context() context.Context { return p.ctx }

func credentialsOf(ctx context.Context) (user, password string, given bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	user, password = first(scram.MetadataUser), first(scram.MetadataPassword)
	return user, password, user != "" || password != ""
}

// sourceOf is the login source of a gRPC call: its peer's address.
func sourceOf(ctx context.Context) netip.Addr {
	if p, ok := peer.FromContext(ctx); ok {
		return loginlimit.SourceOf(p.Addr)
	}
	return netip.Addr{}
}

// authenticatePlaintext: without TLS there is no principal, and a
// password sent in the clear is refused (the client refuses to send one;
// this is for other clients).
func (s *security) authenticatePlaintext(ctx context.Context, _ string) (context.Context, error) {
	if _, _, given := credentialsOf(ctx); given {
		s.authFailures.WithLabelValues("plaintext").Inc()
		return nil, rpcError(fmt.Errorf("%w: password authentication needs TLS: this broker serves plaintext", ErrUnauthenticated))
	}
	return ctx, nil
}

// authenticate names the call's principal (see the top of this file); its
// errors are gRPC statuses.
func (s *security) authenticate(ctx context.Context, method string) (context.Context, error) {
	if user, password, given := credentialsOf(ctx); given {
		login := passwordLogin{source: sourceOf(ctx), mechanism: "password", user: user, password: password}
		if err := s.checkPassword(ctx, login); err != nil {
			return nil, rpcError(err)
		}
		if !s.policy.Allowed(method, pki.RoleUser) {
			return nil, rpcError(fmt.Errorf("%w: %s is not open to users; caller User:%s", ErrDenied, method, user))
		}
		return withPrincipal(ctx, principal{name: acl.UserPrincipal(user), via: "password"}), nil
	}
	id, err := mtls.PeerIdentity(ctx)
	if err != nil {
		s.authFailures.WithLabelValues("no_credentials").Inc()
		return nil, rpcError(fmt.Errorf("%w: authentication required: present a client certificate or a user name and password", ErrUnauthenticated))
	}
	if err := s.roles.Check(ctx, method); err != nil {
		return nil, err
	}
	return withPrincipal(ctx, certificatePrincipal(id)), nil
}

// certificatePrincipal is the principal of a verified certificate: role
// user is User:CN, role admin User:CN and a super-user, role broker
// internal (never checked against ACLs); other roles ROLE:CN.
func certificatePrincipal(id pki.Identity) principal {
	p := principal{name: id.Role + ":" + id.Name, via: "certificate"}
	switch id.Role {
	case pki.RoleBroker:
		p.internal = true
	case pki.RoleAdmin:
		p.name, p.super = acl.UserPrincipal(id.Name), true
	case pki.RoleUser:
		p.name = acl.UserPrincipal(id.Name)
	}
	return p
}

// actor names who made the call in ctx, for the log lines of
// administrative actions: its principal, or "anonymous" (plaintext).
func actor(ctx context.Context) string {
	if p, ok := principalFrom(ctx); ok {
		return p.name
	}
	return "anonymous"
}

// passwordLogin is one attempt to log in with a password: a gRPC call's
// metadata (mechanism "password") or a Kafka SASL PLAIN exchange.
type passwordLogin struct {
	source         netip.Addr
	mechanism      string
	user, password string
}

// checkPassword verifies login's password against the user's mirrored
// credential: through the cache, else in the login limiter's bounds (an
// Attempt: the source's turn, budget and a shared slot). Errors:
// ErrUnauthenticated, ErrBusy (users not loaded yet), loginlimit's
// ErrThrottled and ErrBusy, ctx's.
func (s *security) checkPassword(ctx context.Context, login passwordLogin) error {
	if !s.users.isLoaded() {
		return fmt.Errorf("%w: users not loaded from metad yet", ErrBusy)
	}
	if acl.ValidUserName(login.user) != nil || login.password == "" {
		return s.loginFailed(s.logins.Failed(login.source), login, "bad_password")
	}
	kv := s.users.get(acl.UserKey(login.user))
	if kv != nil && s.cache.Check(login.user, login.password, kv.ModRevision, time.Now()) {
		return nil
	}
	attempt, err := s.logins.Begin(ctx, login.source)
	if err != nil {
		return s.loginRefused(ctx, login, err)
	}
	defer attempt.Release()
	// Another call of the same client may have verified the password
	// while this one waited for its source's turn.
	if kv != nil && s.cache.Check(login.user, login.password, kv.ModRevision, time.Now()) {
		return nil
	}
	if kv == nil {
		// As long as a wrong password, in the same slots: the answer's
		// timing must not tell whether the user exists.
		_ = unknownUser().Verify(login.password)
		return s.loginFailed(attempt.Failed(), login, "bad_password")
	}
	cred, err := scram.Unmarshal(kv.Value)
	if err != nil {
		s.log.Warn("a stored user credential does not decode", "user", login.user, "err", err)
		s.authFailures.WithLabelValues("bad_credential").Inc()
		return badLogin(login)
	}
	if err := cred.Verify(login.password); err != nil {
		return s.loginFailed(attempt.Failed(), login, "bad_password")
	}
	s.cache.Add(login.user, login.password, kv.ModRevision, time.Now())
	return nil
}

// badLogin is the answer to a failed login: the same whether the user
// exists or not.
func badLogin(login passwordLogin) error {
	return fmt.Errorf("%w: authentication failed for user %q: wrong user name or password", ErrUnauthenticated, loggedUser(login.user))
}

// loginFailed counts a failed login by reason, logs it when the limiter's
// report says so, and returns badLogin.
func (s *security) loginFailed(r loginlimit.Report, login passwordLogin, reason string) error {
	s.authFailures.WithLabelValues(reason).Inc()
	if r.Log {
		s.log.Warn("login failed", "source", login.source.String(), "user", loggedUser(login.user), "mechanism", login.mechanism,
			"reason", reason, "failures_from_source", r.Failures, "similar_not_logged", r.Unlogged)
	}
	return badLogin(login)
}

// loginRefused counts and logs (as loginFailed) an attempt the limiter
// refused, and returns err, or ErrBusy's for a context that ended. A
// throttled attempt is answered after the limiter's MaxDelay (or when ctx
// ends), as Kafka delays its answer to a failed authentication: a loop
// that ignores the refusal still makes one attempt a second per
// connection, and the connection it holds meanwhile counts against its
// source's connection limits.
func (s *security) loginRefused(ctx context.Context, login passwordLogin, err error) error {
	reason := "throttled"
	switch {
	case errors.Is(err, loginlimit.ErrBusy):
		reason = "busy"
	case !errors.Is(err, loginlimit.ErrThrottled):
		s.authFailures.WithLabelValues("cancelled").Inc()
		return fmt.Errorf("%w: authentication: %w", ErrBusy, err)
	}
	s.authFailures.WithLabelValues(reason).Inc()
	if r := s.logins.Refused(login.source); r.Log {
		s.log.Warn("login refused: too many failed logins from the source", "source", login.source.String(), "user", loggedUser(login.user),
			"mechanism", login.mechanism, "reason", reason, "failures_from_source", r.Failures, "similar_not_logged", r.Unlogged)
	}
	if reason == "throttled" {
		delay := time.NewTimer(s.logins.Config().MaxDelay)
		defer delay.Stop()
		select {
		case <-delay.C:
		case <-ctx.Done():
		}
	}
	return err
}

// loggedUser is name cut to maxLoggedUserBytes.
func loggedUser(name string) string {
	if len(name) > maxLoggedUserBytes {
		return name[:maxLoggedUserBytes] + "..."
	}
	return name
}

// authorize returns nil when the call's principal may do op on res, else
// an ErrDenied naming what was missing (counted, logged once per
// principal, operation and resource). Without TLS everything is allowed.
func (s *security) authorize(ctx context.Context, op acl.Operation, res acl.Resource) error {
	d, p, check := s.decide(ctx, op, res)
	if !check || d.Allowed {
		return nil
	}
	if d.Reason == "" {
		return fmt.Errorf("%w: ACLs are not loaded from metad yet", ErrBusy)
	}
	s.denied.WithLabelValues(string(op), string(res.Type)).Inc()
	msg := fmt.Sprintf("%s may not %s %s (%s)", p.name, strings.ToUpper(string(op)), res, d.Reason)
	if s.firstDenial(p.name + "|" + string(op) + "|" + res.String()) {
		s.log.Warn("call denied", "principal", p.name, "operation", op, "resource", res.String(), "reason", d.Reason)
	}
	return &DeniedError{Resource: res, msg: msg}
}

// DeniedError is an ErrDenied naming the resource the ACLs refused (the
// Kafka adapter answers TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED by
// its type).
type DeniedError struct {
	Resource acl.Resource
	msg      string
}

func (e *DeniedError) Error() string { return ErrDenied.Error() + ": " + e.msg }
func (e *DeniedError) Unwrap() error { return ErrDenied }

// allowed is authorize without counting or logging: for filtering what
// a listing shows.
func (s *security) allowed(ctx context.Context, op acl.Operation, res acl.Resource) bool {
	d, _, check := s.decide(ctx, op, res)
	return !check || d.Allowed
}

// decide: check false means nothing to check (plaintext, or a broker).
// A nil security (a broker built without one in tests) checks nothing.
// A zero Decision means the rules are not loaded yet.
func (s *security) decide(ctx context.Context, op acl.Operation, res acl.Resource) (acl.Decision, principal, bool) {
	if s == nil || !s.tls {
		return acl.Decision{}, principal{}, false
	}
	p, ok := principalFrom(ctx)
	if !ok {
		return acl.Decision{Reason: "no authenticated principal"}, principal{name: "unknown"}, true
	}
	if p.internal {
		return acl.Decision{}, p, false
	}
	rules := s.rules.Load()
	if rules == nil {
		return acl.Decision{}, p, true
	}
	return rules.Authorize(p.name, p.super, op, res), p, true
}

func (s *security) firstDenial(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.logged[key] || len(s.mu.logged) >= maxDenialsLogged {
		return false
	}
	s.mu.logged[key] = true
	return true
}

// authorizeTopics authorizes op on every distinct topic items name; the
// first refusal refuses the whole call (nothing is done for any item).
func authorizeTopics[T any](ctx context.Context, s *security, op acl.Operation, items []T, topic func(T) string) error {
	if s == nil || !s.tls {
		return nil
	}
	seen := make(map[string]struct{}, 4)
	for _, it := range items {
		name := topic(it)
		if _, ok := seen[name]; ok {
			continue
		}
		seen[name] = struct{}{}
		if err := s.authorize(ctx, op, acl.TopicResource(name)); err != nil {
			return err
		}
	}
	return nil
}
