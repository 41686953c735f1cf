// Package ledgertest holds in-memory twins of the ledger package's
// dependencies, for deterministic tests of the ledger protocol and of
// anything built on it (readers, brokers):
//
//   - FakeBookies implements ledger.BookieClient over in-memory bookies that
//     keep every entry they acknowledged (durable), honour fencing and
//     recovery adds, apply the real bookie's rules against buggy or
//     hostile writers (an entry keeps its bytes: ADD_ENTRY_CONFLICT; a LAC
//     never passes the entries held; ledger/storage/doc.go), and can crash, restart, be wiped (a "forgetful" bookie
//     that lost its disk) or lose fence requests. In manual mode adds wait
//     in flight until the test delivers, fails or drops them one by one,
//     which is how a test scripts an interleaving. Synchronous calls
//     (Fence, ReadEntry, ReadLAC, ...) answer at once from the bookie's
//     state, unless a bookie is down (error) or a call kind is blackholed
//     (it blocks until its context ends, with no effect: a lost request).
//   - FakeMetadata implements ledger.MetadataStore with versions and
//     compare-and-set; it can be made unavailable, or apply an update and
//     lose the answer (unknown outcome).
//   - FakeRegistry implements ledger.BookieRegistry.
//   - ManualScheduler implements ledger.Scheduler: nothing runs until the
//     test advances its clock.
//
// None of them sleeps or opens sockets. Cluster bundles them.
package ledgertest
