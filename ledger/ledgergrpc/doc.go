// Package ledgergrpc is the gRPC transport of the ledger protocol: Client,
// the ledger.BookieClient that writers, readers, recovery and
// re-replication use against real bookies (the bookiepb.Bookie service).
//
// Contract:
//
//   - One connection per bookie address, made on first use, and on it one
//     long-lived AddEntries stream that carries every add to that bookie in
//     call order.
//   - Every add's callback runs exactly once: with the bookie's answer, or
//     with ErrAddTimeout, ErrAddQueueFull, ErrAddStreamBroken or ErrClosed,
//     each of which leaves the add's outcome unknown. Callbacks of one
//     bookie run on one goroutine, in the order the adds ended.
//   - The adds outstanding to one bookie are bounded (Options.MaxQueuedAdds,
//     Options.MaxQueuedBytes); beyond the bound an add fails at once.
//   - Errors keep the bookie's gRPC status (status.Code, rpcerror.Reason);
//     a read refused because the bookie's copy is corrupt (codes.DataLoss)
//     also matches ledger.ErrEntryCorrupt.
//   - Close ends every outstanding add, runs every callback and waits for
//     every goroutine of the client.
//
// Locks: Client.mu (the bookie map) and each bookie's mu (its stream and
// queued adds) are never held together, and no callback runs under
// either, so a callback may call Add.
//
// The protocol itself (quorums, fencing, recovery) is package ledger's and
// knows nothing of gRPC; tests of it use ledger/ledgertest instead.
package ledgergrpc
