package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/ledgers"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgergrpc"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/ledgerpb"
)

func newLedgerCommand(g *globalOptions) *cobra.Command {
	l := &cobra.Command{
		Use:   "ledger",
		Short: "Inspect, test and delete ledgers (the replicated logs on the bookies)",
	}
	l.AddCommand(
		newLedgerSimpleTestCommand(g),
		newLedgerListCommand(g),
		newLedgerDescribeCommand(g),
		newLedgerReadCommand(g),
		newLedgerDeleteCommand(g),
	)
	return l
}

// ledgerEnv connects to metad and the bookies; close releases both.
func (g *globalOptions) ledgerEnv() (env ledger.Env, close func(), err error) {
	meta, err := g.metaClient()
	if err != nil {
		return ledger.Env{}, nil, err
	}
	creds, err := g.credentials()
	if err != nil {
		meta.Close()
		return ledger.Env{}, nil, err
	}
	bookies := ledgergrpc.New(ledgergrpc.Options{DialTimeout: min(ledgergrpc.DefaultDialTimeout, g.timeout), Credentials: creds})
	env = ledger.Env{Meta: ledgermetad.NewStore(meta), Bookies: bookies, Registry: ledgermetad.NewRegistry(meta)}
	return env, func() {
		bookies.Close()
		meta.Close()
	}, nil
}

func parseLedgerID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ledger id %q: want a non-negative integer", s)
	}
	return id, nil
}

// ledgerError makes the common failures read well.
func ledgerError(id uint64, err error) error {
	if errors.Is(err, ledger.ErrNoSuchLedger) {
		return fmt.Errorf("ledger %d not found", id)
	}
	return err
}

func newLedgerSimpleTestCommand(g *globalOptions) *cobra.Command {
	var cfg ledger.SimpleTestConfig
	cmd := &cobra.Command{
		Use:   "simpletest",
		Short: "Write a test ledger, read it back, verify every byte, delete it",
		Long: "Creates a ledger on the writable bookies, writes --entries entries of --entry-size bytes\n" +
			"(pipelined), closes it, reads every entry back and compares it byte for byte, then deletes\n" +
			"the ledger (unless --keep). Prints progress on stderr, then throughput and add latency.\n" +
			"Exits 0 only if every entry was verified. Without an explicit --timeout it runs until done\n" +
			"or interrupted.",
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			env, closeEnv, err := g.ledgerEnv()
			if err != nil {
				return err
			}
			defer closeEnv()
			ctx := cmd.Context()
			if cmd.Flags().Changed("timeout") {
				var cancel context.CancelFunc
				ctx, cancel = g.commandContext(cmd)
				defer cancel()
			}
			p := g.printer(cmd)
			stderr := cmd.ErrOrStderr()
			cfg.Progress = func(pr ledger.SimpleTestProgress) {
				fmt.Fprintf(stderr, "%s: %d/%d entries (%.0f%%) in %v\n", pr.Phase, pr.Done, pr.Total,
					100*float64(pr.Done)/float64(max(pr.Total, 1)), pr.Elapsed.Round(time.Millisecond))
			}
			res, err := ledger.RunSimpleTest(ctx, env, cfg)
			if res != nil {
				if perr := ledgers.PrintSimpleTest(p, res, err); perr != nil {
					return perr
				}
			}
			if err != nil {
				return fmt.Errorf("simpletest failed: %w", err)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntVar(&cfg.EnsembleSize, "ensemble", ledger.DefaultEnsembleSize, "ensemble size E: bookies the ledger is spread over")
	f.IntVar(&cfg.WriteQuorum, "write-quorum", ledger.DefaultWriteQuorum, "write quorum Qw: copies of each entry")
	f.IntVar(&cfg.AckQuorum, "ack-quorum", ledger.DefaultAckQuorum, "ack quorum Qa: copies fsynced before an entry is acknowledged")
	f.IntVar(&cfg.Entries, "entries", ledger.DefaultSimpleTestEntries, "entries to write")
	f.IntVar(&cfg.EntrySize, "entry-size", ledger.DefaultSimpleTestEntrySize, "bytes per entry")
	f.IntVar(&cfg.MaxInFlight, "max-in-flight", ledger.DefaultSimpleTestMaxInFlight, "entries written and not yet acknowledged, at most")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the ledger instead of deleting it")
	return cmd
}

func newLedgerListCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List ledgers: id, state, entries, size, ensemble",
		Long: "Lists every ledger in metad. Entries and size are known once a ledger is closed;\n" +
			"'strata ledger describe ID' asks the bookies how far an open ledger got.",
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			meta, err := g.metaClient()
			if err != nil {
				return err
			}
			defer meta.Close()
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			mds, err := ledger.ListAll(ctx, ledgermetad.NewStore(meta))
			if err != nil {
				return err
			}
			return ledgers.PrintList(g.printer(cmd), mds)
		}),
	}
}

func newLedgerDescribeCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe ID",
		Short: "Show a ledger's metadata: state, quorums, fragments, last entry, length, properties",
		Long: "Shows the ledger's metadata. For an open ledger it also asks the bookies of the last\n" +
			"fragment for the last add confirmed (without fencing: the writer is not disturbed).",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			id, err := parseLedgerID(args[0])
			if err != nil {
				return err
			}
			env, closeEnv, err := g.ledgerEnv()
			if err != nil {
				return err
			}
			defer closeEnv()
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			r, err := ledger.OpenReader(ctx, env, id)
			if err != nil {
				return ledgerError(id, err)
			}
			md := r.Metadata()
			row := ledgers.NewRow(md, true)
			lacErr := error(nil)
			if md.GetState() != ledgerpb.LedgerState_CLOSED {
				lctx, lcancel := context.WithTimeout(ctx, min(2*time.Second, g.timeout/2))
				lac, err := r.LastAddConfirmed(lctx)
				lcancel()
				if err == nil {
					row.LAC = &lac
				}
				lacErr = err
			}
			return ledgers.PrintDescription(g.printer(cmd), row, lacErr)
		}),
	}
}

func newLedgerReadCommand(g *globalOptions) *cobra.Command {
	var from, to int64
	cmd := &cobra.Command{
		Use:   "read ID",
		Short: "Read a ledger's entries and check them: id, size, CRC-32C, status",
		Long: "Reads entries --from..--to (default: all, up to the last add confirmed) without fencing,\n" +
			"one line per entry: id, size, CRC-32C of the payload, and OK, CORRUPT (no good copy; a\n" +
			"bookie reported its copy corrupt) or UNREADABLE (no copy could be read). --output json\n" +
			"prints one object per line. Exits 1 if any entry is not OK.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			id, err := parseLedgerID(args[0])
			if err != nil {
				return err
			}
			env, closeEnv, err := g.ledgerEnv()
			if err != nil {
				return err
			}
			defer closeEnv()
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			r, err := ledger.OpenReader(ctx, env, id)
			if err != nil {
				return ledgerError(id, err)
			}
			lac, err := r.LastAddConfirmed(ctx)
			if err != nil {
				return err
			}
			last := lac
			if cmd.Flags().Changed("to") {
				if to > lac {
					return fmt.Errorf("--to %d: the last add confirmed of ledger %d is %d", to, id, lac)
				}
				last = to
			}
			if from < 0 {
				return fmt.Errorf("--from %d: must not be negative", from)
			}
			return ledgers.CheckRange(ctx, r, id, from, last, g.printer(cmd))
		}),
	}
	cmd.Flags().Int64Var(&from, "from", 0, "first entry")
	cmd.Flags().Int64Var(&to, "to", 0, "last entry (default: the last add confirmed)")
	return cmd
}

func newLedgerDeleteCommand(g *globalOptions) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a ledger: its metadata, then its entries on every bookie",
		Long: "Deletes the ledger's metadata, then asks every bookie of every fragment to delete its\n" +
			"entries. An open ledger may still have a writer: it is refused unless --force.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			id, err := parseLedgerID(args[0])
			if err != nil {
				return err
			}
			env, closeEnv, err := g.ledgerEnv()
			if err != nil {
				return err
			}
			defer closeEnv()
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			md, _, err := env.Meta.Get(ctx, id)
			if err != nil {
				return ledgerError(id, err)
			}
			if md.GetState() != ledgerpb.LedgerState_CLOSED && !force {
				return fmt.Errorf("ledger %d is %s: a writer may still use it; --force deletes it anyway", id, md.GetState())
			}
			if err := ledger.Delete(ctx, env, id); err != nil {
				if errors.Is(err, metaclient.ErrUnknownOutcome) {
					return fmt.Errorf("ledger %d: the metadata deletion may or may not have happened; run the command again: %w", id, err)
				}
				return ledgerError(id, err)
			}
			p := g.printer(cmd)
			if p.Format == cli.FormatJSON {
				return p.JSON(map[string]uint64{"deleted": id})
			}
			_, err = fmt.Fprintf(p.W, "OK deleted ledger %d\n", id)
			return err
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even if the ledger is not closed")
	return cmd
}
