// Package retention is a partition log's retention pass (partlog P6,
// DESIGN §7): it removes the leading pieces of the log (segment objects,
// then ledgers no object covers) that the topic's delete policy no longer
// keeps, by time (a piece's newest record older than retention.ms) or by
// size (while the rest still holds retention.bytes).
//
// # Contract
//
// The decision (cut) is a pure function of the list, the open segment's
// size, the time and the policy, taken over a partlog.Snapshot; only a
// prefix of closed pieces ever goes, never the open ledger. One swap
// (partlog.Update, P12) removes them, queues the removed objects for
// deletion (T6) and moves log_start_offset to the first offset kept (it
// never decreases); the ledgers and their indexes are deleted after the
// swap (partlog.Log.DeleteUnlisted), so the list never names deleted data,
// and a crash in between leaves only unlisted ledgers, which the
// controller's orphan sweeper deletes.
package retention
