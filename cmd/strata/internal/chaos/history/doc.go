// Package history checks the history of a workload that ran while faults
// were injected, and says what went wrong. It knows nothing of Strata's
// servers: a runner records what its producers were told, what its readers
// and group members saw and which faults it injected, then asks for a
// Report.
//
//	rec := history.NewRecorder()
//	// ... producers, readers, group members and the nemesis record,
//	// concurrently, as they go:
//	rec.RecordAttempt(history.Attempt{...})
//	rec.RecordRead(history.Read{...})
//	// ... after healing, the final read of every partition, Final: true.
//	rep := rec.Check()
//	rep.Seed, rep.DurationSeconds = seed, elapsed.Seconds()
//	rep.WriteTable(os.Stdout)
//
// # What the runner must provide
//
//	H1 Every value produced is unique across the history (for example
//	   "key/seq"): a record read back is identified by its value alone.
//	   Two attempts with one value are reported as invalid_history.
//	H2 Seq numbers a producer's attempts of one key 1, 2, 3..., increasing
//	   with every attempt whatever the outcome of the previous one, and one
//	   producer owns a key.
//	H3 Topics are fresh: every record in them was made by a recorded
//	   attempt. Anything else read from them is reported as corrupt.
//	H4 The final read (Read.Final) reads every partition of every topic
//	   from the log start to its end after the faults have healed. Lost is
//	   judged against it alone; a partition with no final read has lost
//	   every acknowledged record.
//	H5 Topics whose records a later record of the same key may replace
//	   (cleanup.policy=compact) are marked with MarkCompacted. Topics that
//	   delete records by time or size are not supported.
//
// Values are not tombstones: an empty value is an ordinary value. A fetch
// of several partitions is recorded as one Poll per partition.
//
// # Checks
//
// Each check counts violations once per record (or per offset, group
// partition or commit, as said) and keeps the first ten as readable
// examples. A record read "in its place" means read from the partition its
// attempt was made to, with the attempt's key.
//
//	C1 lost: an acknowledged record absent from the final read of its
//	   partition. In a compacted topic only the latest acknowledged value of
//	   each key must be there, or a later Unknown-outcome value of the key
//	   (which may have been stored and replaced it); older values may be
//	   absent.
//	C2 wrong_offset: an acknowledged record read in its place, by any
//	   reader, at an offset other than the acknowledged one.
//	C3 duplicated: a record read in its place at two or more offsets, by
//	   any readers together.
//	C4 conflicts: two different values read at one offset of one partition
//	   (the readers saw diverging logs); counted per offset.
//	C5 corrupt: a value read that no attempt made, or an attempt's value
//	   read from another partition or with another key; counted per
//	   partition, offset and value.
//	C6 phantom: a Failed attempt's value read anywhere. Unknown-outcome
//	   values may be read or not.
//	C7 reordered: in the final read, a record of a key at an offset after
//	   a record of the same key with a higher seq. Only the first offset of
//	   a duplicated record counts (the others are C3's).
//	C8 group_overlaps: one partition delivered to two members of one group
//	   within one generation; counted per group, generation and partition.
//	C9 commit_regressions: a committed offset of a group's partition lower
//	   than one seen entirely before it (the earlier commit or observation
//	   ended before the later one started); counted per later commit.
//	C10 vanished: in a topic that is not compacted, an offset at which a
//	   reader saw a record that the final read does not hold although it
//	   reads past it: the log lost a record it had served, acknowledged
//	   or not; counted per partition and offset.
//
// A Report is OK when every count above and invalid_history are zero.
// Check is meant for the end of a run: a history checked mid-run lacks its
// final read.
//
// # Availability
//
// Availability never fails a run; it measures it. For each partition a
// stretch of unavailability begins when an attempt starts and no attempt
// has been acknowledged since it started (at the acknowledgement itself
// when other attempts are still in flight then), and ends at the end of
// the next acknowledged attempt. Failures and retries in between do not end
// it; time when no producer was trying is not counted. A stretch still
// open when the history ends runs to the end of its last attempt and is
// reported as not recovered. The same is done for reads from Polls: a poll
// is a fetch of one partition, successful when it answered without error,
// with or without records.
//
// For each fault, the worst stretch of any partition that overlaps the
// fault's window (its start to its end, or to the end of the history for a
// fault never healed) is reported, for produce and for reads.
// max_unavailable_ms is the produce measure; max_read_unavailable_ms the
// read one.
//
// # Memory
//
// A Recorder keeps what the checks need and no more: strings (topics,
// keys, values, names) once each, and fixed-size entries of about 48 bytes
// per attempt, 40 per read and 24 per poll. Group deliveries are kept as
// one summary per group, generation, partition and member.
package history
