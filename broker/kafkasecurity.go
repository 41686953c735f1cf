package broker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/loginlimit"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/scram"
	"github.com/strata-log/strata/metad/metaclient"
)

// decoyKeyKey holds the cluster's secret for SCRAM decoys (scram.Decoy):
// every broker derives the same decoy for an unknown user, so comparing
// brokers' answers does not tell which users exist.
const decoyKeyKey = "/strata/sasl/decoy-key"

// KafkaSecurity authenticates the Kafka listener's clients against the
// same certificates, users and ACLs as the gRPC API (package broker/kafka's
// Security): a principal it names is checked by the same rules.
type KafkaSecurity struct {
	b *Broker

	mu       sync.Mutex
	decoyKey []byte
}

// KafkaSecurity returns the broker's authentication for its Kafka
// listener.
func (b *Broker) KafkaSecurity() *KafkaSecurity { return &KafkaSecurity{b: b} }

// AuthRequired reports whether the listener serves only authenticated
// clients: with TLS it does, as the gRPC one does; without, nobody is
// authenticated.
func (k *KafkaSecurity) AuthRequired() bool { return k.b.creds.Enabled() }

// CertificateContext names the principal of a verified client
// certificate. Roles other than user, admin and broker (bookies', metad
// members') may not use the Kafka API.
func (k *KafkaSecurity) CertificateContext(ctx context.Context, cs tls.ConnectionState) (context.Context, bool, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ctx, false, nil
	}
	id, err := pki.IdentityOf(cs.VerifiedChains[0][0])
	if err != nil {
		return nil, false, err
	}
	switch id.Role {
	case pki.RoleUser, pki.RoleAdmin, pki.RoleBroker:
	default:
		return nil, false, fmt.Errorf("%w: a certificate of role %s may not use the Kafka API", ErrDenied, id.Role)
	}
	return withPrincipal(ctx, certificatePrincipal(id)), true, nil
}

// PasswordContext checks a PLAIN login from source as a gRPC password is
// checked (the same cache, limits and logging).
func (k *KafkaSecurity) PasswordContext(ctx context.Context, source net.Addr, user, password string) (context.Context, error) {
	login := passwordLogin{source: loginlimit.SourceOf(source), mechanism: "PLAIN", user: user, password: password}
	if err := k.b.sec.checkPassword(ctx, login); err != nil {
		return nil, err
	}
	return withPrincipal(ctx, principal{name: acl.UserPrincipal(user), via: "password"}), nil
}

// ScramCredential admits a SCRAM exchange from source in the login
// limiter's budget (it may wait; loginlimit.ErrThrottled when the source
// failed too often lately), then returns user's stored credential for
// mechanism, or a decoy when there is none (the exchange then fails at the
// proof, as a wrong password does).
func (k *KafkaSecurity) ScramCredential(ctx context.Context, source net.Addr, user, mechanism string) (scram.Credential, error) {
	s := k.b.sec
	if !s.users.isLoaded() {
		return scram.Credential{}, fmt.Errorf("%w: users not loaded from metad yet", ErrBusy)
	}
	if err := s.logins.Admit(ctx, loginlimit.SourceOf(source)); err != nil {
		return scram.Credential{}, s.loginRefused(ctx, passwordLogin{source: loginlimit.SourceOf(source), mechanism: mechanism, user: user}, err)
	}
	if kv := s.users.get(acl.UserKey(user)); kv != nil && acl.ValidUserName(user) == nil {
		if u, err := scram.UnmarshalUser(kv.Value); err == nil {
			if c, ok := u.Lookup(mechanism); ok {
				return c, nil
			}
		} else {
			s.log.Warn("a stored user credential does not decode", "user", user, "err", err)
		}
	}
	key, err := k.decoy(ctx)
	if err != nil {
		return scram.Credential{}, err
	}
	return scram.Decoy(key, mechanism, user), nil
}

// ScramDone ends a SCRAM exchange ScramCredential admitted: err nil (the
// client proved user's password) returns the user's context; otherwise
// the failure is counted against source, logged as a gRPC one is, and
// the context is nil.
func (k *KafkaSecurity) ScramDone(ctx context.Context, source net.Addr, user, mechanism string, err error) context.Context {
	if err == nil {
		return withPrincipal(ctx, principal{name: acl.UserPrincipal(user), via: "scram"})
	}
	s := k.b.sec
	login := passwordLogin{source: loginlimit.SourceOf(source), mechanism: mechanism, user: user}
	reason := "bad_password"
	if !errors.Is(err, scram.ErrBadPassword) {
		reason = "malformed"
	}
	_ = s.loginFailed(s.logins.Failed(login.source), login, reason)
	return nil
}

// decoy returns the cluster's decoy secret, creating it the first time.
func (k *KafkaSecurity) decoy(ctx context.Context) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.decoyKey != nil {
		return k.decoyKey, nil
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	meta := k.b.meta
	if _, err := meta.Put(ctx, decoyKeyKey, fresh, metaclient.WithExpectedVersion(0)); err != nil && !errors.Is(err, metaclient.ErrVersionConflict) {
		return nil, err
	}
	kv, err := meta.Get(ctx, decoyKeyKey)
	if err != nil {
		return nil, err
	}
	k.decoyKey = kv.Value
	return k.decoyKey, nil
}
