// Package authz decides, per gRPC call, whether the caller's certificate
// role may make it. It runs as gRPC's tap handle (before any of a call's
// body is read, so a refused caller costs no decoding) and as a unary and
// a stream interceptor on every node whose gRPC server has TLS on
// (internal/grpcserve installs it); without TLS there is no verified
// identity and nothing to check.
//
// # The table (Policy)
//
// A Policy maps a full method name ("/strata.bookie.v1.Bookie/Fence") or a
// whole service ("/strata.bookie.v1.Bookie/") to the roles allowed to call
// it; the method entry wins over the service entry. DefaultPolicy is the
// cluster's table:
//
//	A1  bookie writes: AddEntries and Fence by broker, admin and bookie
//	    (the re-replication worker runs inside bookies: it copies entries
//	    and recovers the open ledgers of lost bookies; ledger/bookie lets
//	    a bookie's certificate do so only as the elected replicator);
//	    WriteLAC and DeleteLedger by broker and admin (the ledger writer's
//	    side; `strata ledger delete`).
//	A2  bookie reads (ReadEntry, ReadEntries, ReadLAC, Info): broker,
//	    bookie, admin (`strata ledger`, `strata bookie`).
//	A3  metad membership and administration (MemberAdd, MemberRemove,
//	    RegisterMember, Snapshot): metad, admin.
//	A4  every other metad call (the key-value store, watches, leases,
//	    Status): metad, bookie, broker, admin; which keys each may touch
//	    is the key table's (below).
//	A5  the broker client API: user, admin, broker (brokers read each
//	    other's offsets for lag).
//	A6  gRPC health and reflection: any verified certificate.
//	A7  a method in no entry is refused (fail closed): a new RPC is
//	    unreachable until the table names who may call it.
//
// Calls whose certificate names no role (pki.ErrNoIdentity) are refused.
//
// # The key table (KeyPolicy)
//
// metad applies a second table, per key, to every key-value call of a TLS
// cluster (metad/access.go), so that each role's certificate touches only
// the keys its nodes use (least privilege: a stolen bookie certificate
// cannot write a credential or delete the cluster's keys):
//
//	K1  operations: read (Get, a Txn's compare, List over a prefix),
//	    write (Put, Delete of one key, a Txn's put or one-key delete;
//	    renewing, revoking or attaching a key to a lease writes every key
//	    already on it), watch (over a prefix), delete-prefix.
//	K2  a grant gives a role operations on every key under a prefix, or
//	    (Own) on the one key prefix + the certificate's name: a node's
//	    certificate is named by its id. An operation over a prefix needs
//	    a grant whose prefix contains it; Own grants never cover a prefix.
//	    A call is allowed only if every key and prefix it names is.
//	K3  anything no grant covers is refused (fail closed): a new key
//	    prefix is unreachable to nodes until the table names it.
//	K4  metad (forwarded calls, checked by the member that took them) and
//	    admin: everything.
//	K5  broker: its registration and node id (own), the brokers, drains,
//	    controller, topics, assignments, owners (watched), partition logs,
//	    ledger indexes, producer-id and node-id counters, tier keys and
//	    the SASL decoy key.
//	K6  credentials and ACLs: read and watched by brokers (they
//	    authenticate and authorize clients), written by admins only.
//	K7  ledger metadata, digest keys included: brokers (ledger writers
//	    and readers; the id counter) and bookies (each checks an add's
//	    digest against its ledger's key; the replicator verifies copies,
//	    recovers open ledgers and rewrites ensembles); brokers read the
//	    bookie registry to place ledgers.
//	K8  bookie: its registration and cookie (own; every bookie's read),
//	    operators' decommissions (read, watched) and the replicator's
//	    records (/strata/replication/).
//	K9  brokers also read the bookies' cookies, decommissions and the
//	    replicator's records: `strata cluster status` runs with a
//	    broker's certificate in its container (docs/deploy.md).
//
// A refused call answers PERMISSION_DENIED naming the caller, the
// operation, the key or prefix and the roles that may; it is counted in
// strata_metad_key_denied_total{op,role} and logged once per (caller,
// operation, key).
//
// # Denials
//
// A refused call answers PERMISSION_DENIED (rpcerror reason
// PERMISSION_DENIED, not retryable) naming the method, the roles it
// needs and the caller's identity; it is counted in
// strata_<role>_rpc_denied_total{method,role} and logged once per
// (principal, method), so a misconfigured client cannot flood the log.
package authz
