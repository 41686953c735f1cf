package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/tier"
	"github.com/strata-log/strata/tiering/objstore/storeurl"
	"github.com/strata-log/strata/tiering/scrub"
	"github.com/strata-log/strata/tiering/segfile"
)

func newTierCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tier",
		Short: "Tiered storage: what is in the object store and what waits, and a scrub of the objects",
	}
	cmd.AddCommand(newTierStatusCommand(g), newTierScrubCommand(g))
	return cmd
}

func newTierStatusCommand(g *globalOptions) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "status [TOPIC]",
		Short: "Per partition: what is in the object store, what is still on the bookies, and the upload lag",
		Long: "Shows, per partition (of TOPIC, or of every topic; internal topics only with --all), the log\n" +
			"start, the offset the objects reach (TIERED END), the objects and their bytes in the store,\n" +
			"the bytes and ledgers on the bookies, and the upload lag: the bytes of closed ledgers not yet\n" +
			"in an object, and how old they are (now minus the newest record of the oldest of them).\n" +
			"LAG is \"off\" for topics that are not tiered (remote.storage.enable=false, compacted,\n" +
			"internal). From the topic descriptions only: it does not read the store.",
		Args: cobra.MaximumNArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withBroker(cmd, func(ctx context.Context, c *client.Client) error {
				descs, err := tier.DescribeTopics(ctx, c, args, all)
				if err != nil {
					return err
				}
				return tier.PrintStatus(g.printer(cmd), tier.StatusRows(descs, time.Now()))
			})
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "include internal topics")
	return cmd
}

// tierScrubOptions are the flags of `tier scrub`.
type tierScrubOptions struct {
	store    string
	topic    string
	parallel int
	progress bool
}

func newTierScrubCommand(g *globalOptions) *cobra.Command {
	var o tierScrubOptions
	cmd := &cobra.Command{
		Use:   "scrub --store URL",
		Short: "Check every committed segment object: present, of its size, every checksum and its MAC, as recorded",
		Long: "Reads every partition's list of segment objects from metad and checks each object in the store\n" +
			"--store (the brokers' --tier-store URL; s3 credentials from AWS_ACCESS_KEY_ID and\n" +
			"AWS_SECRET_ACCESS_KEY): that it exists with the recorded size, that every byte passes its\n" +
			"checksum and the object's MAC under the cluster's tier key (read from metad; it reads all of\n" +
			"the object), and that offsets, records, bytes and index position are what metad records.\n" +
			"Prints each problem (missing, truncated, size-mismatch, corrupt, metadata-mismatch,\n" +
			"unreadable) with topic/partition, offsets and key, and each object written before objects\n" +
			"were authenticated (unauthenticated), progress on stderr when it is a terminal (or with\n" +
			"--progress), and a summary line. An object replaced or moved in the bucket is corrupt (MAC\n" +
			"mismatch). It only reads.\n" +
			"Exits 2 if any object is damaged, 1 if some could not be read, 0 otherwise. Without an\n" +
			"explicit --timeout it runs until done or interrupted (--timeout still bounds the metad reads).",
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			return g.runTierScrub(cmd, o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.store, "store", "", "the object store: s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&region=R][&insecure=true] or file:///ABS/DIR")
	f.StringVar(&o.topic, "topic", "", "check only this topic's objects")
	f.IntVar(&o.parallel, "parallel", scrub.DefaultParallel, "objects verified at once")
	f.BoolVar(&o.progress, "progress", false, "show progress on stderr even when it is not a terminal")
	return cmd
}

// runTierScrub lists the segments, checks them, and prints the outcome.
func (g *globalOptions) runTierScrub(cmd *cobra.Command, o tierScrubOptions) error {
	switch {
	case o.store == "":
		return cli.Exit(cli.ExitUsage, errors.New("--store is required (the brokers' --tier-store URL)"))
	case o.parallel < 1:
		return cli.Exit(cli.ExitUsage, fmt.Errorf("--parallel %d: want at least 1", o.parallel))
	}
	if _, err := storeurl.Parse(o.store); err != nil {
		return cli.Exit(cli.ExitUsage, fmt.Errorf("--store: %w", err))
	}
	meta, err := g.metaClient()
	if err != nil {
		return err
	}
	defer meta.Close()
	lctx, cancel := g.commandContext(cmd)
	segs, err := tier.Segments(lctx, meta, o.topic)
	var key *segfile.Key
	if err == nil {
		key, err = tier.TierKey(lctx, meta)
	}
	cancel()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if cmd.Flags().Changed("timeout") {
		var cancel context.CancelFunc
		ctx, cancel = g.commandContext(cmd)
		defer cancel()
	}
	store, err := storeurl.Open(ctx, o.store, storeurl.Options{})
	if err != nil {
		return err
	}
	if c, ok := store.(io.Closer); ok {
		defer c.Close()
	}
	stderr := cmd.ErrOrStderr()
	return tier.Scrub(ctx, store, segs, g.printer(cmd), tier.ScrubOptions{Key: key, Listed: tier.Listed(meta), Parallel: o.parallel,
		ShowProgress: o.progress || cli.IsTerminal(stderr), Stderr: stderr})
}
