package scram

import (
	"bytes"
	"context"
	"crypto/pbkdf2"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// rfcExchange is a published SCRAM example: the four messages and what
// the server knows of the user.
type rfcExchange struct {
	name             string
	mech             mechanism
	password, salt64 string
	serverNonce      string
	clientFirst      string
	serverFirst      string
	clientFinal      string
	serverFinal      string
	iterations       int
}

var rfcExchanges = []rfcExchange{
	{
		// RFC 5802 section 5 (SCRAM-SHA-1): the conversation code is the
		// same for every hash, so its example checks it too.
		name: "RFC 5802", mech: mechanism{"SCRAM-SHA-1", sha1.New, sha1.Size},
		password: "pencil", salt64: "QSXCR+Q6sek8bf92", iterations: 4096,
		serverNonce: "3rfcNHYJY1ZVvWVs7j",
		clientFirst: "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
		serverFirst: "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
		clientFinal: "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
		serverFinal: "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
	},
	{
		// RFC 7677 section 3 (SCRAM-SHA-256).
		name: "RFC 7677", mech: sha256Mechanism,
		password: "pencil", salt64: "W22ZaJ0SNY7soEsUEjb6gQ==", iterations: 4096,
		serverNonce: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
		clientFirst: "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
		serverFirst: "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
		clientFinal: "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
		serverFinal: "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
	},
}

func fixedNonce(n string) func() (string, error) { return func() (string, error) { return n, nil } }

func TestServerRFCVectors(t *testing.T) {
	for _, x := range rfcExchanges {
		t.Run(x.name, func(t *testing.T) {
			salt, _ := base64.StdEncoding.DecodeString(x.salt64)
			cred, err := credentialWithSalt(x.mech, "user", x.password, salt, x.iterations)
			if err != nil {
				t.Fatal(err)
			}
			s := newServer(x.mech, func(_ context.Context, user string) (Credential, error) {
				if user != "user" {
					t.Errorf("looked up %q", user)
				}
				return cred, nil
			})
			s.nonce = fixedNonce(x.serverNonce)
			reply, done, err := s.Step(context.Background(), []byte(x.clientFirst))
			if err != nil || done || string(reply) != x.serverFirst {
				t.Fatalf("server-first %q done %v err %v, want %q", reply, done, err, x.serverFirst)
			}
			reply, done, err = s.Step(context.Background(), []byte(x.clientFinal))
			if err != nil || !done || string(reply) != x.serverFinal {
				t.Fatalf("server-final %q done %v err %v, want %q", reply, done, err, x.serverFinal)
			}
			if s.User() != "user" {
				t.Errorf("user %q", s.User())
			}
			if _, _, err := s.Step(context.Background(), []byte(x.clientFinal)); !errors.Is(err, ErrMalformed) {
				t.Errorf("a third message: %v", err)
			}
			// The same exchange against another password's credential
			// fails at the proof.
			other, _ := credentialWithSalt(x.mech, "user", "pencil2", salt, x.iterations)
			s = newServer(x.mech, func(context.Context, string) (Credential, error) { return other, nil })
			s.nonce = fixedNonce(x.serverNonce)
			if _, _, err := s.Step(context.Background(), []byte(x.clientFirst)); err != nil {
				t.Fatal(err)
			}
			if _, done, err := s.Step(context.Background(), []byte(x.clientFinal)); !errors.Is(err, ErrBadPassword) || done {
				t.Fatalf("wrong password: done %v err %v", done, err)
			}
		})
	}
}

// testClient is the client side of an exchange, written from RFC 5802
// (the Kafka package's tests use franz-go's client instead).
func testClient(t *testing.T, s *Server, m mechanism, gs2, user, password string) ([]byte, error) {
	t.Helper()
	return testClientEcho(t, s, m, gs2, user, password, func(nonce string) string { return nonce })
}

// testClientEcho is testClient whose client-final sends echo(the nonce
// of server-first) as its nonce.
func testClientEcho(t *testing.T, s *Server, m mechanism, gs2, user, password string, echo func(string) string) ([]byte, error) {
	t.Helper()
	bare := "n=" + strings.NewReplacer("=", "=3D", ",", "=2C").Replace(user) + ",r=clientnonce"
	serverFirst, _, err := s.Step(context.Background(), []byte(gs2+bare))
	if err != nil {
		return nil, err
	}
	var nonce, salt64 string
	var iterations int
	for _, kv := range strings.Split(string(serverFirst), ",") {
		switch kv[:2] {
		case "r=":
			nonce = kv[2:]
		case "s=":
			salt64 = kv[2:]
		case "i=":
			if err := json.Unmarshal([]byte(kv[2:]), &iterations); err != nil {
				t.Fatal(err)
			}
		}
	}
	salt, _ := base64.StdEncoding.DecodeString(salt64)
	salted, err := pbkdf2.Key(m.hash, password, salt, iterations, m.size)
	if err != nil {
		t.Fatal(err)
	}
	clientKey := mac(m, salted, []byte("Client Key"))
	h := m.hash()
	h.Write(clientKey)
	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte(gs2)) + ",r=" + echo(nonce)
	auth := []byte(bare + "," + string(serverFirst) + "," + withoutProof)
	proof := mac(m, h.Sum(nil), auth)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	final, done, err := s.Step(context.Background(), []byte(withoutProof+",p="+base64.StdEncoding.EncodeToString(proof)))
	if err != nil {
		return nil, err
	}
	if !done {
		t.Fatal("exchange not done after client-final")
	}
	want := "v=" + base64.StdEncoding.EncodeToString(mac(m, mac(m, salted, []byte("Server Key")), auth))
	if string(final) != want {
		t.Fatalf("server signature %q, want %q", final, want)
	}
	return final, nil
}

func TestServerBothMechanisms(t *testing.T) {
	u, err := NewUser("al,i=ce", "s3cret", 0)
	if err != nil {
		t.Fatal(err)
	}
	decoyKey := []byte("cluster secret")
	lookup := func(mech string) Lookup {
		return func(_ context.Context, name string) (Credential, error) {
			if name == u.Name {
				if c, ok := u.Lookup(mech); ok {
					return c, nil
				}
			}
			return Decoy(decoyKey, mech, name), nil
		}
	}
	for _, mech := range Mechanisms() {
		m, _ := lookupMechanism(mech)
		for _, gs2 := range []string{"n,,", "y,,", "n,a=al=2Ci=3Dce,"} {
			s, err := NewServer(mech, lookup(mech))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := testClient(t, s, m, gs2, "al,i=ce", "s3cret"); err != nil {
				t.Errorf("%s %q: %v", mech, gs2, err)
			}
			if s.User() != "al,i=ce" {
				t.Errorf("user %q", s.User())
			}
		}
		// A wrong password and an unknown user fail alike.
		for _, c := range []struct{ user, password string }{{"al,i=ce", "wrong"}, {"nobody", "s3cret"}} {
			s, _ := NewServer(mech, lookup(mech))
			if _, err := testClient(t, s, m, "n,,", c.user, c.password); !errors.Is(err, ErrBadPassword) {
				t.Errorf("%s %+v: %v, want ErrBadPassword", mech, c, err)
			}
		}
	}
	if _, err := NewServer("SCRAM-SHA-1", lookup(MechanismSHA256)); !errors.Is(err, ErrInvalid) {
		t.Errorf("SCRAM-SHA-1: %v", err)
	}
}

// An unknown user's server-first looks like a real user's: the same
// shape, the same salt on every attempt, the default iterations.
func TestDecoy(t *testing.T) {
	key := []byte("k")
	for _, mech := range Mechanisms() {
		a, b := Decoy(key, mech, "ghost"), Decoy(key, mech, "ghost")
		if err := a.Validate(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Salt, b.Salt) || len(a.Salt) != saltBytes || a.Iterations != DefaultIterations {
			t.Errorf("%s decoy %+v / %+v", mech, a, b)
		}
		if c := Decoy(key, mech, "ghost2"); bytes.Equal(c.Salt, a.Salt) {
			t.Error("two names share a decoy salt")
		}
		if c := Decoy([]byte("other"), mech, "ghost"); bytes.Equal(c.Salt, a.Salt) {
			t.Error("the decoy salt does not depend on the key")
		}
		if err := a.Verify("ghost"); !errors.Is(err, ErrBadPassword) {
			t.Errorf("decoy verify: %v", err)
		}
	}
}

func TestServerMalformed(t *testing.T) {
	cred, _ := NewCredential("user", "pw", 0)
	lookup := func(context.Context, string) (Credential, error) { return cred, nil }
	for _, first := range []string{
		"",
		"n,",
		"p=tls-unique,,n=user,r=abc",        // channel binding
		"x,,n=user,r=abc",                   // unknown flag
		"n,a=other,n=user,r=abc",            // authzid not the user
		"n,z=user,n=user,r=abc",             // not an authzid
		"n,,m=ext,n=user,r=abc",             // mandatory extension
		"n,,n=user,r=abc,tokenauth=true",    // extension
		"n,,n=,r=abc",                       // empty user
		"n,,n=us=2Xer,r=abc",                // bad escape
		"n,,n=user,r=",                      // empty nonce
		"n,,n=user,r=a\x7fb",                // nonce not printable
		"n,,r=abc,n=user",                   // order
		"n,,n=user",                         // no nonce
		"n,,n=us\x00er,r=abc",               // NUL
		"n,,n=user,r=abc,",                  // trailing comma: an empty extension
		"n,,n=user,r=abc,r=abc",             // repeated
		"n,,n=user,r=abc,p=v0X8v3Bz2T0CJGb", // a proof in the first message
	} {
		s, _ := NewServer(MechanismSHA256, lookup)
		if _, _, err := s.Step(context.Background(), []byte(first)); !errors.Is(err, ErrMalformed) {
			t.Errorf("client-first %q: %v, want ErrMalformed", first, err)
		}
	}
	start := func() (*Server, string) {
		s, _ := NewServer(MechanismSHA256, lookup)
		s.nonce = fixedNonce("SERVER")
		if _, _, err := s.Step(context.Background(), []byte("n,,n=user,r=abc")); err != nil {
			t.Fatal(err)
		}
		return s, "abcSERVER"
	}
	proof := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, final := range []string{
		"c=biws,r=abcSERVER",                  // no proof
		"c=biws,r=abcOTHER,p=" + proof,        // another nonce
		"c=biws,r=abc,p=" + proof,             // the client's nonce only
		"c=biws,r=abcabcabcSERVER,p=" + proof, // the client's nonce thrice
		"c=biws,r=xyzabcSERVER,p=" + proof,    // another prefix
		"c=biws,r=abcSERVERabc,p=" + proof,    // a suffix
		"c=eSws,r=abcSERVER,p=" + proof,       // y,, after n,,
		"c=biws,r=abcSERVER,x=ext,p=" + proof, // extension
		"r=abcSERVER,c=biws,p=" + proof,       // order
		"c=biws,r=abcSERVER,p=!!!",            // not base64
		"c=biws,r=abcSERVER,p=" + proof[:20],  // short proof
		"c=biws,r=abcSERVER,p=" + base64.StdEncoding.EncodeToString(make([]byte, 64)), // SHA-512 size
	} {
		s, _ := start()
		if _, done, err := s.Step(context.Background(), []byte(final)); !errors.Is(err, ErrMalformed) || done {
			t.Errorf("client-final %q: done %v err %v, want ErrMalformed", final, done, err)
		}
	}
	// A well-formed final with a wrong proof is a wrong password.
	s, _ := start()
	if _, _, err := s.Step(context.Background(), []byte("c=biws,r=abcSERVER,p="+proof)); !errors.Is(err, ErrBadPassword) {
		t.Errorf("zero proof: %v", err)
	}
	// A credential of the other mechanism is refused, not used.
	s, _ = NewServer(MechanismSHA512, lookup)
	if _, _, err := s.Step(context.Background(), []byte("n,,n=user,r=abc")); !errors.Is(err, ErrInvalid) {
		t.Errorf("SHA-256 credential in a SHA-512 exchange: %v", err)
	}
	// A lookup failure ends the exchange with it.
	boom := errors.New("users not loaded")
	s, _ = NewServer(MechanismSHA256, func(context.Context, string) (Credential, error) { return Credential{}, boom })
	if _, _, err := s.Step(context.Background(), []byte("n,,n=user,r=abc")); !errors.Is(err, boom) {
		t.Errorf("lookup error: %v", err)
	}
}

// librdkafka before 2.6.1 (kcat 1.7, confluent-kafka-python 1.7) sends
// its client nonce, then the server-first nonce, which begins with it
// again: the exchange succeeds, and a wrong password still fails.
func TestServerLibrdkafkaNonce(t *testing.T) {
	u, err := NewUser("alice", "s3cret", 0)
	if err != nil {
		t.Fatal(err)
	}
	doubled := func(nonce string) string { return "clientnonce" + nonce }
	for _, m := range []mechanism{sha256Mechanism, sha512Mechanism} {
		lookup := func(_ context.Context, name string) (Credential, error) {
			c, _ := u.Lookup(m.name)
			return c, nil
		}
		s, _ := NewServer(m.name, lookup)
		if _, err := testClientEcho(t, s, m, "n,,", "alice", "s3cret", doubled); err != nil {
			t.Errorf("%s, the client nonce twice: %v", m.name, err)
		}
		s, _ = NewServer(m.name, lookup)
		if _, err := testClientEcho(t, s, m, "n,,", "alice", "wrong", doubled); !errors.Is(err, ErrBadPassword) {
			t.Errorf("%s, the client nonce twice and a wrong password: %v, want ErrBadPassword", m.name, err)
		}
	}
}

func TestServerNonceRandom(t *testing.T) {
	cred, _ := NewCredential("user", "pw", 0)
	seen := map[string]bool{}
	for range 20 {
		s, _ := NewServer(MechanismSHA256, func(context.Context, string) (Credential, error) { return cred, nil })
		first, _, err := s.Step(context.Background(), []byte("n,,n=user,r=abc"))
		if err != nil {
			t.Fatal(err)
		}
		nonce, _, _ := strings.Cut(strings.TrimPrefix(string(first), "r=abc"), ",")
		if len(nonce) < 16 || !printable(nonce) || seen[nonce] {
			t.Fatalf("server nonce %q (seen %v)", nonce, seen[nonce])
		}
		seen[nonce] = true
	}
}

func TestUserRecord(t *testing.T) {
	u, err := NewUser("alice", "s3cret", MinIterations)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Mechanisms(); len(got) != 2 || got[0] != MechanismSHA256 || got[1] != MechanismSHA512 {
		t.Fatalf("mechanisms %v", got)
	}
	b := u.Marshal()
	if bytes.Contains(b, []byte("s3cret")) {
		t.Fatal("the record holds the password")
	}
	back, err := UnmarshalUser(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, mech := range Mechanisms() {
		c, ok := back.Lookup(mech)
		if !ok || c.Verify("s3cret") != nil || c.Verify("other") == nil {
			t.Errorf("%s credential %+v ok %v", mech, c, ok)
		}
	}
	c256, _ := back.Lookup(MechanismSHA256)
	c512, _ := back.Lookup(MechanismSHA512)
	if bytes.Equal(c256.Salt, c512.Salt) {
		t.Error("the mechanisms share a salt")
	}
	// A reader that knows only the single-credential shape decodes the
	// SHA-256 credential of a new record.
	old, err := Unmarshal(b)
	if err != nil || old.Mechanism != MechanismSHA256 || old.Verify("s3cret") != nil {
		t.Fatalf("old reader: %+v %v", old, err)
	}
	// A record written before SHA-512 was stored is a SHA-256-only user.
	single, _ := NewCredential("bob", "pw", 0)
	bob, err := UnmarshalUser(single.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := bob.Lookup(MechanismSHA512); ok {
		t.Error("an old record has a SHA-512 credential")
	}
	if c, ok := bob.Lookup(MechanismSHA256); !ok || c.Verify("pw") != nil {
		t.Error("an old record lost its SHA-256 credential")
	}
	// Broken records.
	twice := u
	twice.Others = append(twice.Others, twice.Others[0])
	short := u
	short.Others = []Credential{u.Others[0]}
	short.Others[0].StoredKey = short.Others[0].StoredKey[:32]
	only512 := User{Credential: u.Others[0]}
	for name, rec := range map[string][]byte{
		"duplicate mechanism":  twice.Marshal(),
		"short SHA-512 key":    short.Marshal(),
		"SHA-512 at top level": only512.Marshal(),
		"not JSON":             []byte("{"),
		"unknown other":        []byte(strings.Replace(string(b), MechanismSHA512, "SCRAM-SHA-1", 1)),
	} {
		if _, err := UnmarshalUser(rec); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
