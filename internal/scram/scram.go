package scram

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"
)

// The mechanisms a credential can be for (RFC 7677, and SHA-512 as Kafka
// names it).
const (
	MechanismSHA256 = "SCRAM-SHA-256"
	MechanismSHA512 = "SCRAM-SHA-512"
)

// Mechanisms lists the supported mechanisms, SCRAM-SHA-256 first.
func Mechanisms() []string { return []string{MechanismSHA256, MechanismSHA512} }

// MinIterations is the least PBKDF2 iteration count accepted (RFC 7677),
// MaxIterations the most (Kafka's bound): a broker derives the key with
// the stored count on every password it checks, so a credential of a
// billion iterations would make each login of that user minutes of CPU.
// DefaultIterations is what NewCredential uses: Kafka's default (what
// kafka-configs stores for SCRAM users), twice the RFC's minimum, so a
// stolen credential costs twice as much to test guesses against.
// Credentials stored with fewer keep working: each carries its own count.
const (
	MinIterations     = 4096
	MaxIterations     = 16384
	DefaultIterations = 8192
	saltBytes         = 16
)

// Sentinel errors.
var (
	// ErrBadPassword: the password does not match the credential, or a
	// SCRAM client's proof does not (a user that does not exist fails
	// the same way).
	ErrBadPassword = errors.New("scram: wrong user name or password")
	// ErrInvalid: a credential that cannot be used (bad JSON, too few or
	// too many iterations, wrong key sizes, unknown mechanism).
	ErrInvalid = errors.New("scram: invalid credential")
	// ErrMalformed: a SCRAM client message that does not parse, or asks
	// for what the server does not offer (channel binding, extensions, an
	// authorization identity other than the user).
	ErrMalformed = errors.New("scram: malformed client message")
)

// mechanism is a SCRAM hash: its name and function.
type mechanism struct {
	name string
	hash func() hash.Hash
	size int
}

var (
	sha256Mechanism = mechanism{MechanismSHA256, sha256.New, sha256.Size}
	sha512Mechanism = mechanism{MechanismSHA512, sha512.New, sha512.Size}
)

func lookupMechanism(name string) (mechanism, bool) {
	switch name {
	case MechanismSHA256:
		return sha256Mechanism, true
	case MechanismSHA512:
		return sha512Mechanism, true
	}
	return mechanism{}, false
}

// Credential is what metad keeps of a user's password for one mechanism.
type Credential struct {
	Name       string `json:"name"`
	Mechanism  string `json:"mechanism"`
	Iterations int    `json:"iterations"`
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

// NewCredential salts and hashes password for name as SCRAM-SHA-256
// (iterations 0: DefaultIterations).
func NewCredential(name, password string, iterations int) (Credential, error) {
	return newCredential(sha256Mechanism, name, password, iterations)
}

func newCredential(m mechanism, name, password string, iterations int) (Credential, error) {
	if iterations == 0 {
		iterations = DefaultIterations
	}
	if iterations < MinIterations || iterations > MaxIterations {
		return Credential{}, fmt.Errorf("%w: %d iterations, want %d to %d", ErrInvalid, iterations, MinIterations, MaxIterations)
	}
	if password == "" {
		return Credential{}, fmt.Errorf("%w: empty password", ErrInvalid)
	}
	salt := make([]byte, saltBytes)
	if _, err := rand.Read(salt); err != nil {
		return Credential{}, err
	}
	return credentialWithSalt(m, name, password, salt, iterations)
}

func credentialWithSalt(m mechanism, name, password string, salt []byte, iterations int) (Credential, error) {
	stored, server, err := keys(m, password, salt, iterations)
	if err != nil {
		return Credential{}, err
	}
	return Credential{Name: name, Mechanism: m.name, Iterations: iterations, Salt: salt, StoredKey: stored, ServerKey: server}, nil
}

// keys derives StoredKey and ServerKey (RFC 5802 section 3).
func keys(m mechanism, password string, salt []byte, iterations int) (stored, server []byte, err error) {
	salted, err := pbkdf2.Key(m.hash, password, salt, iterations, m.size)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	h := m.hash()
	h.Write(mac(m, salted, []byte("Client Key")))
	return h.Sum(nil), mac(m, salted, []byte("Server Key")), nil
}

func mac(m mechanism, key, msg []byte) []byte {
	h := hmac.New(m.hash, key)
	h.Write(msg)
	return h.Sum(nil)
}

// Validate reports whether c can be checked against.
func (c Credential) Validate() error {
	m, ok := lookupMechanism(c.Mechanism)
	if !ok {
		return fmt.Errorf("%w: user %q: unknown mechanism %q", ErrInvalid, c.Name, c.Mechanism)
	}
	return c.validate(m)
}

func (c Credential) validate(m mechanism) error {
	if c.Mechanism != m.name || c.Iterations < MinIterations || c.Iterations > MaxIterations || len(c.Salt) < 8 ||
		len(c.StoredKey) != m.size || len(c.ServerKey) != m.size {
		return fmt.Errorf("%w: user %q", ErrInvalid, c.Name)
	}
	return nil
}

// Verify returns nil when password is c's, else ErrBadPassword (or
// ErrInvalid for an unusable credential).
func (c Credential) Verify(password string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	m, _ := lookupMechanism(c.Mechanism)
	stored, _, err := keys(m, password, c.Salt, c.Iterations)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(stored, c.StoredKey) != 1 {
		return ErrBadPassword
	}
	return nil
}

// Marshal encodes c for metad.
func (c Credential) Marshal() []byte {
	b, _ := json.Marshal(c)
	return b
}

// Unmarshal decodes a stored record's SCRAM-SHA-256 credential (every
// record has one, at its top level: see User).
func Unmarshal(b []byte) (Credential, error) {
	var c Credential
	if err := json.Unmarshal(b, &c); err != nil {
		return Credential{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := c.validate(sha256Mechanism); err != nil {
		return Credential{}, err
	}
	return c, nil
}

// User is a user's stored record: one credential per mechanism. The
// SCRAM-SHA-256 one sits at the top level of the JSON (the shape records
// had when that was the only mechanism, so a reader that knows only it
// still decodes the record), the others under "others".
type User struct {
	Credential
	Others []Credential `json:"others,omitempty"`
}

// NewUser salts and hashes password for name for every mechanism, each
// with its own salt (iterations 0: DefaultIterations).
func NewUser(name, password string, iterations int) (User, error) {
	sha256Cred, err := newCredential(sha256Mechanism, name, password, iterations)
	if err != nil {
		return User{}, err
	}
	sha512Cred, err := newCredential(sha512Mechanism, name, password, iterations)
	if err != nil {
		return User{}, err
	}
	return User{Credential: sha256Cred, Others: []Credential{sha512Cred}}, nil
}

// Marshal encodes u for metad.
func (u User) Marshal() []byte {
	b, _ := json.Marshal(u)
	return b
}

// UnmarshalUser decodes a stored record; a record without others (written
// before SCRAM-SHA-512 was stored) is a user of SCRAM-SHA-256 only.
func UnmarshalUser(b []byte) (User, error) {
	var u User
	if err := json.Unmarshal(b, &u); err != nil {
		return User{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := u.validate(sha256Mechanism); err != nil {
		return User{}, err
	}
	seen := map[string]bool{MechanismSHA256: true}
	for _, c := range u.Others {
		if err := c.Validate(); err != nil {
			return User{}, err
		}
		if seen[c.Mechanism] {
			return User{}, fmt.Errorf("%w: user %q: two %s credentials", ErrInvalid, u.Name, c.Mechanism)
		}
		seen[c.Mechanism] = true
	}
	return u, nil
}

// Lookup returns u's credential for mechanism.
func (u User) Lookup(mechanism string) (Credential, bool) {
	if u.Mechanism == mechanism {
		return u.Credential, true
	}
	for _, c := range u.Others {
		if c.Mechanism == mechanism {
			return c, true
		}
	}
	return Credential{}, false
}

// Mechanisms lists the mechanisms u has a credential for.
func (u User) Mechanisms() []string {
	out := []string{u.Mechanism}
	for _, c := range u.Others {
		out = append(out, c.Mechanism)
	}
	return out
}

// Decoy returns the credential a SCRAM exchange for a user that does not
// exist (or has no credential for mechanism) runs against, so that it
// takes the same path as a wrong password and fails the same way, at the
// proof. Everything in it is derived from key, mechanism and name: asking
// twice for one unknown name shows the same salt, as a real user's
// would. key is a secret of the caller's (the same on every broker of a
// cluster, or an observer comparing brokers' answers could still tell);
// no password matches the decoy's StoredKey.
func Decoy(key []byte, mechanism, name string) Credential {
	m, ok := lookupMechanism(mechanism)
	if !ok {
		m = sha256Mechanism
	}
	derive := func(label string) []byte {
		h := hmac.New(sha512.New, key)
		h.Write([]byte(label))
		h.Write([]byte{0})
		h.Write([]byte(m.name))
		h.Write([]byte{0})
		h.Write([]byte(name))
		return h.Sum(nil)
	}
	return Credential{
		Name: name, Mechanism: m.name, Iterations: DefaultIterations,
		Salt:      derive("salt")[:saltBytes],
		StoredKey: derive("stored key")[:m.size],
		ServerKey: derive("server key")[:m.size],
	}
}

// Lookup returns the credential of user for a conversation's mechanism.
// For a user that does not exist it returns a Decoy, not an error: errors
// are for failures to look (the user table not loaded yet).
type Lookup func(ctx context.Context, user string) (Credential, error)

// Cache remembers successful verifications (see the package doc). Safe
// for concurrent use.
type Cache struct {
	key [32]byte
	max int
	ttl time.Duration

	mu struct {
		sync.Mutex
		entries map[[32]byte]cacheEntry
	}
}

type cacheEntry struct {
	version int64
	expires time.Time
}

// NewCache returns a cache of at most max entries living ttl each.
func NewCache(max int, ttl time.Duration) *Cache {
	c := &Cache{max: max, ttl: ttl}
	if _, err := rand.Read(c.key[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	c.mu.entries = map[[32]byte]cacheEntry{}
	return c
}

func (c *Cache) id(name, password string) [32]byte {
	h := hmac.New(sha256.New, c.key[:])
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(password))
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Check reports whether (name, password) was verified against the record
// of version and has not expired at now.
func (c *Cache) Check(name, password string, version int64, now time.Time) bool {
	id := c.id(name, password)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.mu.entries[id]
	if !ok {
		return false
	}
	if e.version != version || !now.Before(e.expires) {
		delete(c.mu.entries, id)
		return false
	}
	return true
}

// Add remembers that (name, password) matched the record of version.
func (c *Cache) Add(name, password string, version int64, now time.Time) {
	id := c.id(name, password)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.mu.entries) >= c.max {
		for k, e := range c.mu.entries {
			if !now.Before(e.expires) {
				delete(c.mu.entries, k)
			}
		}
		for k := range c.mu.entries {
			if len(c.mu.entries) < c.max {
				break
			}
			delete(c.mu.entries, k)
		}
	}
	c.mu.entries[id] = cacheEntry{version: version, expires: now.Add(c.ttl)}
}

// Len is the number of entries.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.entries)
}

// gRPC metadata keys of a password login (per call, over TLS only).
const (
	MetadataUser     = "strata-user"
	MetadataPassword = "strata-password"
)
