// Package compaction is a partition log's compaction pass
// (cleanup.policy compact; partlog P7, tiering/compact C1-C11): it
// rewrites the sealed pieces of the log (segment objects, then the closed
// ledgers no object covers) keeping the latest record of every key, and
// swaps the rewritten pieces in.
//
// # Stages
//
// A pass (Compact) is four stages, each its own function:
//
//  1. plan: a pure decision over a partlog.Snapshot (plan): the
//     candidate pieces, where the dirty section starts, whether to run
//     (compact.Decide) and the cleaner lag. Table-tested.
//  2. read (index): read the cleanable pieces up to the indexed end,
//     index the dirty range into the key map, note every producer's last
//     batch, keep what fits of the batches in the pass buffer. Then cover
//     (pure) decides which whole pieces the pass rewrites.
//  3. rewrite: objects into new objects (verified as uploads are,
//     tierpass.Objects), ledgers into new closed ledgers (index written);
//     batches keep their offsets and every output ends with a batch at its
//     last offset.
//  4. swap: one partlog.Update (P12) whose edit (swapCompacted, pure)
//     replaces the inputs by the outputs only if they are still listed, in
//     order, the ledgers closed and untiered, and the topic still
//     compacts; it stores cleaned_offset and the tombstone horizon and
//     queues the replaced objects for deletion (T6). The inputs, and the
//     local copies of replaced objects, are deleted after it.
//
// # Contract
//
//   - The open ledger is never compacted (C9); outputs keep their inputs'
//     offset ranges, so the list stays contiguous.
//   - A pass that cannot swap (ErrStale: the log moved, the pass outlived
//     Options.MaxDuration or half the orphan object grace, the policy no
//     longer compacts) deletes its outputs and leaves the log as it was;
//     one whose swap may have been stored (outcome unknown) leaves them to
//     the orphan sweeps, which read the list.
//   - Passes on one log must not overlap, and a key map serves one pass
//     at a time: the broker's one compactor runs them one after another.
package compaction
