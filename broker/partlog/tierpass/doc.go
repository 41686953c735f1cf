// Package tierpass is a partition log's object-store tier pass (DESIGN
// §7, tiering/ T1-T10): it copies runs of closed ledgers into verified
// segment objects and commits them in the list, deletes the ledgers an
// object covers once local retention allows, deletes the queued garbage
// objects once their delay passed, and sweeps orphan objects.
//
// # Contract
//
// It drives a partlog.Log only through its seam (partlog P11, P12): it
// decides over a Snapshot (uploadRun, localDeletable, commitTiered are
// pure functions of the list) and changes the list only by
// partlog.Update, whose edit checks again, against the list it replaces,
// that what the pass did still applies. So:
//
//   - An object is committed only if it still follows the tiered end and
//     its ledgers are still listed where they were (compaction may have
//     replaced them meanwhile: the object would bring back what the pass
//     removed). Otherwise nothing is committed and the object is deleted.
//   - An upload whose commit may have been stored (its outcome unknown)
//     keeps its object: only the orphan sweep, which reads the list,
//     deletes it.
//   - Local copies are unlinked by one swap and deleted after it; the log
//     start does not move (the object serves those offsets).
//   - Garbage objects are deleted from the store first, then dropped from
//     the queue by one swap; a failed deletion stays queued.
//   - The orphan sweep deletes only objects older than OrphanGrace that
//     the list in metad names neither as tiered nor as garbage, and only
//     while that list is still the version this log wrote (a stale owner
//     sweeps nothing).
//
// Objects writes and deletes segment objects for the uploader and for
// compaction alike, so a compaction output is verified exactly as an
// upload is (T8).
package tierpass
