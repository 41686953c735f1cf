// Package cluster is the whole-cluster side of the strata command-line
// tool: the health report of `strata cluster status` (metad's members
// and leader, the brokers and the partitions they own, the bookies, and
// under-replicated ledgers: Collect, Print) and the bookie tables of
// `strata cluster bookies`. cmd/strata only parses flags, connects and
// calls it.
//
// Health (Report.Healthy): a problem makes the cluster unhealthy, a
// warning does not. Problems: metad has no leader or a member is
// unreachable; no broker answers, none is registered, there is no
// controller, a partition has no owner, or a broker fails its /readyz; a
// bookie is down or read-only while fewer than MinWritableBookies are
// writable. Warnings: bookies down with enough still writable, and
// under-replicated ledgers (the replicator repairs them).
package cluster
