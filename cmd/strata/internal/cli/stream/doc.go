// Package stream holds the record loops of the strata command-line tool,
// so that cmd/strata only parses flags and calls them:
//
//   - Produce reads stdin one line at a time (cli.LineSplitter splits key
//     and value) and hands each line to a producer, bounded by the
//     producer's buffer; it counts acknowledgements and failures.
//   - Loop prints a consumer's records (RecordWriter: a cli.RecordFormat
//     or one JSON object per line) until a count, the end of every
//     partition, or Ctrl-C; it serves both plain consumers
//     (PartitionSource: partitions assigned by the CLI) and group members
//     (GroupMember: partitions assigned by the coordinator, committing
//     exactly what was printed).
//   - PartitionCount and WaitOwned are the topic lookups these commands
//     (and bench and topic create) share.
//
// Invariants:
//
//	S1 Ctrl-C (ctx ending) is a clean stop: Loop returns nil, Produce
//	   flushes what it handed over for a short grace and reports
//	   "interrupted".
//	S2 A group member commits only offsets after records it printed: the
//	   committed position of a partition is the last printed offset + 1.
//	S3 Output is flushed after every polled batch, so a reader of a pipe
//	   sees records as they come.
package stream
