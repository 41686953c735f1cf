package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/internal/loginlimit"
	"github.com/strata-log/strata/internal/scram"
)

// Security authenticates a listener's clients; the broker implements it
// over its users and ACL mirrors. The contexts it returns are derived
// from the ctx it is given (the connection's) and carry the principal:
// they are what every later Handle and Reply of the connection gets. It
// is called from many connections at once.
type Security interface {
	// AuthRequired reports whether the listener serves only
	// authenticated connections (SASL or a client certificate). When
	// false, SASL is still offered and a connection that does not use it
	// is served with the connection's bare context.
	AuthRequired() bool
	// CertificateContext is called once per TLS connection after the
	// handshake. ok true: a verified client certificate names the
	// principal, returned in the context. ok false: no certificate was
	// given. An error (a certificate whose role may not use this
	// listener) closes the connection.
	CertificateContext(ctx context.Context, cs tls.ConnectionState) (context.Context, bool, error)
	// PasswordContext checks a PLAIN login from source (TLS connections
	// only). Failed logins slow their source down: an error wrapping
	// loginlimit.ErrThrottled refuses an attempt from a source that
	// failed too often lately (loginlimit.ErrBusy: checks are busy).
	PasswordContext(ctx context.Context, source net.Addr, user, password string) (context.Context, error)
	// ScramCredential admits a SCRAM exchange from source (as
	// PasswordContext, it may wait, or refuse with loginlimit's errors)
	// and returns user's credential for mechanism (MechanismScramSHA256
	// or MechanismScramSHA512). For a user that does not exist, or has no
	// credential for mechanism, it returns a scram.Decoy, not an error, so
	// the exchange fails at the proof the way a wrong password does. An
	// error (users not loaded yet) fails the exchange.
	ScramCredential(ctx context.Context, source net.Addr, user, mechanism string) (scram.Credential, error)
	// ScramDone is called once for every exchange ScramCredential
	// admitted that ends (a client that goes away half way does not end
	// it): err nil when the client proved user's password, and the
	// context returned is the user's; otherwise err says why it failed,
	// the failure counts against source, and the context is nil.
	ScramDone(ctx context.Context, source net.Addr, user, mechanism string, err error) context.Context
}

// saslStage is where a connection's SASL exchange stands.
type saslStage uint8

const (
	saslNone     saslStage = iota // no handshake yet
	saslExchange                  // handshake done: tokens expected
	saslDone                      // authenticated by SASL
)

// saslSession is a connection's SASL state, touched only by its reader.
type saslSession struct {
	stage     saslStage
	raw       bool // SaslHandshake v0: tokens come as bare size-prefixed frames
	mechanism string
	exchange  exchange
}

// exchange runs one mechanism: step takes the client's token and returns
// the server's reply; done with the authenticated context.
type exchange interface {
	step(ctx context.Context, token []byte) (reply []byte, authenticated context.Context, err error)
}

// errSASLMalformed: a token that is not a message of its mechanism.
var errSASLMalformed = errors.New("kafka: malformed SASL message")

// plainExchange is RFC 4616: authzid NUL authcid NUL password, one step.
type plainExchange struct {
	sec    Security
	source net.Addr
}

func (p plainExchange) step(ctx context.Context, token []byte) ([]byte, context.Context, error) {
	parts := bytes.SplitN(token, []byte{0}, 3)
	if len(parts) != 3 || len(parts[1]) == 0 || len(parts[2]) == 0 {
		return nil, nil, fmt.Errorf("%w: PLAIN wants authzid NUL user NUL password", errSASLMalformed)
	}
	if len(parts[0]) != 0 && !bytes.Equal(parts[0], parts[1]) {
		return nil, nil, fmt.Errorf("%w: PLAIN authorization identity is not the user", errSASLMalformed)
	}
	authed, err := p.sec.PasswordContext(ctx, p.source, string(parts[1]), string(parts[2]))
	if err != nil {
		return nil, nil, err
	}
	return []byte{}, authed, nil
}

// scramExchange runs a scram.Server against Security's credentials and
// reports the end of every exchange Security admitted (ScramDone).
type scramExchange struct {
	sec       Security
	source    net.Addr
	mechanism string
	server    *scram.Server
	admitted  bool // ScramCredential answered: ScramDone is owed
}

func newScramExchange(sec Security, source net.Addr, mechanism string) (*scramExchange, error) {
	ex := &scramExchange{sec: sec, source: source, mechanism: mechanism}
	server, err := scram.NewServer(mechanism, func(ctx context.Context, user string) (scram.Credential, error) {
		c, err := sec.ScramCredential(ctx, source, user, mechanism)
		ex.admitted = err == nil
		return c, err
	})
	if err != nil {
		return nil, err
	}
	ex.server = server
	return ex, nil
}

func (s *scramExchange) step(ctx context.Context, token []byte) ([]byte, context.Context, error) {
	reply, done, err := s.server.Step(ctx, token)
	if !s.admitted || (err == nil && !done) {
		return reply, nil, err
	}
	s.admitted = false // reported once
	authed := s.sec.ScramDone(ctx, s.source, s.server.User(), s.mechanism, err)
	if err != nil {
		return nil, nil, err
	}
	return reply, authed, nil
}

// mechanisms are those offered on c: PLAIN only over TLS.
func (c *Conn) mechanisms() []string {
	var out []string
	for _, m := range c.srv.cfg.Mechanisms {
		if m != MechanismPlain || c.tls != nil {
			out = append(out, m)
		}
	}
	return out
}

// saslHandshake answers SaslHandshake. close is the reason to close the
// connection once the answer is written ("" to go on): after a
// mechanism not offered, and after a handshake out of turn.
func (c *Conn) saslHandshake(req *kmsg.SASLHandshakeRequest) (resp *kmsg.SASLHandshakeResponse, close string) {
	resp = kmsg.NewPtrSASLHandshakeResponse()
	resp.Version = req.Version
	offered := c.mechanisms()
	resp.SupportedMechanisms = offered
	if c.sasl.stage != saslNone {
		resp.ErrorCode = c.ErrorCode(req.Key(), kerr.IllegalSaslState.Code)
		return resp, reasonSASLState
	}
	if !slices.Contains(offered, req.Mechanism) {
		resp.ErrorCode = c.ErrorCode(req.Key(), kerr.UnsupportedSaslMechanism.Code)
		return resp, reasonSASLMechanism
	}
	var ex exchange = plainExchange{sec: c.srv.cfg.Security, source: c.RemoteAddr()}
	if req.Mechanism != MechanismPlain {
		scramEx, err := newScramExchange(c.srv.cfg.Security, c.RemoteAddr(), req.Mechanism)
		if err != nil { // not reached: the mechanisms offered are SCRAM's or PLAIN
			resp.ErrorCode = c.ErrorCode(req.Key(), kerr.UnsupportedSaslMechanism.Code)
			return resp, reasonSASLMechanism
		}
		ex = scramEx
	}
	c.sasl = saslSession{stage: saslExchange, raw: req.Version == 0, mechanism: req.Mechanism, exchange: ex}
	return resp, ""
}

// saslStep feeds one client token to the exchange under way. On success
// it returns the server's token, and when the exchange is complete, marks
// c authenticated. An error fails the exchange (counted and logged by the
// caller, which closes the connection).
func (c *Conn) saslStep(token []byte) ([]byte, error) {
	reply, authed, err := c.sasl.exchange.step(c.ctx, token)
	if err != nil {
		c.srv.metrics.authFailure.WithLabelValues(c.sasl.mechanism).Inc()
		return nil, fmt.Errorf("%s: %w", c.sasl.mechanism, err)
	}
	if authed != nil {
		c.srv.metrics.authSuccess.WithLabelValues(c.sasl.mechanism).Inc()
		c.authCtx, c.authenticated = authed, true
		c.sasl = saslSession{stage: saslDone, mechanism: c.sasl.mechanism}
	}
	return reply, nil
}

// saslAuthenticate answers SaslAuthenticate (a token after a v1
// handshake). A failure answers SASL_AUTHENTICATION_FAILED and closes;
// the message never tells a wrong password from an unknown user. No
// session lifetime is set: sessions do not expire (KIP-368 is not
// served).
func (c *Conn) saslAuthenticate(req *kmsg.SASLAuthenticateRequest) (resp *kmsg.SASLAuthenticateResponse, close string, err error) {
	resp = kmsg.NewPtrSASLAuthenticateResponse()
	resp.Version = req.Version
	if c.sasl.stage != saslExchange || c.sasl.raw {
		resp.ErrorCode = c.ErrorCode(req.Key(), kerr.IllegalSaslState.Code)
		msg := "SaslAuthenticate before SaslHandshake v1"
		resp.ErrorMessage = &msg
		return resp, reasonSASLState, errors.New(msg)
	}
	mechanism := c.sasl.mechanism
	reply, err := c.saslStep(req.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode = c.ErrorCode(req.Key(), kerr.SaslAuthenticationFailed.Code)
		msg := saslFailureMessage(mechanism, err)
		resp.ErrorMessage = &msg
		return resp, reasonSASLFailed, err
	}
	resp.SASLAuthBytes = reply
	return resp, "", nil
}

// saslFailureMessage is the message of a failed SaslAuthenticate: Kafka's
// for bad credentials (never telling a wrong password from an unknown
// user), or why the attempt was not checked at all.
func saslFailureMessage(mechanism string, err error) string {
	var throttled *loginlimit.ThrottledError
	switch {
	case errors.As(err, &throttled):
		return fmt.Sprintf("Authentication failed with SASL mechanism %s: too many failed logins from this address; retry in %v",
			mechanism, throttled.RetryAfter.Round(time.Millisecond))
	case errors.Is(err, loginlimit.ErrBusy):
		return "Authentication failed with SASL mechanism " + mechanism + ": password checks are busy; retry"
	}
	return "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mechanism
}
