// Package topic is the topic side of the strata command-line tool: the
// description of a topic (Description: configs, and per partition owner,
// offsets, bytes, ledgers, tier, retention and compaction), its live
// offsets asked of each owner (LiveOffsets), and the text tables and JSON
// of `strata topic list`, `describe` and `alter`. cmd/strata only parses
// flags and calls it.
//
// The describe table's OFFSETS column is END - START, as Kafka's tools
// show offsets: it counts the records only where none was removed from
// between (compaction leaves holes; transaction markers take offsets
// too), and says so for a compacted topic.
package topic
