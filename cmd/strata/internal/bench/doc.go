// Package bench runs `strata bench`: open-loop produce, consume and
// end-to-end benchmarks against a running cluster (Run, Produce, Consume,
// E2E, Execute), the same loads over the Kafka protocol with franz-go as
// the client (KafkaProduce, KafkaConsume, KafkaE2E, ExecuteKafka: the
// Strata client's batching and buffers in kgo's terms, kafkaProducerOpts),
// the consumer-group loads (GroupConsume: members of a Strata group
// consumer; KafkaGroupConsume: franz-go members of a classic group;
// GroupRebalance: how long a member's partitions go unconsumed when it
// leaves or is cut off, classic and KIP-848),
// their summary (Summarize, PrintSummary), and the suite that starts local
// clusters, every broker with a Kafka listener, and runs the standard
// workloads on them (RunSuite; the report, the machine's limits and the
// metrics it scrapes are cmd/strata/benchsuite's). cmd/strata only parses
// the flags into Options and SuiteOptions and calls it.
//
// Invariants:
//
//	B1 With Options.Rate > 0 the load is open loop: every record has a
//	   scheduled send time, fixed in advance, and latency counts from it,
//	   so a stalled producer cannot hide latency (no coordinated omission).
//	B2 In e2e, each value carries its scheduled send time in its first 8
//	   bytes (big-endian Unix nanoseconds); publish->consume is measured
//	   from it, ack->consume by whichever of ack and consumption of a
//	   record comes second.
//	B3 Every goroutine a benchmark starts (producers, the e2e consumer,
//	   the progress line, group members and their poll loops, the
//	   rebalance feed, and the franz-go clients' own) has ended when
//	   Produce, Consume, E2E, the group loads or their Kafka forms
//	   return.
//	B4 The suite stops every cluster it starts, on success, on error and
//	   on Ctrl-C.
package bench
