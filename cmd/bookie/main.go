// Command bookie runs one Strata storage node.
//
//	bookie --id b1 --data-dir DIR --listen 127.0.0.1:7301 --admin-listen 127.0.0.1:7401 \
//	  --metad 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
//
// Every flag is also a YAML key in --config and a STRATA_* variable.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/strata-log/strata/cmd/internal/nodeconfig"
	"github.com/strata-log/strata/internal/clockfault"
	"github.com/strata-log/strata/internal/config"
	"github.com/strata-log/strata/internal/node"
	"github.com/strata-log/strata/ledger/bookie"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/vfs"
	"github.com/strata-log/strata/vfs/faultfs"
)

func main() {
	if err := run(os.Args[1:]); err != nil && !errors.Is(err, nodeconfig.ErrHelp) {
		fmt.Fprintln(os.Stderr, "bookie:", err)
		os.Exit(1)
	}
}

func flags(d bookie.Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("bookie", pflag.ContinueOnError)
	fs.String("id", d.ID, "bookie id (bound to --data-dir by its cookie)")
	fs.String("data-dir", d.DataDir, "directory for the journal, the index and the cookie")
	config.EndpointsFlags(fs, d.Endpoints, config.EndpointsHelp{
		Listen:    "gRPC address",
		Advertise: "address registered for writers and readers (default: --listen)",
	})
	config.ExposureFlags(fs, d.Exposure)
	config.SecurityFlags(fs, d.Security)
	config.LimitsFlags(fs, d.Limits)
	fs.String("metad", d.Metad, "metad endpoints, host:port,...")
	fs.String("rack", d.Rack, "placement label: a ledger's copies go to different racks")
	fs.Duration("lease-ttl", d.LeaseTTL, "registration lease TTL (a dead bookie vanishes after it)")
	fs.Float64("read-only-above", d.ReadOnlyAbove, "disk usage fraction at which the bookie turns read-only")
	fs.Float64("writable-below", d.WritableBelow, "disk usage fraction below which it is writable again")
	fs.Int64("journal-max-file-bytes", d.JournalMaxFileBytes, "journal file size before rotation")
	fs.Bool("journal-direct-io", d.JournalDirectIO, "write the journal with O_DIRECT in 4 KiB-aligned groups (format 2); false: through the page cache, format 1, readable by older builds")
	fs.Duration("gc-interval", d.GCInterval, "how often deleted ledgers' space is reclaimed")
	fs.Int64("gc-compaction-max-bytes-per-second", d.GCCompactionMaxBytesPerSecond, "what garbage collection copies per second at most when it compacts mostly-dead journal files: the copies share the journal with acknowledged writes (negative: unbounded)")
	fs.Int64("gc-remove-max-bytes-per-second", d.GCRemoveMaxBytesPerSecond, "how fast garbage collection removes each journal file it no longer needs, in synced cuts: on a file system mounted with discard, a whole file freed at once stalls every fdatasync on the disk (negative: unbounded; also unbounded on a disk 80% full)")
	fs.Float64("gc-minor-ratio", d.GCMinorRatio, "every garbage collection compacts journal files whose live bytes are below this fraction (negative: no compaction)")
	fs.Float64("gc-major-ratio", d.GCMajorRatio, "a major garbage collection (every --gc-major-interval, or on a disk 80% full) compacts files below this live fraction (negative: no major runs)")
	fs.Duration("gc-major-interval", d.GCMajorInterval, "time between major garbage collections (negative: only when the disk is 80% full)")
	fs.Int("max-entry-bytes", d.MaxEntryBytes, "largest entry payload accepted")
	fs.Bool("autorecovery", d.Autorecovery, "run a re-replication candidate (one in the cluster is elected)")
	fs.Duration("autorecovery-interval", d.AutorecoveryInterval, "time between the elected replicator's audits")
	fs.Duration("autorecovery-grace", d.AutorecoveryGrace, "how long a bookie may be gone before its ledgers are re-replicated")
	fs.Duration("ledger-gc-interval", d.LedgerGCInterval, "time between sweeps that delete local copies of ledgers metad no longer lists (0: off)")
	fs.Duration("ledger-gc-grace", d.LedgerGCGrace, "how long a ledger must be absent from metad before its local copy is deleted")
	fs.Duration("fence-tombstone-ttl", d.FenceTombstoneTTL, "how long a deleted ledger's fence is kept (refusing a fenced-out writer); negative: forever")
	config.LoggingFlags(fs, d.Logging)
	return fs
}

func run(args []string) error {
	cfg := bookie.DefaultConfig()
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
	log.Info("starting bookie", "config", cfg.String())
	// An fsync or write error means the journal may have lost what it was
	// told was written: stop now rather than go on acknowledging.
	bookie.SetFatalHandler(func(err error) {
		fmt.Fprintln(os.Stderr, "bookie: fatal:", err)
		os.Exit(70)
	})
	// A test seam: only when STRATA_DISK_FAULTS names a control file does
	// the journal's file system inject faults (vfs/faultfs).
	fsys, stopFaults := faultfs.FromEnv(vfs.Default(), faultfs.Options{Logger: log})
	defer stopFaults()
	cfg.FS = fsys
	// Another: only when STRATA_CLOCK_FAULTS names a control file does the
	// bookie's clock jump (internal/clockfault).
	if clock, stopClock := clockfault.FromEnv(log); clock != nil {
		defer stopClock()
		cfg.Now = clock.Now
	}
	node.SetMemoryLimit(log)
	reg := node.NewRegistry()
	ctx := context.Background()
	b, err := bookie.Open(ctx, cfg, log, reg)
	if err != nil {
		return err
	}
	defer b.Close()
	b.Start()
	return node.Serve(ctx, log, node.Serving{
		Role: "bookie", TLS: b.Credentials(),
		Exposure: cfg.Exposure, Security: cfg.Security, Limits: cfg.Limits,
		Listen: cfg.Listen, AdminListen: cfg.AdminListen, Registry: reg, Ready: b.Ready,
		ServerOptions: b.ServerOptions(),
		Drain:         b.Drain,
		StopTimeout:   bookie.StopTimeout,
		Register:      func(s *grpc.Server) { bookiepb.RegisterBookieServer(s, b.Service()) },
	})
}
