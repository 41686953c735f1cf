// Package client is Strata's Go client: a producer, a consumer of assigned
// partitions, a consumer-group member (GroupConsumer), and admin calls,
// over the brokers' gRPC service (proto/broker/v1/broker.proto).
//
// # Client
//
// New bootstraps from any of Config.Brokers with a Metadata call. The
// client keeps one gRPC connection per broker address and a cache of
// partition owners, refreshed when older than Config.MetadataMaxAge, when a
// broker answers NOT_OWNER without a redirect, NOT_FOUND or unavailable,
// and at once from the redirect address a NOT_OWNER answer carries.
// Partition requests (Produce, Fetch, ListOffsets) go to the owner; admin
// calls go to any broker, rotating over the known addresses on failure.
// Every call retries retryable failures with jittered exponential backoff
// until its context is done; a single attempt is bounded by
// Config.RequestTimeout. Errors that come from a broker wrap the gRPC
// status (rpcerror.Reason works on them) and, where one applies, a
// sentinel of this package (ErrUnknownTopic, ErrOffsetOutOfRange, ...).
//
// # Producer
//
// Produce appends a record to its partition's open batch (a Kafka record
// batch v2, see recordbatch) and returns; the callback runs once the
// batch is acknowledged or has failed. Partition choice: Record.Partition
// when >= 0; recordbatch.PartitionForKey(key, n) for keyed records (the Java
// client's murmur2 choice); a sticky partition for keyless records, which
// moves on each time its batch is sealed (KIP-480; a record that does not
// fit the sticky batch seals it and goes to the next partition). A batch is
// sealed when it reaches BatchBytes, when it has lingered Linger, when its
// stream goes idle (ProducerConfig.Linger), or on Flush/Close.
// One dispatch loop groups the sealed batches by owner and sends one
// ProduceRequest per broker holding at most one batch per partition, with
// at most MaxInFlight unanswered batches per partition.
//
// Idempotence (default; off with AcksNone): the producer takes a producer
// id with InitProducerID; each partition numbers its records from 0 and a
// batch keeps its id, epoch and sequence (its exact bytes) across retries,
// so a batch whose response was lost is recognised by the broker as a
// duplicate. When a batch fails retryably the partition stops sending,
// waits for every in-flight batch to be answered, then sends the failed
// ones again in order; OUT_OF_ORDER_SEQUENCE or UNKNOWN_PRODUCER_ID for a
// batch that was sent behind an unanswered one is part of that dance.
// UNKNOWN_PRODUCER_ID with nothing before it on its way means the
// partition's state of the producer expired: the batch goes again under a
// fresh producer id. If the sequence breaks
// for good (a batch was rejected, or expired after being sent) the
// partition takes a fresh producer id and renumbers its pending batches;
// first, each pending batch that was sent and may be stored (its answer
// was lost) goes again under its own numbers until it is stored, known
// absent (OUT_OF_ORDER_SEQUENCE) or expired: renumbered, a batch the
// broker holds would be stored a second time.
// PRODUCER_FENCED makes the producer unusable. Without idempotence a write
// whose outcome is unknown fails with ErrUnknownOutcome rather than risk a
// duplicate, except a connection failure (gRPC UNAVAILABLE), which is
// retried: it is mostly a connection that could not be made, but gRPC
// answers the same for one that dropped after the request was sent, and
// that retry may store the batch twice (as Kafka's producer with retries
// and without idempotence may). Batches of one partition may also be
// reordered by retries unless MaxInFlight is 1.
//
// Invariants: callbacks run on one goroutine, exactly once per record, in
// offset order per partition, with Partition and Offset set (-1 with
// AcksNone); records of one key keep their produce order; the records
// whose callback has not run (their bytes, the Records and the producer's
// slots for them) and the encodings of their batches never exceed
// MaxBufferedBytes when Produce accepts a record (it blocks until they fit;
// a record larger than the budget goes alone; each record reserves room
// for its part of its batch's encoding, and the encoding's pooled buffer,
// which may be up to a quarter larger than that room, counts in its place
// once the batch is encoded); a record not acknowledged within
// DeliveryTimeout fails with ErrDeliveryTimeout. A callback must not call
// Flush, Close or ProduceSync on its own producer (they wait for the
// callback goroutine); Produce is fine.
//
// # Consumer
//
// Assign/Seek resolve an Offset (OffsetEarliest, OffsetLatest, OffsetAt,
// OffsetAtTime, OffsetFromEnd) with ListOffsets at the owner. A fetch loop
// per broker sends long-polling FetchRequests (MaxWait; up to 8 at once
// with disjoint partitions) for the assigned partitions routed to that
// broker, decodes the batches, drops records below the requested offset and
// buffers up to PartitionMaxBytes per partition ahead of Poll, and at most
// MaxDecodedBytes decoded for every partition together: a batch is decoded
// only if it fits (what its records take in memory, decompressed,
// structures included), the rest waits for the next Poll, and a batch that
// alone does not fit (a decompression bomb) stops its partition with
// ErrBatchTooLarge naming the partition and the offset. Poll returns
// records in offset order per partition. Owner changes and NOT_OWNER
// redirects keep positions. A position outside the log makes Poll return an
// *OffsetOutOfRangeError once; the partition is not reset silently and
// waits for Seek.
//
// Liveness: a consumer keeps fetching every assigned partition until it is
// closed, whatever the caller's Poll pattern (a Poll without a deadline is
// fine): a failed fetch backs the partition off on a timer that routes it
// again when it ends, and a metadata refresh routes the partitions of its
// topic again when it ends. Only a partition whose buffer is full, or whose
// next batch does not fit in MaxDecodedBytes, waits for Poll
// (back-pressure). Close is safe at any moment, concurrently with Poll
// (which then returns ErrClosed) and with fetches in flight.
//
// # Group consumer
//
// NewGroupConsumer joins a group (KIP-848 style, server-side assignment):
// a background goroutine heartbeats to the coordinator, revokes partitions
// before taking new ones (commit with auto-commit, then OnRevoked), and
// fetches the assigned ones with the same fetcher as Consumer, from the
// committed offset or ResetOffset. Poll returns records of owned
// partitions only; Commit commits what Poll returned. Close commits, leaves
// the group and may be called at any moment.
//
// # Example
//
//	c, err := client.New(ctx, client.Config{Brokers: []string{"localhost:7501"}})
//	if err != nil { ... }
//	defer c.Close()
//	p, _ := c.NewProducer(client.ProducerConfig{})
//	rec, err := p.ProduceSync(ctx, client.NewRecord("events", []byte("user-1"), []byte("hello")))
//	_ = p.Close(ctx)
//
//	cons, _ := c.NewConsumer(client.ConsumerConfig{})
//	defer cons.Close()
//	_ = cons.Assign(ctx, map[client.TopicPartition]client.Offset{{Topic: "events", Partition: rec.Partition}: client.OffsetEarliest()})
//	recs, err := cons.Poll(ctx)
package client
