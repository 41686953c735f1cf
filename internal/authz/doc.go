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
//	A1  bookie writes (AddEntries, Fence, WriteLAC, DeleteLedger): broker,
//	    bookie (the re-replication worker runs inside bookies).
//	A2  bookie reads (ReadEntry, ReadEntries, ReadLAC, Info): broker,
//	    bookie, admin (`strata ledger`, `strata bookie`).
//	A3  metad membership and administration (MemberAdd, MemberRemove,
//	    RegisterMember, Snapshot): metad, admin.
//	A4  every other metad call (the key-value store, watches, leases,
//	    Status): metad, bookie, broker, admin.
//	A5  the broker client API: user, admin, broker (brokers read each
//	    other's offsets for lag).
//	A6  gRPC health and reflection: any verified certificate.
//	A7  a method in no entry is refused (fail closed): a new RPC is
//	    unreachable until the table names who may call it.
//
// Calls whose certificate names no role (pki.ErrNoIdentity) are refused.
//
// # Denials
//
// A refused call answers PERMISSION_DENIED (rpcerror reason
// PERMISSION_DENIED, not retryable) naming the method, the roles it
// needs and the caller's identity; it is counted in
// strata_<role>_rpc_denied_total{method,role} and logged once per
// (principal, method), so a misconfigured client cannot flood the log.
package authz
