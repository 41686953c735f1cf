package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/cluster"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/ledger/replication"
)

func newBookieCommand(g *globalOptions) *cobra.Command {
	b := &cobra.Command{
		Use:   "bookie",
		Short: "List, decommission and recommission bookies",
	}
	b.AddCommand(newBookieListCommand(g), newBookieDecommissionCommand(g), newBookieRecommissionCommand(g))
	return b
}

func newBookieListCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List bookies with the ledgers on each, and the under-replicated ledger count",
		Long: "Lists every bookie metad knows (like 'strata cluster bookies') with the number of ledgers\n" +
			"that name it and whether it is decommissioned, then the number of under-replicated ledgers\n" +
			"(a fragment on a missing or decommissioned bookie) and the elected replicator.",
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			meta, err := g.metaClient()
			if err != nil {
				return err
			}
			defer meta.Close()
			known, err := bookies.List(ctx, meta)
			if err != nil {
				return err
			}
			rep, err := replication.Inspect(ctx, replication.MetaKV(meta), ledgermetad.NewStore(meta), time.Now())
			if err != nil {
				return err
			}
			return cluster.PrintBookieList(g.printer(cmd), known, rep)
		}),
	}
}

func newBookieDecommissionCommand(g *globalOptions) *cobra.Command {
	var (
		address  string
		wait     bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "decommission ID",
		Short: "Drain a bookie (live or dead): copy every ledger fragment on it to other bookies",
		Long: "Marks bookie ID decommissioned in metad. A running bookie then registers as read-only (no\n" +
			"new ledger lands on it), and the elected replicator copies every fragment that names it to\n" +
			"other bookies: closed ledgers at once, open ones after the autorecovery grace period (they\n" +
			"are recovered first, so their writer rolls to a new ledger). Prints how many ledgers and\n" +
			"fragments still name the bookie; with --wait, prints that every --interval until none does.\n" +
			"A dead bookie's address comes from metad's records; --address gives it when they have none.\n" +
			"Without an explicit --timeout, --wait runs until done or interrupted.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return fmt.Errorf("--interval %v: must be positive", interval)
			}
			id := args[0]
			meta, err := g.metaClient()
			if err != nil {
				return err
			}
			defer meta.Close()
			kv, store := replication.MetaKV(meta), ledgermetad.NewStore(meta)
			ctx := cmd.Context()
			if !wait || cmd.Flags().Changed("timeout") {
				var cancel context.CancelFunc
				ctx, cancel = g.commandContext(cmd)
				defer cancel()
			}
			d, err := replication.MarkDecommissioned(ctx, kv, id, address, time.Now())
			if err != nil {
				return err
			}
			p := g.printer(cmd)
			if p.Format == cli.FormatText {
				fmt.Fprintf(p.W, "bookie %s (%s) decommissioned at %s\n", d.BookieID, d.Address,
					time.UnixMilli(d.RequestedAtMs).UTC().Format(time.RFC3339))
			}
			return cluster.WatchDrain(ctx, kv, store, id, wait, interval, p, cmd.ErrOrStderr())
		}),
	}
	f := cmd.Flags()
	f.StringVar(&address, "address", "", "the bookie's address, if metad has none recorded (a bookie that never ran with autorecovery)")
	f.BoolVar(&wait, "wait", false, "wait until no ledger names the bookie, printing progress")
	f.DurationVar(&interval, "interval", 2*time.Second, "time between progress lines with --wait")
	return cmd
}

func newBookieRecommissionCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "recommission ID",
		Short: "Withdraw a bookie's decommission: it takes new data again",
		Long: "Removes bookie ID's decommission record. Fragments already copied elsewhere stay there;\n" +
			"the bookie registers as writable again.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			meta, err := g.metaClient()
			if err != nil {
				return err
			}
			defer meta.Close()
			ok, err := replication.Recommission(ctx, replication.MetaKV(meta), args[0])
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("bookie %s is not decommissioned", args[0])
			}
			p := g.printer(cmd)
			if p.Format == cli.FormatJSON {
				return p.JSON(map[string]string{"recommissioned": args[0]})
			}
			_, err = fmt.Fprintf(p.W, "OK bookie %s recommissioned\n", args[0])
			return err
		}),
	}
}
