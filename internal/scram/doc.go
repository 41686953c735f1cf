// Package scram stores and checks user passwords the way SCRAM-SHA-256
// and SCRAM-SHA-512 do (RFC 5802, RFC 7677), so that what metad holds
// cannot be replayed as a password, and runs the server side of a SCRAM
// exchange (Server) for the Kafka listener's SASL:
//
//	SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations, size of H)
//	ClientKey      = HMAC-H(SaltedPassword, "Client Key")
//	StoredKey      = H(ClientKey)
//	ServerKey      = HMAC-H(SaltedPassword, "Server Key")
//
// with H SHA-256 or SHA-512. A Credential keeps, for one mechanism, the
// salt (16 random bytes, its own per user and mechanism), the iteration
// count (MinIterations to MaxIterations; new credentials get
// DefaultIterations, Kafka's 8192) and StoredKey and ServerKey,
// never the password nor SaltedPassword. Verify recomputes StoredKey from
// a password and compares in constant time; a SCRAM exchange checks the
// client's proof against StoredKey and signs with ServerKey, so the
// password never crosses the wire.
//
// # Storage format
//
// A user's record is stored in metad (key acl.UsersPrefix + NAME) as
// JSON: its SCRAM-SHA-256 credential at the top level and the other
// mechanisms' under "others":
//
//	{"name":"alice","mechanism":"SCRAM-SHA-256","iterations":8192,
//	 "salt":"<base64>","stored_key":"<base64>","server_key":"<base64>",
//	 "others":[{"name":"alice","mechanism":"SCRAM-SHA-512",...}]}
//
// Records written before SCRAM-SHA-512 was stored have no "others": they
// decode as users of SCRAM-SHA-256 only, and Unmarshal (which reads the
// top level alone) decodes new records as well, so a reader that knows
// only SCRAM-SHA-256 keeps working. NewUser writes both mechanisms.
//
// # Passwords over gRPC
//
// The gRPC API's password travels from the client to the broker in
// per-call metadata (strata-user, strata-password), over TLS only: there
// the broker does not run SCRAM's challenge-response, TLS protects the
// password in flight, and the salted hash protects it at rest.
//
// # Server exchanges
//
// Server implements RFC 5802 section 5 without channel binding (see its
// doc for what it refuses). A user that does not exist must take the same
// path, in the same time, as a wrong password: the Lookup a Server is
// given answers a Decoy for it (a credential derived from a secret key
// and the name, so its salt is stable across attempts), and the exchange
// fails at the proof with ErrBadPassword, as a wrong password does.
//
// # Cache
//
// PBKDF2 costs milliseconds on purpose; a Cache remembers successful
// checks so a call does not pay it each time. Entries are keyed by an
// HMAC, under a random per-process key, of name and password (so the
// cache holds nothing a stolen memory dump could test passwords against
// faster than PBKDF2), tied to the version of the user's record (a
// changed or deleted user misses) and expire after a TTL. The cache is
// bounded; when full it drops expired entries, then an arbitrary one.
package scram
