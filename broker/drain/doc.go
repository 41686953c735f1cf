// Package drain is an operator's drain of a running broker (`strata broker
// drain ID`, `strata broker undrain ID`): the request's record in metad,
// and how far the drain got. The CLI writes and reads these keys directly
// with its metad client (as `strata bookie decommission` and `strata acl`
// do, so with TLS it takes an admin certificate); the controller
// (broker/placement.go, PL5) reads the records through a mirror. The
// package links no broker code, so the CLI stays small.
//
// # Keys
//
//	/strata/broker-drains/<id>   BrokerDrain{broker_id, requested_at_ms}
//	                             (proto/broker/v1/meta.proto), on no lease
//
// The record is not on the broker's lease (its registration is): it
// survives the broker's restarts, so a drained broker that comes back
// still gets nothing, until Withdraw deletes the record.
//
// # What the controller does with it
//
//   - D1 A drained broker is assigned no partition: neither a new one nor
//     one moved by balancing (PL1, PL3 count only ACTIVE brokers that are
//     not drained).
//   - D2 Its served partitions move to another ACTIVE broker (the fewest
//     of the partition's topic, then the fewest in all), each as a clean
//     hand-over (ledger closed, list written, the
//     new owner takes over), while at most maxDrainInFlight (16) partitions
//     of the cluster are not served at their assignment (PL5). One it does not
//     serve (a takeover of its own running, a failed partition) moves at
//     once, as a dead broker's does (PL1).
//   - D3 The broker keeps running and registered, ACTIVE: it still answers
//     clients (with NOT_OWNER redirects for what it gave away), may stay
//     the controller and serves nothing; Withdraw makes it an ordinary
//     ACTIVE broker, which balancing then fills.
//
// Progress counts the assignments and ownership records that still name
// the broker; it is drained when both are zero.
package drain
