package broker

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Config is one broker's configuration. Brokers keep no local state: every
// partition lives in ledgers on bookies, described in metad.
type Config struct {
	// ID names the broker in metad (/strata/brokers/<id>).
	ID string `mapstructure:"id"`
	// Endpoints: the gRPC address; Advertise (default Listen) is what
	// clients are told to dial; the admin HTTP address.
	config.Endpoints `mapstructure:",squash"`
	// Exposure: pprof on the admin address, gRPC reflection.
	config.Exposure `mapstructure:",squash"`
	// Security: TLS certificate files (serving and dialling peers, mTLS)
	// and --insecure.
	config.Security `mapstructure:",squash"`
	// Limits: the gRPC and admin listeners' caps and timeouts.
	config.Limits `mapstructure:",squash"`
	// SuperUsers lists principals (User:NAME,...) that pass every ACL
	// check but AC1 (internal/acl); admin certificates are super-users
	// too. Used with TLS only: without it nothing is checked.
	SuperUsers string `mapstructure:"super-users"`
	// Metad lists metad client endpoints, host:port,...
	Metad string `mapstructure:"metad"`
	Rack  string `mapstructure:"rack"`
	// SessionTTL is the lease of the broker's registration, ownerships and
	// controller role: a dead broker's partitions move after about this long.
	SessionTTL time.Duration `mapstructure:"session-ttl"`
	// TailCacheBytes bounds the broker-wide cache of recently written
	// entries that tailing consumers read from.
	TailCacheBytes int64 `mapstructure:"tail-cache-bytes"`
	// IdleRoll rolls a partition's open ledger after this long without a
	// write, so retention and tiering can act on quiet partitions.
	IdleRoll time.Duration `mapstructure:"idle-roll"`
	// LedgerDigest is how the ledgers this broker creates tag entries:
	// DigestAESGMAC (default) or DigestHMACSHA256, which brokers and
	// bookies before the GMAC digest can read (use it while upgrading
	// from such a version; docs/operations.md).
	LedgerDigest string `mapstructure:"ledger-digest"`
	// ProduceTimeout bounds a produce request's wait for its acks when the
	// client sets none.
	ProduceTimeout time.Duration `mapstructure:"produce-timeout"`
	// MaxFetchWait caps a fetch's long-poll.
	MaxFetchWait time.Duration `mapstructure:"max-fetch-wait"`
	// MaxInflightProduceBytes bounds the bytes of the Produce requests the
	// broker works on at once, counted decompressed: a compressed batch
	// holds what its records may decompress to (its size times its topic's
	// max.compression.ratio, at most 64 MiB) while it is validated, then
	// its size until its acks. A request that does not fit within
	// produceBudgetWait is refused as UNAVAILABLE (retryable).
	MaxInflightProduceBytes int64 `mapstructure:"max-inflight-produce-bytes"`
	// MaxInflightFetchBytes bounds fetch memory: the bytes of the fetch
	// responses gathered and not yet written to their connections, and
	// the read-ahead of reads from the bookies (a quarter of it). A fetch
	// that finds no room answers with what it has, or waits and answers
	// empty (fetchbudget.go).
	MaxInflightFetchBytes int64 `mapstructure:"max-inflight-fetch-bytes"`
	// MaxTopics, MaxPartitionsPerTopic and MaxClusterPartitions bound what
	// CreateTopic and AddPartitions may create (internal topics count).
	MaxTopics             int   `mapstructure:"max-topics"`
	MaxPartitionsPerTopic int32 `mapstructure:"max-partitions-per-topic"`
	MaxClusterPartitions  int   `mapstructure:"max-cluster-partitions"`
	// OffsetsPartitions is the partition count of __consumer_offsets when
	// the controller creates it.
	OffsetsPartitions int32 `mapstructure:"offsets-partitions"`
	// GroupSessionTimeout is the default consumer-group session timeout;
	// a member may ask for one in [GroupMinSessionTimeout,
	// GroupMaxSessionTimeout] (Kafka's group.min.session.timeout.ms and
	// group.max.session.timeout.ms). GroupHeartbeatInterval is told to
	// members (KIP-848's group.consumer.heartbeat.interval.ms); it must be
	// below the minimum session so every member can heartbeat in time.
	GroupSessionTimeout    time.Duration `mapstructure:"group-session-timeout"`
	GroupMinSessionTimeout time.Duration `mapstructure:"group-min-session-timeout"`
	GroupMaxSessionTimeout time.Duration `mapstructure:"group-max-session-timeout"`
	GroupHeartbeatInterval time.Duration `mapstructure:"group-heartbeat-interval"`
	// GroupTickInterval is how often each coordinator expires sessions and
	// rebalance timeouts (0: group.Config's default, 1s). Not a flag: it
	// only bounds how late an expiry is seen; tests shorten it with the
	// session bounds above.
	GroupTickInterval time.Duration `mapstructure:"-"`
	// GroupMaxGroups, GroupMaxSize and GroupMaxMetadataBytes bound the
	// groups this broker coordinates, the members of a group and the bytes
	// of a group's record (group.Limits, 0: default).
	GroupMaxGroups        int `mapstructure:"group-max-groups"`
	GroupMaxSize          int `mapstructure:"group-max-size"`
	GroupMaxMetadataBytes int `mapstructure:"group-max-metadata-bytes"`
	// OffsetsRetention: committed offsets of a group without members are
	// deleted once older than this.
	OffsetsRetention time.Duration `mapstructure:"offsets-retention"`
	// DrainTimeout bounds a clean shutdown's hand-over of partitions.
	DrainTimeout time.Duration `mapstructure:"drain-timeout"`
	// MaxConcurrentTakeovers bounds the partitions this broker takes over
	// at once (partlog.Open and the ownership write). A broker handed the
	// 25,000 partitions of a dead one started them all at once and its
	// metad keep-alives starved behind them: its session expired and it
	// dropped every partition. (With the bound it still lost its session
	// once in that test, on 2 cores: see docs/capacity.md.)
	MaxConcurrentTakeovers int `mapstructure:"max-concurrent-takeovers"`
	// LagInterval is how often consumer-group lag metrics are recomputed.
	LagInterval time.Duration `mapstructure:"lag-interval"`
	// OrphanLedgerGrace: the controller deletes a partition's ledger that
	// its list does not name once it is this old; OrphanLedgerInterval is
	// how often it looks.
	OrphanLedgerGrace    time.Duration `mapstructure:"orphan-ledger-grace"`
	OrphanLedgerInterval time.Duration `mapstructure:"orphan-ledger-interval"`
	// RetentionCheckInterval: how often the broker applies retention.ms and
	// retention.bytes to every partition it serves (retentionLoop).
	RetentionCheckInterval time.Duration `mapstructure:"retention-check-interval"`
	// CompactionCheckInterval: how often the broker's compactor offers
	// each served compacted partition a pass (one at a time);
	// CompactionMapBytes: the memory of its key map (tiering/compact:
	// 34,952 keys per MiB), which bounds the dirty range of one pass;
	// CompactionBufferBytes: how much of a pass's input it keeps in memory
	// between reading it to index and rewriting it (0: read twice).
	CompactionCheckInterval time.Duration `mapstructure:"compaction-check-interval"`
	CompactionMapBytes      int64         `mapstructure:"compaction-map-bytes"`
	CompactionBufferBytes   int64         `mapstructure:"compaction-buffer-bytes"`
	// CompactionMaxBytesPerSecond bounds what a compaction pass reads per
	// second, on average over the pass (Kafka's
	// log.cleaner.io.max.bytes.per.second); 0: unbounded.
	CompactionMaxBytesPerSecond int64 `mapstructure:"compaction-max-bytes-per-second"`
	// TierStore is the object store sealed ledgers move to
	// (s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&region=R][&insecure=true]
	// or file:///ABS/DIR); empty: no tiering.
	TierStore string `mapstructure:"tier-store"`
	// TierSegmentBytes: a run of closed ledgers is uploaded as one object
	// once it holds this much; TierMaxDelay: or once its oldest ledger is
	// this old.
	TierSegmentBytes int64         `mapstructure:"tier-segment-bytes"`
	TierMaxDelay     time.Duration `mapstructure:"tier-max-delay"`
	// TierCheckInterval: how often the broker uploads, deletes local copies
	// and (every 10th round) sweeps orphan objects for every partition it
	// serves (tierLoop).
	TierCheckInterval time.Duration `mapstructure:"tier-check-interval"`
	// TierOrphanGrace: an object no partition names is deleted once this old.
	TierOrphanGrace time.Duration `mapstructure:"tier-orphan-grace"`
	// TierDeleteDelay: an object retention or compaction unlinked is
	// deleted this long after (reads that chose it still find it).
	TierDeleteDelay time.Duration `mapstructure:"tier-delete-delay"`
	// TierUploads bounds concurrent uploads; TierCacheBytes the memory of
	// the object read cache.
	TierUploads    int   `mapstructure:"tier-uploads"`
	TierCacheBytes int64 `mapstructure:"tier-cache-bytes"`
	// TierCacheDir holds the on-disk chunk cache under the memory one
	// (empty: none), bounded by TierDiskCacheBytes.
	TierCacheDir       string `mapstructure:"tier-cache-dir"`
	TierDiskCacheBytes int64  `mapstructure:"tier-disk-cache-bytes"`
	// TierRequestTimeout bounds one store call (a read, a list, a
	// delete); TierUploadTimeout one upload with its copy from the
	// bookies.
	TierRequestTimeout time.Duration `mapstructure:"tier-request-timeout"`
	// TierVerifyFull reads every new object back whole before committing
	// it (default: its tail only).
	TierVerifyFull    bool          `mapstructure:"tier-verify-full"`
	TierUploadTimeout time.Duration `mapstructure:"tier-upload-timeout"`
	// TierCookieCheckInterval: how long a confirmed bucket identity (the
	// bucket cookie) is trusted before a deletion checks it again.
	TierCookieCheckInterval time.Duration `mapstructure:"tier-cookie-check-interval"`

	// KafkaListener: the Kafka protocol front end (package broker/kafka).
	KafkaListener `mapstructure:",squash"`

	config.Logging `mapstructure:",squash"`
}

// KafkaListener configures the broker's Kafka protocol listener; it is off
// while Listen is empty. TLS and client authentication follow the
// broker's own (--tls-*): with TLS on, the listener speaks TLS and serves
// only clients that authenticate (SASL or a client certificate).
type KafkaListener struct {
	// KafkaListen is the listener's host:port; KafkaAdvertised is what
	// Metadata tells clients to dial (default: KafkaListen).
	KafkaListen     string `mapstructure:"kafka-listen"`
	KafkaAdvertised string `mapstructure:"kafka-advertised"`
	// KafkaAutoCreateTopics lets a Metadata request that asks for it
	// create a missing topic with the default settings (Kafka's
	// auto.create.topics.enable; off by default).
	KafkaAutoCreateTopics bool `mapstructure:"kafka-auto-create-topics"`
	// KafkaDefaultPartitions: partitions of a topic created without a
	// count (auto-created, or CreateTopics with -1).
	KafkaDefaultPartitions int32 `mapstructure:"kafka-default-partitions"`
	// KafkaMaxRequestBytes caps a request (checked before it is read);
	// KafkaIdleTimeout closes idle connections; KafkaMaxConnections,
	// KafkaMaxConnectionsPerIP and KafkaInFlightPerConnection bound the
	// listener's connections, a client's, and a connection's unanswered
	// requests.
	KafkaMaxRequestBytes       int32         `mapstructure:"kafka-max-request-bytes"`
	KafkaIdleTimeout           time.Duration `mapstructure:"kafka-idle-timeout"`
	KafkaMaxConnections        int           `mapstructure:"kafka-max-connections"`
	KafkaMaxConnectionsPerIP   int           `mapstructure:"kafka-max-connections-per-ip"`
	KafkaInFlightPerConnection int           `mapstructure:"kafka-in-flight-per-connection"`
}

// KafkaAdvertisedAddress is the Kafka address published in metad:
// KafkaAdvertised, or KafkaListen; "" without a listener.
func (k KafkaListener) KafkaAdvertisedAddress() string {
	if k.KafkaListen == "" {
		return ""
	}
	if k.KafkaAdvertised != "" {
		return k.KafkaAdvertised
	}
	return k.KafkaListen
}

// validate checks the listener's settings.
func (k KafkaListener) validate() []error {
	var errs []error
	if k.KafkaListen == "" {
		if k.KafkaAdvertised != "" {
			errs = append(errs, errors.New("--kafka-advertised needs --kafka-listen"))
		}
		return errs
	}
	if _, _, err := net.SplitHostPort(k.KafkaListen); err != nil {
		errs = append(errs, fmt.Errorf("--kafka-listen %q: %w", k.KafkaListen, err))
	}
	host, port, err := net.SplitHostPort(k.KafkaAdvertisedAddress())
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("--kafka-advertised %q: %w", k.KafkaAdvertisedAddress(), err))
	case port == "0":
		errs = append(errs, fmt.Errorf("--kafka-advertised %q: clients cannot dial port 0; set --kafka-advertised", k.KafkaAdvertisedAddress()))
	case net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified():
		errs = append(errs, fmt.Errorf("--kafka-advertised: %q is not reachable by clients; set --kafka-advertised", k.KafkaAdvertisedAddress()))
	}
	if k.KafkaDefaultPartitions < 1 || k.KafkaDefaultPartitions > MaxPartitions {
		errs = append(errs, fmt.Errorf("--kafka-default-partitions must be in [1, %d]", MaxPartitions))
	}
	if k.KafkaMaxRequestBytes < 1<<20 || k.KafkaIdleTimeout < time.Second || k.KafkaMaxConnections < 1 || k.KafkaMaxConnectionsPerIP < 1 || k.KafkaInFlightPerConnection < 1 {
		errs = append(errs, errors.New("--kafka-max-request-bytes must be at least 1 MiB, --kafka-idle-timeout at least 1s, --kafka-max-connections, --kafka-max-connections-per-ip and --kafka-in-flight-per-connection positive"))
	}
	return errs
}

// Per-request limits: a small request must not make the
// broker allocate, spawn or compute in proportion to a number the client
// chose. Requests beyond them are refused as INVALID, before any work.
const (
	// MaxMetadataTopics caps the distinct topics one Metadata request may
	// name (repeats are answered once).
	MaxMetadataTopics = 1000
	// MaxProducePartitions and MaxFetchPartitions cap the partition
	// entries of one Produce or Fetch request.
	MaxProducePartitions = 1000
	MaxFetchPartitions   = 1000
	// MaxProduceTimeout caps a Produce request's timeout_ms: each waiting
	// request holds its batches (up to max.message.bytes each).
	MaxProduceTimeout = 5 * time.Minute
	// produceWorkers bounds the goroutines one Produce request appends
	// with; its entries queue for them.
	produceWorkers = 16
	// produceBudgetWait: how long a Produce request waits for room in
	// MaxInflightProduceBytes before it is refused (its bytes are held
	// meanwhile, so the wait is short: the client backs off instead).
	produceBudgetWait = time.Second
	// minInflightFetchBytes is the least --max-inflight-fetch-bytes: room
	// for two whole responses (maxResponseBytes) besides the read-ahead.
	minInflightFetchBytes = 40 << 20
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Exposure:                config.DefaultExposure(),
		Limits:                  config.DefaultLimits(),
		Endpoints:               config.Endpoints{Listen: "127.0.0.1:7501", AdminListen: "127.0.0.1:7601"},
		Metad:                   "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
		SessionTTL:              5 * time.Second,
		TailCacheBytes:          256 << 20,
		IdleRoll:                10 * time.Minute,
		LedgerDigest:            DigestAESGMAC,
		ProduceTimeout:          30 * time.Second,
		MaxFetchWait:            30 * time.Second,
		MaxInflightProduceBytes: 256 << 20,
		MaxInflightFetchBytes:   256 << 20,
		MaxTopics:               10_000,
		MaxPartitionsPerTopic:   MaxPartitions,
		MaxClusterPartitions:    100_000,
		OffsetsPartitions:       16,
		GroupSessionTimeout:     45 * time.Second,
		GroupMinSessionTimeout:  6 * time.Second,
		GroupMaxSessionTimeout:  300 * time.Second,
		GroupHeartbeatInterval:  3 * time.Second,
		GroupMaxGroups:          10_000,
		GroupMaxSize:            1000,
		GroupMaxMetadataBytes:   512 << 10,
		OffsetsRetention:        7 * 24 * time.Hour,
		DrainTimeout:            30 * time.Second,
		MaxConcurrentTakeovers:  64,
		LagInterval:             15 * time.Second,
		OrphanLedgerGrace:       time.Hour,
		OrphanLedgerInterval:    5 * time.Minute,
		RetentionCheckInterval:  30 * time.Second,
		CompactionCheckInterval: 15 * time.Second,
		CompactionMapBytes:      64 << 20,
		CompactionBufferBytes:   128 << 20,
		// Above the 50 MB/s of input compaction must keep up with; unbounded, passes read
		// 130-150 MB/s and took more of the produce path's CPU and
		// bookie reads (docs/compaction.md, "Numbers").
		CompactionMaxBytesPerSecond: 64 << 20,
		TierSegmentBytes:            256 << 20,
		TierMaxDelay:                10 * time.Minute,
		TierCheckInterval:           30 * time.Second,
		TierOrphanGrace:             time.Hour,
		TierDeleteDelay:             time.Minute,
		TierUploads:                 4,
		TierCacheBytes:              256 << 20,
		TierDiskCacheBytes:          10 << 30,
		TierCookieCheckInterval:     30 * time.Second,
		TierRequestTimeout:          30 * time.Second,
		TierUploadTimeout:           10 * time.Minute,
		KafkaListener: KafkaListener{KafkaDefaultPartitions: 1, KafkaMaxRequestBytes: 100 << 20, KafkaIdleTimeout: 10 * time.Minute,
			KafkaMaxConnections: 10_000, KafkaMaxConnectionsPerIP: 1000, KafkaInFlightPerConnection: 16},
		Logging: config.DefaultLogging(),
	}
}

var brokerIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if !brokerIDPattern.MatchString(c.ID) {
		errs = append(errs, fmt.Errorf("--id %q: want 1-64 characters of [a-zA-Z0-9_.-]", c.ID))
	}
	if err := c.Endpoints.Validate("clients"); err != nil {
		errs = append(errs, err)
	}
	if c.Metad == "" {
		errs = append(errs, errors.New("--metad is required"))
	}
	if c.SessionTTL < time.Second {
		errs = append(errs, errors.New("--session-ttl must be at least 1s"))
	}
	if c.TailCacheBytes < 0 {
		errs = append(errs, errors.New("--tail-cache-bytes must not be negative"))
	}
	if c.IdleRoll < time.Second {
		errs = append(errs, errors.New("--idle-roll must be at least 1s"))
	}
	if _, ok := ledgerDigests[c.LedgerDigest]; !ok {
		errs = append(errs, fmt.Errorf("--ledger-digest %q: want %s or %s", c.LedgerDigest, DigestAESGMAC, DigestHMACSHA256))
	}
	if c.MaxConcurrentTakeovers < 1 {
		errs = append(errs, errors.New("--max-concurrent-takeovers must be at least 1"))
	}
	if c.ProduceTimeout <= 0 || c.MaxFetchWait <= 0 || c.DrainTimeout <= 0 || c.LagInterval <= 0 {
		errs = append(errs, errors.New("--produce-timeout, --max-fetch-wait, --drain-timeout and --lag-interval must be positive"))
	}
	if c.MaxInflightProduceBytes < 1<<20 {
		errs = append(errs, errors.New("--max-inflight-produce-bytes must be at least 1 MiB"))
	}
	if c.MaxInflightFetchBytes < minInflightFetchBytes {
		errs = append(errs, fmt.Errorf("--max-inflight-fetch-bytes must be at least %d MiB (two whole fetch responses and their read-ahead)", minInflightFetchBytes>>20))
	}
	if c.MaxTopics < 1 || c.MaxClusterPartitions < 1 {
		errs = append(errs, errors.New("--max-topics and --max-cluster-partitions must be positive"))
	}
	if c.MaxPartitionsPerTopic < 1 || c.MaxPartitionsPerTopic > MaxPartitions {
		errs = append(errs, fmt.Errorf("--max-partitions-per-topic must be in [1, %d]", MaxPartitions))
	}
	if c.OrphanLedgerGrace < time.Second || c.OrphanLedgerInterval < 100*time.Millisecond {
		errs = append(errs, errors.New("--orphan-ledger-grace must be at least 1s and --orphan-ledger-interval at least 100ms"))
	}
	if c.RetentionCheckInterval < 100*time.Millisecond {
		errs = append(errs, errors.New("--retention-check-interval must be at least 100ms"))
	}
	for _, p := range c.SuperUserList() {
		if _, err := acl.ParsePrincipal(p); err != nil {
			errs = append(errs, fmt.Errorf("--super-users: %w", err))
		}
	}
	// The Kafka listener is TLS when the gRPC one is (KafkaListener), and
	// plaintext on a network address only with --insecure, as gRPC.
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Security.Check(c.Listen, c.AdminListen, config.Listener{Flag: "kafka-listen", Addr: c.KafkaListen, TLSCapable: true}); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateGroups()...)
	errs = append(errs, c.validatePasses()...)
	errs = append(errs, c.KafkaListener.validate()...)
	return errors.Join(errs...)
}

// validateGroups checks the consumer group settings.
func (c Config) validateGroups() []error {
	var errs []error
	if c.GroupMaxGroups < 1 || c.GroupMaxSize < 1 || c.GroupMaxMetadataBytes < 1 {
		errs = append(errs, errors.New("--group-max-groups, --group-max-size and --group-max-metadata-bytes must be positive"))
	}
	if c.OffsetsPartitions < 1 || c.OffsetsPartitions > 1000 {
		errs = append(errs, errors.New("--offsets-partitions must be in [1, 1000]"))
	}
	if c.OffsetsRetention < time.Minute {
		errs = append(errs, errors.New("--offsets-retention must be at least 1m"))
	}
	if c.GroupSessionTimeout < time.Second {
		errs = append(errs, errors.New("--group-session-timeout must be at least 1s"))
	}
	if c.GroupMinSessionTimeout <= 0 || c.GroupMinSessionTimeout > c.GroupSessionTimeout || c.GroupMaxSessionTimeout < c.GroupSessionTimeout {
		errs = append(errs, fmt.Errorf("--group-session-timeout %s must be in [--group-min-session-timeout %s, --group-max-session-timeout %s], the minimum positive",
			c.GroupSessionTimeout, c.GroupMinSessionTimeout, c.GroupMaxSessionTimeout))
	}
	if c.GroupHeartbeatInterval <= 0 || c.GroupHeartbeatInterval >= c.GroupMinSessionTimeout {
		errs = append(errs, fmt.Errorf("--group-heartbeat-interval %s must be positive and below --group-min-session-timeout %s",
			c.GroupHeartbeatInterval, c.GroupMinSessionTimeout))
	}
	if c.GroupTickInterval < 0 {
		errs = append(errs, errors.New("GroupTickInterval must not be negative"))
	}
	return errs
}

// validatePasses checks compaction's and tiering's settings.
func (c Config) validatePasses() []error {
	var errs []error
	if c.CompactionCheckInterval < 100*time.Millisecond || c.CompactionMapBytes < 64<<10 || c.CompactionMapBytes > 64<<30 {
		errs = append(errs, errors.New("--compaction-check-interval must be at least 100ms and --compaction-map-bytes in [64 KiB, 64 GiB]"))
	}
	if c.CompactionBufferBytes < 0 || c.CompactionBufferBytes > 64<<30 {
		errs = append(errs, errors.New("--compaction-buffer-bytes must be in [0, 64 GiB]"))
	}
	if c.CompactionMaxBytesPerSecond < 0 {
		errs = append(errs, errors.New("--compaction-max-bytes-per-second must be 0 (unbounded) or more"))
	}
	if c.TierCacheDir != "" && c.TierDiskCacheBytes < 64<<20 {
		errs = append(errs, errors.New("--tier-disk-cache-bytes must be at least 64 MiB"))
	}
	if c.TierSegmentBytes < 1 || c.TierMaxDelay < 100*time.Millisecond || c.TierCheckInterval < 100*time.Millisecond ||
		c.TierOrphanGrace < time.Second || c.TierDeleteDelay < 0 || c.TierUploads < 1 || c.TierCacheBytes < 1<<20 || c.TierCookieCheckInterval < 0 ||
		c.TierRequestTimeout < 100*time.Millisecond || c.TierUploadTimeout < time.Second {
		errs = append(errs, errors.New("--tier-segment-bytes and --tier-uploads must be positive, --tier-max-delay and --tier-check-interval at least 100ms, --tier-orphan-grace at least 1s, --tier-delete-delay not negative, --tier-cache-bytes at least 1 MiB, --tier-request-timeout at least 100ms, --tier-upload-timeout at least 1s"))
	}
	return errs
}

// SuperUserList is SuperUsers split at commas, blanks dropped.
func (c Config) SuperUserList() []string {
	var out []string
	for _, p := range strings.Split(c.SuperUsers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c Config) String() string {
	return fmt.Sprintf("id=%s listen=%s advertise=%s admin-listen=%s kafka-listen=%q kafka-advertised=%q metad=%s rack=%q session-ttl=%s tail-cache-bytes=%d idle-roll=%s super-users=%q",
		c.ID, c.Listen, c.AdvertiseAddress(), c.AdminListen, c.KafkaListen, c.KafkaAdvertisedAddress(), c.Metad, c.Rack, c.SessionTTL, c.TailCacheBytes, c.IdleRoll, c.SuperUsers) + " " + c.Security.String() + " " + c.Limits.String()
}

// --ledger-digest values.
const (
	DigestAESGMAC    = "aes-gmac"
	DigestHMACSHA256 = "hmac-sha256"
)

var ledgerDigests = map[string]ledgerpb.DigestType{
	DigestAESGMAC:    ledgerpb.DigestType_DIGEST_AES_GMAC,
	DigestHMACSHA256: ledgerpb.DigestType_DIGEST_HMAC_SHA256,
}
