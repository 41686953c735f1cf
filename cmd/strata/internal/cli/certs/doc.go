// Package certs is the certificate side of the strata command-line tool,
// what a deployment needs to run TLS without any other tool:
//
//   - a CA in a directory (`strata cert ca DIR`): DIR/ca.crt and
//     DIR/ca.key, made once and kept (EnsureCA);
//   - certificates signed by it (`strata cert issue`), each named by a
//     Spec "[PATH=]ROLE:NAME[:HOST,...]": the role and name are the
//     identity internal/pki reads back (IdentityOf), the hosts the DNS
//     names and IP addresses the holder serves as; Issue writes
//     OUT/PATH.crt, OUT/PATH.key and the CA's certificate as ca.crt in
//     the same directory, so each directory is one node's complete set;
//   - a CA and an admin certificate kept in Kubernetes Secrets
//     (`strata cert kubernetes`, the Helm chart's pre-install Job):
//     EnsureSecrets through Kube, a client of the Secrets API only.
//
// # Invariants
//
//   - C1: an existing CA is never replaced: EnsureCA keeps a complete one
//     (after checking that its key matches its certificate) and refuses a
//     half one; EnsureSecrets keeps an existing CA Secret the same way.
//     Every certificate ever issued from a CA stays trusted as long as
//     the CA does.
//   - C2: a private key file is written with mode 0600 to a temporary name
//     and renamed into place, before its certificate is, so a node that
//     reloads its files on change never reads a half-written key (the
//     reloader keeps its previous certificate when the pair does not
//     match: internal/pki).
//   - C3: with Options.KeepValid, a certificate is kept only when it is
//     signed by this CA, names exactly the spec's role, name and hosts,
//     matches its key, and has at least a third of Options.Validity left;
//     anything else is issued again. Running the same issue twice is
//     therefore idempotent, and running it again later renews what is
//     about to expire.
//   - C4: paths in a Spec are relative and stay under the output
//     directory ("..", absolute paths and empty names are refused).
//
// # Errors
//
//   - ParseSpec: ErrSpec (a malformed spec; the message shows the form).
//   - EnsureCA, LoadCA: ErrIncompleteCA (one of the two files only),
//     file and PEM errors, ErrKeyMismatch.
//   - Kube: ErrNotFound (GET of a missing Secret), ErrExists (POST of a
//     Secret that exists), other API answers as errors naming the status.
//   - EnsureSecrets: ErrNoCA (the CA Secret is missing and CreateCA is
//     false), ErrAdminNotFromCA (the admin Secret exists but the CA did
//     not sign it).
package certs
