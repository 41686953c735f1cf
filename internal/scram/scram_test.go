package scram

import (
	"bytes"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"testing"
	"time"
)

func TestCredential(t *testing.T) {
	c, err := NewCredential("alice", "s3cret", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Iterations != 8192 || len(c.Salt) != saltBytes {
		t.Fatalf("credential %+v, want Kafka's default of 8192 iterations", c)
	}
	if bytes.Contains(c.Marshal(), []byte("s3cret")) {
		t.Fatal("the stored credential holds the password")
	}
	back, err := Unmarshal(c.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Verify("s3cret"); err != nil {
		t.Fatalf("right password: %v", err)
	}
	for _, wrong := range []string{"", "s3cre", "s3cret ", "S3cret"} {
		if err := back.Verify(wrong); !errors.Is(err, ErrBadPassword) {
			t.Errorf("password %q: %v, want ErrBadPassword", wrong, err)
		}
	}
	// Per-user random salt: the same password stores differently.
	c2, _ := NewCredential("bob", "s3cret", 0)
	if bytes.Equal(c.Salt, c2.Salt) || bytes.Equal(c.StoredKey, c2.StoredKey) {
		t.Error("two users with one password share salt or key")
	}
	for _, n := range []int{1000, MaxIterations + 1} {
		if _, err := NewCredential("x", "p", n); !errors.Is(err, ErrInvalid) {
			t.Errorf("%d iterations: %v", n, err)
		}
	}
	if _, err := NewCredential("x", "p", MaxIterations); err != nil {
		t.Errorf("%d iterations: %v", MaxIterations, err)
	}
	// A stored credential out of bounds is refused before any derivation
	// (a billion iterations would take minutes).
	for _, n := range []int{1, 1 << 30} {
		bad := c
		bad.Iterations = n
		if err := bad.Verify("s3cret"); !errors.Is(err, ErrInvalid) {
			t.Errorf("a stored credential of %d iterations: %v", n, err)
		}
	}
}

// A credential stored with the earlier default of 4096 iterations keeps
// working: it carries its own count.
func TestStoredIterationsKept(t *testing.T) {
	old, err := NewUser("carol", "pw", MinIterations)
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalUser(old.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	for _, mech := range Mechanisms() {
		c, ok := back.Lookup(mech)
		if !ok || c.Iterations != MinIterations {
			t.Fatalf("%s: %+v", mech, c)
		}
		if err := c.Verify("pw"); err != nil {
			t.Errorf("%s credential of %d iterations: %v", mech, MinIterations, err)
		}
	}
}

// TestRFC7677 checks the derivation against the SCRAM-SHA-256 example of
// RFC 7677 (user "user", password "pencil", 4096 iterations): the
// ServerSignature of its exchange is HMAC(ServerKey, AuthMessage).
func TestRFC7677(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	stored, server, err := keys(sha256Mechanism, "pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	auth := "n=user,r=rOprNGfwEbeRWgbNEkqO," +
		"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096," +
		"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
	if got := base64.StdEncoding.EncodeToString(mac(sha256Mechanism, server, []byte(auth))); got != "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=" {
		t.Errorf("server signature %s", got)
	}
	// ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage).
	salted, _ := pbkdf2.Key(sha256.New, "pencil", salt, 4096, 32)
	clientKey := mac(sha256Mechanism, salted, []byte("Client Key"))
	sig := mac(sha256Mechanism, stored, []byte(auth))
	proof := make([]byte, len(sig))
	for i := range sig {
		proof[i] = clientKey[i] ^ sig[i]
	}
	if got := base64.StdEncoding.EncodeToString(proof); got != "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=" {
		t.Errorf("client proof %s", got)
	}
}

func TestCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCache(3, time.Minute)
	if c.Check("alice", "pw", 7, now) {
		t.Fatal("hit on an empty cache")
	}
	c.Add("alice", "pw", 7, now)
	if !c.Check("alice", "pw", 7, now.Add(time.Second)) {
		t.Fatal("miss after Add")
	}
	if c.Check("alice", "other", 7, now) || c.Check("bob", "pw", 7, now) {
		t.Fatal("hit for another password or user")
	}
	if c.Check("alice", "pw", 8, now) {
		t.Fatal("hit after the user's record changed")
	}
	c.Add("alice", "pw", 8, now)
	if c.Check("alice", "pw", 8, now.Add(time.Minute)) {
		t.Fatal("hit after the TTL")
	}
	for i := range 10 {
		c.Add(string(rune('a'+i)), "pw", 1, now)
	}
	if n := c.Len(); n > 3 {
		t.Fatalf("%d entries, bound 3", n)
	}
}
