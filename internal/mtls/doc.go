// Package mtls turns a node's certificate files (config.Security.Files) into
// what its connections use: a gRPC server credential that requires and
// verifies a client certificate, a gRPC dial credential for the node's own
// calls to other nodes, and plain tls.Configs for the Raft transport.
//
// One Credentials per process, built once from the files: every link the
// node serves or dials reads the same pki.Reloader, so replacing the files
// rotates the certificate for every new handshake without a restart
// (connections already open keep the certificate they were made with).
//
// Revocation: with a CRL file (pki.Files.CRL) every handshake, served or
// dialled, refuses a peer whose certificate the CRL lists (pki.ErrRevoked);
// the checks a caller adds (ServerTLS, ClientTLS) run after it.
//
// A nil *Credentials means TLS is off: its methods return plaintext
// options, so callers need no branch.
//
// Identities: the peer's verified certificate names a role (pki.Identity);
// PeerIdentity reads it from a gRPC call's context. What a role may call is
// decided by internal/authz, not here; RequireRole is the check for links
// that admit one role only (metad's Raft transport).
//
// # Errors
//
//   - Load: config validation errors, pki.ErrInvalid, file and PEM errors.
//   - PeerIdentity: ErrNoPeer (no verified certificate), pki.ErrNoIdentity.
//   - RequireRole's check: ErrWrongRole.
package mtls
