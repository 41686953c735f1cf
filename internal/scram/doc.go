// Package scram stores and checks user passwords the way SCRAM-SHA-256
// (RFC 5802, RFC 7677) does, so that what metad holds cannot be replayed
// as a password:
//
//	SaltedPassword = PBKDF2-HMAC-SHA256(password, salt, iterations, 32)
//	ClientKey      = HMAC-SHA256(SaltedPassword, "Client Key")
//	StoredKey      = SHA256(ClientKey)
//	ServerKey      = HMAC-SHA256(SaltedPassword, "Server Key")
//
// A Credential keeps the salt (16 random bytes per user), the iteration
// count (at least MinIterations) and StoredKey and ServerKey, never the
// password nor SaltedPassword. Verify recomputes StoredKey from a
// password and compares in constant time.
//
// # Wire and storage format
//
// A Credential is stored in metad (key acl.UsersPrefix + NAME) as JSON:
//
//	{"name":"alice","mechanism":"SCRAM-SHA-256","iterations":4096,
//	 "salt":"<base64>","stored_key":"<base64>","server_key":"<base64>"}
//
// The password travels from the client to the broker in per-call gRPC
// metadata (strata-user, strata-password), over TLS only: the broker does
// not run SCRAM's challenge-response, TLS protects the password in
// flight, and the salted hash protects it at rest.
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
