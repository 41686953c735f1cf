package main

import (
	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli/cluster"
	"github.com/strata-log/strata/ledger/bookies"
)

func newClusterCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect the cluster's nodes"}
	cmd.AddCommand(newClusterStatusCommand(g))
	cmd.AddCommand(&cobra.Command{
		Use:   "bookies",
		Short: "List bookies: state (writable, read-only, down), address, disk space, rack",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			return cluster.PrintBookies(g.printer(cmd), known)
		},
	})
	return cmd
}
