// Command broker runs one Strata broker: it serves produce, fetch and admin
// requests for the partitions it owns, and may be elected controller.
//
//	broker --id k1 --listen 127.0.0.1:7501 --admin-listen 127.0.0.1:7601 --kafka-listen 127.0.0.1:9092 \
//	  --metad 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
//
// Every flag is also a YAML key in --config and a STRATA_* variable.
// SIGINT/SIGTERM drain the broker (its partitions move to other brokers)
// before it exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/kafka"
	"github.com/strata-log/strata/cmd/internal/nodeconfig"
	"github.com/strata-log/strata/internal/clockfault"
	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/internal/node"
	"github.com/strata-log/strata/proto/brokerpb"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !errors.Is(err, nodeconfig.ErrHelp) {
		fmt.Fprintln(os.Stderr, "broker:", err)
		os.Exit(1)
	}
}

func flags(d broker.Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("broker", pflag.ContinueOnError)
	fs.String("id", d.ID, "broker id in metad")
	config.EndpointsFlags(fs, d.Endpoints, config.EndpointsHelp{
		Listen:    "gRPC address",
		Advertise: "address clients are told to dial (default: --listen)",
	})
	config.ExposureFlags(fs, d.Exposure)
	config.SecurityFlags(fs, d.Security)
	config.LimitsFlags(fs, d.Limits)
	fs.String("super-users", d.SuperUsers, "principals that pass every ACL check, User:NAME,... (with TLS; admin certificates are super-users too)")
	fs.String("metad", d.Metad, "metad endpoints, host:port,...")
	fs.String("rack", d.Rack, "placement label")
	fs.Duration("session-ttl", d.SessionTTL, "lease of the registration and ownerships: a dead broker's partitions move after it")
	fs.Int64("tail-cache-bytes", d.TailCacheBytes, "memory for recently written entries that tailing consumers read")
	fs.Duration("idle-roll", d.IdleRoll, "roll a partition's ledger after this long without writes")
	fs.String("ledger-digest", d.LedgerDigest, "entry digest of new ledgers: "+broker.DigestAESGMAC+", or "+broker.DigestHMACSHA256+" while older brokers or bookies run (they cannot read "+broker.DigestAESGMAC+")")
	fs.Duration("produce-timeout", d.ProduceTimeout, "default wait for a produce request's acks")
	fs.Duration("max-fetch-wait", d.MaxFetchWait, "cap on a fetch's long-poll")
	fs.Int64("max-inflight-produce-bytes", d.MaxInflightProduceBytes, "bytes of the produce requests worked on at once, counted decompressed (a compressed batch: its size times max.compression.ratio while it is validated); beyond, a request waits up to 1s, then is refused as retryable")
	fs.Int64("max-inflight-fetch-bytes", d.MaxInflightFetchBytes, "memory of fetches: bytes of the responses gathered and not yet written, and of read-ahead from the bookies (a quarter of it); a fetch that finds no room answers with what it has, or waits and answers empty (clients fetch again)")
	fs.Int("max-topics", d.MaxTopics, "topics the cluster may hold (CreateTopic refuses more)")
	fs.Int32("max-partitions-per-topic", d.MaxPartitionsPerTopic, "partitions one topic may have")
	fs.Int("max-cluster-partitions", d.MaxClusterPartitions, "partitions of all topics together (CreateTopic and AddPartitions refuse more)")
	fs.Int32("offsets-partitions", d.OffsetsPartitions, "partitions of __consumer_offsets when it is created")
	fs.Duration("group-session-timeout", d.GroupSessionTimeout, "default consumer group session timeout")
	fs.Duration("group-min-session-timeout", d.GroupMinSessionTimeout, "shortest session timeout a group member may ask for (Kafka's group.min.session.timeout.ms)")
	fs.Duration("group-max-session-timeout", d.GroupMaxSessionTimeout, "longest session timeout a group member may ask for (Kafka's group.max.session.timeout.ms)")
	fs.Duration("group-heartbeat-interval", d.GroupHeartbeatInterval, "how often group members are told to heartbeat; below --group-min-session-timeout")
	fs.Int("group-max-groups", d.GroupMaxGroups, "consumer groups this broker may coordinate; a request creating one more is refused")
	fs.Int("group-max-size", d.GroupMaxSize, "members of one consumer group; a join beyond it is refused (GROUP_MAX_SIZE)")
	fs.Int("group-max-metadata-bytes", d.GroupMaxMetadataBytes, "bytes of a group's metadata record in __consumer_offsets (at most half its max.message.bytes is used); a heartbeat growing it further is refused")
	fs.Duration("offsets-retention", d.OffsetsRetention, "committed offsets of a group without members are deleted once older than this")
	fs.Duration("drain-timeout", d.DrainTimeout, "how long a clean shutdown waits for its partitions to move")
	fs.Int("max-concurrent-takeovers", d.MaxConcurrentTakeovers, "partitions this broker takes over at once (the rest wait their turn)")
	fs.Duration("lag-interval", d.LagInterval, "how often consumer-group lag metrics are recomputed")
	fs.Duration("orphan-ledger-grace", d.OrphanLedgerGrace, "the controller deletes a partition ledger its list does not name once it is this old")
	fs.Duration("orphan-ledger-interval", d.OrphanLedgerInterval, "how often the controller looks for orphan ledgers")
	fs.Duration("retention-check-interval", d.RetentionCheckInterval, "how often the broker applies retention.ms and retention.bytes to every partition it serves")
	fs.Duration("compaction-check-interval", d.CompactionCheckInterval, "how often the compactor offers each owned compacted partition a pass (one partition at a time)")
	fs.Int64("compaction-map-bytes", d.CompactionMapBytes, "memory of the compactor's key map (about 35,000 keys per MiB); bounds the dirty range one pass covers")
	fs.Int64("compaction-buffer-bytes", d.CompactionBufferBytes, "memory a compaction pass keeps its input in between indexing and rewriting it, so that that much is read once, not twice (0: read twice)")
	fs.Int64("compaction-max-bytes-per-second", d.CompactionMaxBytesPerSecond, "what a compaction pass reads per second at most, on average over the pass, so that it leaves CPU and reads to produce and fetch; its rewrite of the batches it holds in memory and must decode goes at 6x this (0: unbounded)")
	fs.String("tier-store", d.TierStore, "object store for sealed ledgers: s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&region=R][&insecure=true] (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) or file:///ABS/DIR; empty: no tiering")
	fs.Int64("tier-segment-bytes", d.TierSegmentBytes, "upload a run of closed ledgers as one object once it holds this much")
	fs.Duration("tier-max-delay", d.TierMaxDelay, "upload what a partition has once its oldest closed ledger is this old")
	fs.Duration("tier-check-interval", d.TierCheckInterval, "how often the broker uploads and deletes local copies for every partition it serves")
	fs.Duration("tier-orphan-grace", d.TierOrphanGrace, "objects no partition names are deleted once this old")
	fs.Duration("tier-delete-delay", d.TierDeleteDelay, "objects retention or compaction unlinked are deleted this long after (reads in flight still find them); 0: at once")
	fs.Int("tier-uploads", d.TierUploads, "concurrent uploads")
	fs.Int64("tier-cache-bytes", d.TierCacheBytes, "memory for object chunks read by fetches")
	fs.String("tier-cache-dir", d.TierCacheDir, "directory of the on-disk cache of object chunks, under the memory one; empty: none")
	fs.Int64("tier-disk-cache-bytes", d.TierDiskCacheBytes, "bound of the on-disk chunk cache (with --tier-cache-dir)")
	fs.Bool("tier-verify-full", d.TierVerifyFull, "read every new object back whole before committing it (default: its tail; batches are checked on their way from the bookies)")
	fs.Duration("tier-request-timeout", d.TierRequestTimeout, "bound on one object-store call (read, list, delete)")
	fs.Duration("tier-upload-timeout", d.TierUploadTimeout, "bound on one upload, with its copy from the bookies")
	fs.Duration("tier-cookie-check-interval", d.TierCookieCheckInterval, "how long a confirmed bucket identity is trusted before a deletion checks it again")
	kafkaFlags(fs, d.KafkaListener)
	config.LoggingFlags(fs, d.Logging)
	return fs
}

func run(args []string) error {
	cfg := broker.DefaultConfig()
	if err := nodeconfig.Parse(flags(cfg), args, &cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := node.Logger(cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	log.Info("starting broker", "config", cfg.String())
	node.SetMemoryLimit(log)
	reg := node.NewRegistry()
	// A test seam: only when STRATA_CLOCK_FAULTS names a control file does
	// the broker's clock jump (internal/clockfault).
	var clock broker.Clock
	if c, stopClock := clockfault.FromEnv(log); c != nil {
		defer stopClock()
		clock = c
	}
	b, err := broker.Open(cfg, log, reg, clock)
	if err != nil {
		return err
	}
	defer b.Close()
	b.Start()
	ks, err := kafka.Listen(b, cfg, reg, log)
	if err != nil {
		return fmt.Errorf("kafka listener: %w", err)
	}
	if ks != nil {
		defer ks.Close()
	}
	return node.Serve(context.Background(), log, node.Serving{
		// The broker serves its own TLS (a client certificate is optional:
		// passwords log in without one) and authenticates every call
		// (b.ServerOptions, broker/security.go), so node.Serve gets no
		// credentials of its own.
		Role: "broker", ServerOptions: b.ServerOptions(),
		Exposure: cfg.Exposure, Security: cfg.Security, Limits: cfg.Limits,
		Listen: cfg.Listen, AdminListen: cfg.AdminListen, Registry: reg, Ready: b.Ready,
		Register:     func(s *grpc.Server) { brokerpb.RegisterBrokerServer(s, b.GRPC()) },
		Drain:        b.Drain,
		DrainTimeout: cfg.DrainTimeout,
	})
}

// kafkaFlags are the Kafka listener's (broker.KafkaListener).
func kafkaFlags(fs *pflag.FlagSet, d broker.KafkaListener) {
	fs.String("kafka-listen", d.KafkaListen, "address of the Kafka protocol listener, host:port (empty: off); with --tls-* it speaks TLS and requires SASL or a client certificate")
	fs.String("kafka-advertised", d.KafkaAdvertised, "address Kafka clients are told to dial (default: --kafka-listen)")
	fs.Bool("kafka-auto-create-topics", d.KafkaAutoCreateTopics, "create a missing topic when a Kafka Metadata request asks for it (Kafka's auto.create.topics.enable)")
	fs.Int32("kafka-default-partitions", d.KafkaDefaultPartitions, "partitions of a topic created over Kafka without a count (auto-created, or -1)")
	fs.Int32("kafka-max-request-bytes", d.KafkaMaxRequestBytes, "largest Kafka request accepted; a bigger one closes the connection before it is read")
	fs.Duration("kafka-idle-timeout", d.KafkaIdleTimeout, "close a Kafka connection that sent nothing for this long (and waits for no answer)")
	fs.Int("kafka-max-connections", d.KafkaMaxConnections, "Kafka connections open at once, from every client together; more are closed at accept (counted)")
	fs.Int("kafka-max-connections-per-ip", d.KafkaMaxConnectionsPerIP, "Kafka connections one client IP may hold open")
	fs.Int("kafka-in-flight-per-connection", d.KafkaInFlightPerConnection, "Kafka requests of one connection read and not yet answered")
}
