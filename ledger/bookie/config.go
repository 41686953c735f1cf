package bookie

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/ledger/replication"
	"github.com/strata-log/strata/ledger/storage"
	"github.com/strata-log/strata/vfs"
)

// Config is one bookie's configuration.
type Config struct {
	// ID names the bookie in metad; bound to DataDir by the cookie.
	ID      string `mapstructure:"id"`
	DataDir string `mapstructure:"data-dir"`
	// Endpoints: the gRPC address; Advertise (default Listen) is what the
	// bookie registers for writers and readers to dial; the admin HTTP
	// address.
	config.Endpoints `mapstructure:",squash"`
	// Exposure: pprof on the admin address, gRPC reflection.
	config.Exposure `mapstructure:",squash"`
	// Security: TLS certificate files (serving and dialling peers, mTLS)
	// and --insecure.
	config.Security `mapstructure:",squash"`
	// Limits: the gRPC and admin listeners' caps and timeouts.
	config.Limits `mapstructure:",squash"`
	// Metad lists metad client endpoints, host:port,...
	Metad string `mapstructure:"metad"`
	// Rack is an optional placement label: a ledger's copies go to different
	// racks while there are racks enough (ledger.Placement).
	Rack string `mapstructure:"rack"`
	// LeaseTTL bounds how long a dead bookie stays registered.
	LeaseTTL time.Duration `mapstructure:"lease-ttl"`

	ReadOnlyAbove       float64 `mapstructure:"read-only-above"`
	WritableBelow       float64 `mapstructure:"writable-below"`
	JournalMaxFileBytes int64   `mapstructure:"journal-max-file-bytes"`
	// JournalDirectIO writes the journal with O_DIRECT in its aligned
	// format (version 2); false writes it through the page cache in
	// version 1, which builds before direct I/O can read.
	JournalDirectIO bool          `mapstructure:"journal-direct-io"`
	GCInterval      time.Duration `mapstructure:"gc-interval"`
	// GCCompactionMaxBytesPerSecond bounds the journal compaction's
	// copies (storage.Options.CompactMaxBytesPerSecond; negative:
	// unbounded).
	GCCompactionMaxBytesPerSecond int64 `mapstructure:"gc-compaction-max-bytes-per-second"`
	// GCRemoveMaxBytesPerSecond paces the removal of journal files GC no
	// longer needs (storage.Options.RemoveMaxBytesPerSecond; negative:
	// unbounded).
	GCRemoveMaxBytesPerSecond int64 `mapstructure:"gc-remove-max-bytes-per-second"`
	// GCMinorRatio, GCMajorRatio and GCMajorInterval are journal
	// compaction's minor and major live-ratio thresholds
	// (storage.Options.CompactBelowLiveRatio and MajorCompactBelowLiveRatio,
	// MajorCompactInterval).
	GCMinorRatio    float64       `mapstructure:"gc-minor-ratio"`
	GCMajorRatio    float64       `mapstructure:"gc-major-ratio"`
	GCMajorInterval time.Duration `mapstructure:"gc-major-interval"`
	// MaxEntryBytes bounds one entry's payload.
	MaxEntryBytes int `mapstructure:"max-entry-bytes"`

	// Autorecovery runs a re-replication candidate (package
	// ledger/replication) in this bookie; one candidate in the cluster is
	// elected and repairs ledgers on missing or decommissioned bookies.
	Autorecovery bool `mapstructure:"autorecovery"`
	// AutorecoveryInterval is the time between the leader's audits.
	AutorecoveryInterval time.Duration `mapstructure:"autorecovery-interval"`
	// AutorecoveryGrace is how long a bookie may be gone before its copies
	// are re-replicated (and an open ledger on it is recovered).
	AutorecoveryGrace time.Duration `mapstructure:"autorecovery-grace"`

	// LedgerGCInterval is the time between orphan sweeps, which delete
	// local copies of ledgers metad no longer lists (doc.go, "Orphan
	// sweep"); 0 turns the sweep off.
	LedgerGCInterval time.Duration `mapstructure:"ledger-gc-interval"`
	// LedgerGCGrace is how long a ledger must have been seen absent from
	// metad before its local copy is deleted.
	LedgerGCGrace time.Duration `mapstructure:"ledger-gc-grace"`
	// FenceTombstoneTTL is how long the fence of a deleted ledger outlives
	// its data (ledger/storage doc.go F1, F2); negative: forever; 0: the
	// default (storage.DefaultFenceTombstoneTTL).
	FenceTombstoneTTL time.Duration `mapstructure:"fence-tombstone-ttl"`

	config.Logging `mapstructure:",squash"`

	// FS is the file system of the journal and the data directory (not
	// of the Pebble index); nil is vfs.Default(). Not a flag: cmd/bookie
	// sets it only to inject disk faults in tests (vfs/faultfs).
	FS vfs.FS `mapstructure:"-"`
	// Now is the clock of the bookie's stamps, expiries and grace periods
	// (deletions, fence tombstones, the orphan sweep, re-replication); nil
	// is time.Now. Not a flag: cmd/bookie sets it only to make the clock
	// jump in tests (internal/clockfault).
	Now func() time.Time `mapstructure:"-"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Exposure:                      config.DefaultExposure(),
		Limits:                        config.DefaultLimits(),
		Endpoints:                     config.Endpoints{Listen: "127.0.0.1:7301", AdminListen: "127.0.0.1:7401"},
		Metad:                         "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
		LeaseTTL:                      5 * time.Second,
		ReadOnlyAbove:                 0.95,
		WritableBelow:                 0.90,
		JournalMaxFileBytes:           256 << 20,
		JournalDirectIO:               true,
		GCInterval:                    time.Minute,
		GCCompactionMaxBytesPerSecond: storage.DefaultCompactMaxBytesPerSecond,
		GCRemoveMaxBytesPerSecond:     storage.DefaultRemoveMaxBytesPerSecond,
		GCMinorRatio:                  storage.DefaultCompactBelowLiveRatio,
		GCMajorRatio:                  storage.DefaultMajorCompactBelowLiveRatio,
		GCMajorInterval:               storage.DefaultMajorCompactInterval,
		MaxEntryBytes:                 8 << 20,
		Autorecovery:                  true,
		AutorecoveryInterval:          replication.DefaultInterval,
		AutorecoveryGrace:             replication.DefaultGrace,
		LedgerGCInterval:              DefaultLedgerGCInterval,
		LedgerGCGrace:                 DefaultLedgerGCGrace,
		FenceTombstoneTTL:             storage.DefaultFenceTombstoneTTL,
		Logging:                       config.DefaultLogging(),
	}
}

var bookieIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if !bookieIDPattern.MatchString(c.ID) {
		errs = append(errs, fmt.Errorf("--id %q: want 1-64 characters of [a-zA-Z0-9_.-]", c.ID))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	if err := c.Endpoints.Validate("others"); err != nil {
		errs = append(errs, err)
	}
	if c.Metad == "" {
		errs = append(errs, errors.New("--metad is required"))
	}
	if c.LeaseTTL < 500*time.Millisecond {
		errs = append(errs, errors.New("--lease-ttl must be at least 500ms"))
	}
	if !(c.WritableBelow > 0 && c.WritableBelow < c.ReadOnlyAbove && c.ReadOnlyAbove <= 1) {
		errs = append(errs, fmt.Errorf("--writable-below %.2f and --read-only-above %.2f: want 0 < writable-below < read-only-above <= 1",
			c.WritableBelow, c.ReadOnlyAbove))
	}
	if c.JournalMaxFileBytes < 1<<20 {
		errs = append(errs, errors.New("--journal-max-file-bytes must be at least 1 MiB"))
	}
	if c.MaxEntryBytes < 1 || int64(c.MaxEntryBytes) > c.JournalMaxFileBytes/2 {
		errs = append(errs, errors.New("--max-entry-bytes must be positive and at most half of --journal-max-file-bytes"))
	}
	if c.GCMinorRatio >= 1 || c.GCMajorRatio >= 1 {
		errs = append(errs, fmt.Errorf("--gc-minor-ratio %v and --gc-major-ratio %v must be below 1 (negative: off)", c.GCMinorRatio, c.GCMajorRatio))
	}
	if c.Autorecovery && c.AutorecoveryInterval < 100*time.Millisecond {
		errs = append(errs, errors.New("--autorecovery-interval must be at least 100ms"))
	}
	if c.AutorecoveryGrace < 0 {
		errs = append(errs, errors.New("--autorecovery-grace must not be negative"))
	}
	if c.LedgerGCInterval != 0 && c.LedgerGCInterval < 100*time.Millisecond {
		errs = append(errs, errors.New("--ledger-gc-interval must be 0 (off) or at least 100ms"))
	}
	// The grace is what leaves an operator time to notice a metad that
	// lost ledgers before the bookies delete their copies.
	if c.LedgerGCGrace < time.Second {
		errs = append(errs, errors.New("--ledger-gc-grace must be at least 1s"))
	}
	// A fence must outlast any writer it kept out; a writer acknowledges
	// only within its metad session, seconds long.
	if c.FenceTombstoneTTL > 0 && c.FenceTombstoneTTL < time.Minute {
		errs = append(errs, errors.New("--fence-tombstone-ttl must be negative (forever), 0 (the default, 7 days) or at least 1m"))
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Security.Check(c.Listen, c.AdminListen); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) String() string {
	return fmt.Sprintf("id=%s data-dir=%s listen=%s advertise=%s admin-listen=%s metad=%s rack=%q lease-ttl=%s read-only-above=%.2f writable-below=%.2f journal-direct-io=%t gc-minor-ratio=%v gc-major-ratio=%v gc-major-interval=%s autorecovery=%t autorecovery-interval=%s autorecovery-grace=%s ledger-gc-interval=%s ledger-gc-grace=%s fence-tombstone-ttl=%s",
		c.ID, c.DataDir, c.Listen, c.AdvertiseAddress(), c.AdminListen, c.Metad, c.Rack, c.LeaseTTL, c.ReadOnlyAbove, c.WritableBelow,
		c.JournalDirectIO, c.GCMinorRatio, c.GCMajorRatio, c.GCMajorInterval, c.Autorecovery, c.AutorecoveryInterval, c.AutorecoveryGrace, c.LedgerGCInterval, c.LedgerGCGrace, c.FenceTombstoneTTL) + " " + c.Security.String() + " " + c.Limits.String()
}
