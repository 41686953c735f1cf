package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

var testUsers = map[string]string{"alice": "alice-secret", "bob": "bob-secret"}

// newKgoClient is a franz-go client of the server.
func newKgoClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.RetryTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// principalVia asks Metadata through cl and returns the principal the
// handler saw.
func principalVia(t *testing.T, cl *kgo.Client) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := cl.Request(ctx, kmsg.NewPtrMetadataRequest())
	if err != nil {
		return "", err
	}
	return *resp.(*kmsg.MetadataResponse).ClusterID, nil
}

// franz-go negotiates: ApiVersions v5 gets the KIP-511 answer, v4 the
// list; then it sends Metadata at the version advertised.
func TestFranzGoClient(t *testing.T) {
	ts := startServer(t, Config{})
	cl := newKgoClient(t, ts.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := principalVia(t, cl); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"5", "4"} {
		if got := testutil.ToFloat64(ts.metrics.requests.WithLabelValues("ApiVersions", v)); got < 1 {
			t.Errorf("no ApiVersions v%s", v)
		}
	}
	if got := testutil.ToFloat64(ts.metrics.requests.WithLabelValues("Metadata", "12")); got < 1 {
		t.Error("no Metadata v12 (the highest advertised)")
	}
}

func TestSASLScramFranzGo(t *testing.T) {
	ts := startServer(t, Config{Security: newFakeSecurity(t, true, testUsers)})
	for _, tc := range []struct {
		name string
		mech func(scram.Auth) sasl.Mechanism
	}{
		{"SCRAM-SHA-256", scram.Auth.AsSha256Mechanism},
		{"SCRAM-SHA-512", scram.Auth.AsSha512Mechanism},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newKgoClient(t, ts.Addr().String(), kgo.SASL(tc.mech(scram.Auth{User: "alice", Pass: "alice-secret"})))
			if p, err := principalVia(t, cl); err != nil || p != "User:alice" {
				t.Fatalf("principal %q, err %v", p, err)
			}
			var msgs []string
			for _, auth := range []scram.Auth{{User: "alice", Pass: "wrong"}, {User: "nobody", Pass: "alice-secret"}} {
				cl := newKgoClient(t, ts.Addr().String(), kgo.SASL(tc.mech(auth)))
				_, err := principalVia(t, cl)
				if !errors.Is(err, kerr.SaslAuthenticationFailed) {
					t.Fatalf("%s: %v, want SASL_AUTHENTICATION_FAILED", auth.User, err)
				}
				msgs = append(msgs, err.Error())
			}
			if msgs[0] != msgs[1] {
				t.Errorf("a wrong password and an unknown user answer differently:\n%s\n%s", msgs[0], msgs[1])
			}
			if got := testutil.ToFloat64(ts.metrics.authFailure.WithLabelValues(tc.name)); got != 2 {
				t.Errorf("%v failures counted", got)
			}
		})
	}
}

func TestSASLPlain(t *testing.T) {
	// Without TLS PLAIN is not offered: the handshake says what is, then
	// the connection closes.
	ts := startServer(t, Config{Security: newFakeSecurity(t, true, testUsers)})
	c := dialRaw(t, ts.Addr().String())
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	resp := c.roundTrip(hs).(*kmsg.SASLHandshakeResponse)
	if resp.ErrorCode != kerr.UnsupportedSaslMechanism.Code || !slices.Equal(resp.SupportedMechanisms, []string{"SCRAM-SHA-256", "SCRAM-SHA-512"}) {
		t.Fatalf("PLAIN over plaintext: %+v", resp)
	}
	c.expectClosed()
	ts.waitClosedBy(t, reasonSASLMechanism, 1)
	cl := newKgoClient(t, ts.Addr().String(), kgo.SASL(plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism()))
	if _, err := principalVia(t, cl); !errors.Is(err, kerr.UnsupportedSaslMechanism) {
		t.Fatalf("franz-go PLAIN over plaintext: %v", err)
	}

	// Over TLS it is.
	p := newTestPKI(t)
	tts := startServer(t, Config{TLS: p.server, Security: newFakeSecurity(t, true, testUsers)})
	cl = newKgoClient(t, tts.Addr().String(), kgo.DialTLSConfig(p.client), kgo.SASL(plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism()))
	if principal, err := principalVia(t, cl); err != nil || principal != "User:bob" {
		t.Fatalf("PLAIN over TLS: %q %v", principal, err)
	}
	cl = newKgoClient(t, tts.Addr().String(), kgo.DialTLSConfig(p.client), kgo.SASL(plain.Auth{User: "bob", Pass: "nope"}.AsMechanism()))
	if _, err := principalVia(t, cl); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("PLAIN wrong password: %v", err)
	}
}

// authenticateV1 runs SaslHandshake v1 and SaslAuthenticate requests
// with franz-go's client side of mech.
func authenticateV1(t *testing.T, c *rawClient, mech sasl.Mechanism) (*kmsg.SASLAuthenticateResponse, error) {
	t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, mech.Name()
	if resp := c.roundTrip(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
		t.Fatalf("handshake: %+v", resp)
	}
	session, token, err := mech.Authenticate(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for {
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.Version, req.SASLAuthBytes = 2, token
		resp := c.roundTrip(req).(*kmsg.SASLAuthenticateResponse)
		if resp.ErrorCode != 0 {
			return resp, kerr.ErrorForCode(resp.ErrorCode)
		}
		if resp.SessionLifetimeMillis != 0 {
			t.Errorf("session lifetime %d", resp.SessionLifetimeMillis)
		}
		var done bool
		if done, token, err = session.Challenge(resp.SASLAuthBytes); err != nil || done {
			return resp, err
		}
	}
}

// On a listener requiring authentication only ApiVersions and the SASL
// APIs are served before it; anything else closes the connection.
func TestPreAuthGate(t *testing.T) {
	ts := startServer(t, Config{Security: newFakeSecurity(t, true, testUsers), MaxUnauthenticatedRequestBytes: 4096})
	big := make([]string, 0, 800)
	for range cap(big) {
		big = append(big, "topic")
	}
	for _, tc := range []struct {
		name   string
		steps  func(c *rawClient)
		reason string
	}{
		{"Metadata first", func(c *rawClient) { c.roundTrip(apiVersionsRequest(3)); c.send(metadataRequest(1)) }, reasonUnauthenticated},
		{"Metadata mid-exchange", func(c *rawClient) {
			hs := kmsg.NewPtrSASLHandshakeRequest()
			hs.Version, hs.Mechanism = 1, "SCRAM-SHA-256"
			c.roundTrip(hs)
			c.roundTrip(apiVersionsRequest(3)) // still allowed
			c.send(metadataRequest(1))
		}, reasonUnauthenticated},
		{"authenticate before handshake", func(c *rawClient) {
			resp := c.roundTrip(kmsg.NewPtrSASLAuthenticateRequest()).(*kmsg.SASLAuthenticateResponse)
			if resp.ErrorCode != kerr.IllegalSaslState.Code {
				t.Errorf("SaslAuthenticate first: %+v", resp)
			}
		}, reasonSASLState},
		{"a large frame", func(c *rawClient) { c.send(metadataRequest(1, big...)) }, reasonFrameTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, handled := ts.closedBy(tc.reason), ts.handler.handled.Load()
			c := dialRaw(t, ts.Addr().String())
			tc.steps(c)
			c.expectClosed()
			ts.waitClosedBy(t, tc.reason, before+1)
			if ts.handler.handled.Load() != handled {
				t.Error("a handler saw a request before authentication")
			}
		})
	}
	// Authenticated, the same large frame is served, and a second
	// handshake is out of turn.
	c := dialRaw(t, ts.Addr().String())
	if _, err := authenticateV1(t, c, scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()); err != nil {
		t.Fatal(err)
	}
	if resp := c.roundTrip(metadataRequest(4, big...)).(*kmsg.MetadataResponse); *resp.ClusterID != "User:alice" || len(resp.Topics) != len(big) {
		t.Fatalf("after SCRAM: principal %q, %d topics", *resp.ClusterID, len(resp.Topics))
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "SCRAM-SHA-256"
	if resp := c.roundTrip(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("second handshake: %+v", resp)
	}
	c.expectClosed()
}

// SaslHandshake v0 (kafka-python): the tokens follow as bare frames, the
// answers too; a failure closes without an answer.
func TestSASLHandshakeV0RawTokens(t *testing.T) {
	p := newTestPKI(t)
	ts := startServer(t, Config{TLS: p.server, Security: newFakeSecurity(t, true, testUsers)})
	run := func(mech sasl.Mechanism) (*rawClient, error) {
		c := dialTLS(t, ts.Addr().String(), p.client)
		c.roundTrip(apiVersionsRequest(0))
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 0, mech.Name()
		if resp := c.roundTrip(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 || len(resp.SupportedMechanisms) != 3 {
			t.Fatalf("handshake v0: %+v", resp)
		}
		session, token, err := mech.Authenticate(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		for {
			c.writeToken(token)
			reply, err := c.readFrame()
			if err != nil {
				return c, err
			}
			done, next, err := session.Challenge(reply)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			if done {
				return c, nil
			}
			token = next
		}
	}
	for _, mech := range []sasl.Mechanism{
		scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism(),
		scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism(),
		plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism(), // answered by an empty frame
	} {
		c, err := run(mech)
		if err != nil {
			t.Fatalf("%s: %v", mech.Name(), err)
		}
		if resp := c.roundTrip(metadataRequest(4)).(*kmsg.MetadataResponse); *resp.ClusterID != "User:alice" {
			t.Errorf("%s: principal %q", mech.Name(), *resp.ClusterID)
		}
	}
	before := ts.closedBy(reasonSASLFailed)
	if _, err := run(scram.Auth{User: "alice", Pass: "wrong"}.AsSha256Mechanism()); err == nil {
		t.Fatal("a wrong password got an answer")
	}
	ts.waitClosedBy(t, reasonSASLFailed, before+1)
}

// A verified client certificate authenticates; a certificate Security
// refuses closes the connection; none leaves SASL to do.
func TestCertificateAuthentication(t *testing.T) {
	p := newTestPKI(t)
	ts := startServer(t, Config{TLS: p.server, Security: newFakeSecurity(t, true, testUsers)})
	c := dialTLS(t, ts.Addr().String(), p.clientWithCert(t, "carol"))
	if resp := c.roundTrip(metadataRequest(4)).(*kmsg.MetadataResponse); *resp.ClusterID != "cert:carol" {
		t.Fatalf("principal %q", *resp.ClusterID)
	}
	refused := dialTLS(t, ts.Addr().String(), p.clientWithCert(t, "refused"))
	refused.expectClosed()
	ts.waitClosedBy(t, reasonCertificate, 1)
	none := dialTLS(t, ts.Addr().String(), p.client)
	none.send(metadataRequest(1))
	none.expectClosed()
	ts.waitClosedBy(t, reasonUnauthenticated, 1)
	// A certificate from another CA fails the handshake.
	mallory := newTestPKI(t).clientWithCert(t, "mallory")
	cfg := p.client.Clone()
	cfg.Certificates, cfg.GetClientCertificate = mallory.Certificates, mallory.GetClientCertificate
	if nc, err := tls.Dial("tcp", ts.Addr().String(), cfg); err == nil {
		rc := &rawClient{t: t, nc: nc}
		rc.expectClosed()
		_ = nc.Close()
	}
	ts.waitClosedBy(t, reasonTLS, 1)
	if !strings.Contains(ts.Server.cfg.String(), "tls=true auth=true") {
		t.Error(ts.Server.cfg.String())
	}
}

// The broker's TLS config requires client certificates (through
// GetConfigForClient, for reloading); the listener still serves clients
// without one, verifying one when given.
func TestTLSClientCertificateOptional(t *testing.T) {
	p := newTestPKI(t)
	perClient, err := p.server.GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil || perClient.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("the broker's config does not require certificates (%v): nothing to show", err)
	}
	ts := startServer(t, Config{TLS: p.server, Security: newFakeSecurity(t, false, nil)})
	c := dialTLS(t, ts.Addr().String(), p.client)
	if resp := c.roundTrip(metadataRequest(4)).(*kmsg.MetadataResponse); *resp.ClusterID != "" {
		t.Fatalf("anonymous principal %q", *resp.ClusterID)
	}
	withCert := dialTLS(t, ts.Addr().String(), p.clientWithCert(t, "dave"))
	if resp := withCert.roundTrip(metadataRequest(4)).(*kmsg.MetadataResponse); *resp.ClusterID != "cert:dave" {
		t.Fatalf("certificate principal %q", *resp.ClusterID)
	}
	if again, _ := p.server.GetConfigForClient(&tls.ClientHelloInfo{}); again.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Error("the caller's TLS config was changed")
	}
}

// A login the Security throttles fails with a message that says so (not
// "invalid credentials"), and every SCRAM exchange whose credential was
// given out is reported to ScramDone once, success or failure; one
// refused before that is not.
func TestSASLThrottledAndScramDone(t *testing.T) {
	sec := newFakeSecurity(t, true, testUsers)
	sec.throttled = map[string]bool{"locked": true}
	p := newTestPKI(t)
	ts := startServer(t, Config{TLS: p.server, Security: sec})
	for _, mech := range []sasl.Mechanism{
		plain.Auth{User: "locked", Pass: "x"}.AsMechanism(),
		scram.Auth{User: "locked", Pass: "x"}.AsSha256Mechanism(),
	} {
		resp, err := authenticateV1(t, dialTLS(t, ts.Addr().String(), p.client), mech)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) || resp.ErrorMessage == nil || !strings.Contains(*resp.ErrorMessage, "too many failed logins") {
			t.Fatalf("%s throttled: %v %v, want SASL_AUTHENTICATION_FAILED saying too many failed logins", mech.Name(), err, resp.ErrorMessage)
		}
	}
	resp, err := authenticateV1(t, dialTLS(t, ts.Addr().String(), p.client), scram.Auth{User: "alice", Pass: "wrong"}.AsSha256Mechanism())
	if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(*resp.ErrorMessage, "invalid credentials") {
		t.Fatalf("wrong password: %v %v", err, resp.ErrorMessage)
	}
	if _, err := authenticateV1(t, dialTLS(t, ts.Addr().String(), p.client), scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()); err != nil {
		t.Fatalf("right password: %v", err)
	}
	done := sec.scramDone()
	if len(done) != 2 || done[0].user != "alice" || done[0].err == nil || done[1].user != "alice" || done[1].err != nil {
		t.Fatalf("ScramDone calls %+v, want alice's failure then her success", done)
	}
}
