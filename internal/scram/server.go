package scram

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// serverNonceBytes is the random part the server adds to the client's
// nonce (RFC 5802 section 5.1: "a sequence of random printable
// characters"; base64 of these bytes).
const serverNonceBytes = 18

// Server is the server side of one SCRAM exchange (RFC 5802 section 5,
// without channel binding):
//
//	client-first   gs2-header client-first-bare
//	               gs2-header = ("n" | "y") "," ["a=" user] ","
//	               client-first-bare = "n=" user ",r=" client-nonce
//	server-first   "r=" client-nonce server-nonce ",s=" base64(salt) ",i=" iterations
//	client-final   "c=" base64(gs2-header) ",r=" nonce ",p=" base64(ClientProof)
//	server-final   "v=" base64(ServerSignature)
//
// A user name escapes "," and "=" as "=2C" and "=3D". The client-final
// nonce is the one the server sent (client nonce + server nonce) or, as
// librdkafka before 2.6.1 sends it, the client nonce followed by the one
// the server sent (its client nonce twice: librdkafka PR 4895; Apache
// Kafka 3.x accepts it too). Both carry the server's nonce, and the proof
// covers the nonce as sent, so neither can be replayed into another
// exchange. Refused as ErrMalformed: channel binding ("p=..."), an
// authorization identity other than the user, the mandatory-extension
// attribute "m=", any extension, a nonce that is not printable or neither
// form of the one the server sent, a channel-binding attribute that is
// not the gs2-header. A proof that does not match fails with
// ErrBadPassword, for a user that does not exist too (the Lookup answers
// a Decoy, so the exchange is the same).
// A Server is used by one goroutine.
type Server struct {
	mech   mechanism
	lookup Lookup
	// nonce returns the server's random nonce part (tests fix it).
	nonce func() (string, error)

	step            int
	user            string
	cred            Credential
	gs2Header       string
	clientFirstBare string
	serverFirst     string
	clientNonce     string
	fullNonce       string
}

// NewServer starts an exchange for mechanism (MechanismSHA256 or
// MechanismSHA512), looking the user's credential up with lookup.
func NewServer(mechanism string, lookup Lookup) (*Server, error) {
	m, ok := lookupMechanism(mechanism)
	if !ok {
		return nil, fmt.Errorf("%w: unknown mechanism %q", ErrInvalid, mechanism)
	}
	return newServer(m, lookup), nil
}

func newServer(m mechanism, lookup Lookup) *Server {
	return &Server{mech: m, lookup: lookup, nonce: randomNonce}
}

func randomNonce() (string, error) {
	b := make([]byte, serverNonceBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawStdEncoding.EncodeToString(b), nil
}

// User is the user name the client gave (unescaped); it is authenticated
// only once Step has returned done.
func (s *Server) User() string { return s.user }

// Step takes the client's next message and returns the server's answer;
// done is true with the server-final message, once the client's proof
// matched. Any error ends the exchange.
func (s *Server) Step(ctx context.Context, msg []byte) (reply []byte, done bool, err error) {
	defer func() { s.step++ }()
	switch s.step {
	case 0:
		reply, err = s.clientFirst(ctx, string(msg))
		return reply, false, err
	case 1:
		reply, err = s.clientFinal(string(msg))
		return reply, err == nil, err
	}
	return nil, false, fmt.Errorf("%w: message after the exchange ended", ErrMalformed)
}

func (s *Server) clientFirst(ctx context.Context, msg string) ([]byte, error) {
	// gs2-header: cbind-flag "," [authzid] ","
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok || (flag != "n" && flag != "y") {
		return nil, fmt.Errorf("%w: channel binding %q not supported", ErrMalformed, flag)
	}
	authzid, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, fmt.Errorf("%w: no gs2 header", ErrMalformed)
	}
	s.gs2Header = flag + "," + authzid + ","
	attrs := strings.Split(bare, ",")
	if len(attrs) != 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") {
		return nil, fmt.Errorf("%w: client-first wants exactly n=USER,r=NONCE (no extensions)", ErrMalformed)
	}
	user, err := unescapeName(attrs[0][2:])
	if err != nil {
		return nil, err
	}
	if authzid != "" {
		zid, err := unescapeName(strings.TrimPrefix(authzid, "a="))
		if err != nil || !strings.HasPrefix(authzid, "a=") || zid != user {
			return nil, fmt.Errorf("%w: authorization identity must be the user", ErrMalformed)
		}
	}
	clientNonce := attrs[1][2:]
	if !printable(clientNonce) {
		return nil, fmt.Errorf("%w: nonce not printable", ErrMalformed)
	}
	s.user, s.clientFirstBare = user, bare
	cred, err := s.lookup(ctx, user)
	if err != nil {
		return nil, err
	}
	if err := cred.validate(s.mech); err != nil {
		return nil, err
	}
	serverNonce, err := s.nonce()
	if err != nil {
		return nil, err
	}
	s.cred, s.clientNonce, s.fullNonce = cred, clientNonce, clientNonce+serverNonce
	s.serverFirst = "r=" + s.fullNonce + ",s=" + base64.StdEncoding.EncodeToString(cred.Salt) + ",i=" + strconv.Itoa(cred.Iterations)
	return []byte(s.serverFirst), nil
}

func (s *Server) clientFinal(msg string) ([]byte, error) {
	withoutProof, proof64, ok := cutLast(msg, ",p=")
	if !ok {
		return nil, fmt.Errorf("%w: client-final without a proof", ErrMalformed)
	}
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) != 2 || !strings.HasPrefix(attrs[0], "c=") || !strings.HasPrefix(attrs[1], "r=") {
		return nil, fmt.Errorf("%w: client-final wants exactly c=...,r=...,p=... (no extensions)", ErrMalformed)
	}
	if attrs[0][2:] != base64.StdEncoding.EncodeToString([]byte(s.gs2Header)) {
		return nil, fmt.Errorf("%w: channel binding attribute does not repeat the gs2 header", ErrMalformed)
	}
	if nonce := attrs[1][2:]; nonce != s.fullNonce && nonce != s.clientNonce+s.fullNonce {
		return nil, fmt.Errorf("%w: nonce differs from the server's", ErrMalformed)
	}
	proof, err := base64.StdEncoding.DecodeString(proof64)
	if err != nil || len(proof) != s.mech.size {
		return nil, fmt.Errorf("%w: proof is not a base64 %d-byte string", ErrMalformed, s.mech.size)
	}
	authMessage := []byte(s.clientFirstBare + "," + s.serverFirst + "," + withoutProof)
	// ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage); the
	// proof holds when H(ClientKey) = StoredKey.
	clientKey := mac(s.mech, s.cred.StoredKey, authMessage)
	for i := range clientKey {
		clientKey[i] ^= proof[i]
	}
	h := s.mech.hash()
	h.Write(clientKey)
	if subtle.ConstantTimeCompare(h.Sum(nil), s.cred.StoredKey) != 1 {
		return nil, ErrBadPassword
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(mac(s.mech, s.cred.ServerKey, authMessage))), nil
}

// unescapeName decodes a saslname: "=2C" is ",", "=3D" is "=", any other
// "=" is malformed; empty names are too.
func unescapeName(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("%w: empty user name", ErrMalformed)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] != '=':
			if s[i] == 0 {
				return "", fmt.Errorf("%w: NUL in user name", ErrMalformed)
			}
			b.WriteByte(s[i])
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
			i += 2
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
			i += 2
		default:
			return "", fmt.Errorf("%w: bad escape in user name", ErrMalformed)
		}
	}
	return b.String(), nil
}

// printable: RFC 5802's printable (0x21-0x7E except ","), non-empty.
func printable(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == ',' {
			return false
		}
	}
	return true
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
