// Package pki is the certificate side of Strata's TLS: a small
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
//     role (metad grants a bookie or broker its own registration by it,
//     internal/authz K2), the user name for admin and user.
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
// rotation from the next connection on). TLS 1.3 only between nodes;
// HTTPSConfig (the admin HTTP address) takes TLS 1.2 too and a client
// certificate only when one is given.
//
// # Revocation
//
// Files.CRL optionally names a file of PEM "X509 CRL" blocks. Each must be
// signed by a certificate of the CA bundle, or the file does not load
// (at start: an error; on a change: the previous lists stay in use, like
// a bad certificate rotation). Every handshake, both ways (servers
// checking clients, clients checking servers), refuses a peer whose
// verified chain holds a certificate listed by a CRL of its issuer
// (ErrRevoked). The file is re-read on change like the others, so
// publishing a new CRL revokes from the next handshake on; connections
// already open stay open until they close. NextUpdate is not enforced: a
// stale CRL still revokes what it lists. CA.CRL signs one (tests, tools).
//
// # Errors
//
//   - NewCA, Issue: key generation and encoding errors (rare).
//   - NewReloader: ErrInvalid (missing paths), file and PEM errors.
//   - IdentityOf: ErrNoIdentity.
//   - ParseCRLs, NewReloader with a CRL: ErrInvalid (no CRL block, a CRL
//     not signed by the CA bundle).
//   - handshakes: ErrRevoked (a listed peer certificate).
package pki
