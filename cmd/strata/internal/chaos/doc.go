// Package chaos is Strata's nemesis: it runs a real cluster of separate
// processes, every node in a network namespace of its own and every bookie
// on a file system of its own, puts a workload on it (idempotent writers
// over gRPC and the Kafka protocol, tail readers, a consumer group with
// commits, a compacted topic and one read through the object store), and
// injects overlapping faults on a seeded schedule: kill -9 and restart,
// pauses shorter and longer than a lease, network partitions of every
// shape (netfault), packet loss, full disks, fsync stalls and I/O errors,
// an unavailable object store. When the faults end it heals the cluster,
// reads every partition back and hands the whole history to the checker
// (history), whose report says what was lost, duplicated or reordered and
// how long partitions were unavailable.
//
// A run needs root: namespaces, iptables rules and loop-mounted disks. It
// removes all it created, also after a crash of an earlier run of the
// same name (netfault.Cleanup).
package chaos
