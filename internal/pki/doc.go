// Package pki is the certificate side of Strata's TLS (issue #13): a small
// certificate authority for local clusters (`strata dev --tls`, tests),
// the identity a certificate carries, and TLS configurations whose
// certificate and CA files are read again when they change, so a node's
// certificate rotates without a restart.
//
// # Identity
//
// A certificate names one principal:
//
//   - its role, in a URI subject alternative name "urn:strata:role:ROLE",
//     ROLE one of metad, bookie, broker, admin, user;
//   - its name, in the subject common name: the node id for a cluster
//     role, the user name for admin and user.
//
// IdentityOf reads both from a verified peer certificate; a certificate
// with no role, or more than one, has no identity (ErrNoIdentity). Servers
// decide what a role may call; this package only says who is calling.
//
// # Files and reloading
//
// A node is given three PEM files: its certificate chain, its private key
// and the CA bundle it trusts for peers (Files). Reloader reads them at
// start and again on a handshake once they have changed on disk (checked
// at most every CheckInterval, by size and modification time), so an
// operator rotates a certificate by replacing the files. A change that
// does not load (a key that does not match, a half-written file) is
// logged by the caller through Err and the previous certificates stay in
// use: a bad rotation never takes a node off the network.
//
// Both sides verify: servers require and check a client certificate
// (mTLS), clients check the server's against the CA bundle and the
// address dialled (ClientConfig is built per connection, so it follows a
// rotation from the next connection on). TLS 1.3 only. Not yet: revocation
// lists; a certificate is good until it expires.
//
// # Errors
//
//   - NewCA, Issue: key generation and encoding errors (rare).
//   - NewReloader: ErrInvalid (missing paths), file and PEM errors.
//   - IdentityOf: ErrNoIdentity.
package pki
