package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/broker/drain"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/cluster"
	"github.com/strata-log/strata/metad/metaclient"
)

func newBrokerCommand(g *globalOptions) *cobra.Command {
	b := &cobra.Command{
		Use:   "broker",
		Short: "Drain and undrain running brokers (stored in metad; with TLS, needs an admin certificate)",
	}
	b.AddCommand(newBrokerDrainCommand(g), newBrokerUndrainCommand(g))
	return b
}

func newBrokerDrainCommand(g *globalOptions) *cobra.Command {
	var (
		wait     bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain ID",
		Short: "Move every partition off a running broker, which then stays up holding none",
		Long: "Marks broker ID drained in metad (/strata/broker-drains/ID). The controller moves the\n" +
			"partitions it serves to the other active brokers, each as a clean hand-over that clients\n" +
			"follow through NOT_OWNER redirects, at most 16 partitions of the cluster between owners\n" +
			"at a time, and assigns it nothing new. The broker stays running and registered; the mark\n" +
			"outlives its restarts until 'strata broker undrain ID'. Prints how many partitions are\n" +
			"still assigned to it and owned by it; with --wait, prints that every --interval until\n" +
			"none is. Without an explicit --timeout, --wait runs until done or interrupted.\n" +
			"Refused for an id metad does not know, and when no other active broker would remain.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return cli.Exit(cli.ExitUsage, fmt.Errorf("--interval %v: must be positive", interval))
			}
			id := args[0]
			meta, err := g.metaClient()
			if err != nil {
				return err
			}
			defer meta.Close()
			ctx := cmd.Context()
			if !wait || cmd.Flags().Changed("timeout") {
				var cancel context.CancelFunc
				ctx, cancel = g.commandContext(cmd)
				defer cancel()
			}
			req, err := drain.Request(ctx, meta, id, time.Now())
			if err != nil {
				return err
			}
			p := g.printer(cmd)
			if p.Format == cli.FormatText {
				fmt.Fprintf(p.W, "broker %s drained at %s\n", id, time.UnixMilli(req.RequestedAtMs).UTC().Format(time.RFC3339))
			}
			return cluster.WatchBrokerDrain(ctx, meta, id, wait, interval, p, cmd.ErrOrStderr())
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&wait, "wait", false, "wait until no partition is assigned to or owned by the broker, printing progress")
	f.DurationVar(&interval, "interval", 2*time.Second, "time between progress lines with --wait")
	return cmd
}

func newBrokerUndrainCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "undrain ID",
		Short: "Withdraw a broker's drain: it takes partitions again",
		Long: "Deletes broker ID's drain mark. The broker is an ordinary active broker again: new\n" +
			"partitions may go to it, and balancing moves partitions to it (one hand-over at a\n" +
			"time) until the brokers' counts differ by at most one.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withMeta(cmd, func(ctx context.Context, meta *metaclient.Client) error {
				ok, err := drain.Withdraw(ctx, meta, args[0])
				if err != nil {
					return err
				}
				if !ok {
					return cli.Exit(cli.ExitRuntime, fmt.Errorf("broker %s is not drained", args[0]))
				}
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(map[string]string{"undrained": args[0]})
				}
				_, err = fmt.Fprintf(p.W, "OK broker %s undrained: balancing gives it partitions again\n", args[0])
				return err
			})
		}),
	}
}
