package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/internal/cli"
	"github.com/strata-log/strata/ledger/bookies"
)

func newClusterCommand(g *globalOptions) *cobra.Command {
	cluster := &cobra.Command{Use: "cluster", Short: "Inspect the cluster's nodes"}
	cluster.AddCommand(newClusterStatusCommand(g))
	cluster.AddCommand(&cobra.Command{
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
			return printBookies(cmd, g.printer(cmd), known)
		},
	})
	return cluster
}

type bookieRow struct {
	ID         string `json:"id"`
	State      string `json:"state"`
	Address    string `json:"address,omitempty"`
	FreeBytes  uint64 `json:"free_bytes"`
	TotalBytes uint64 `json:"total_bytes"`
	Rack       string `json:"rack,omitempty"`
	Instance   string `json:"instance,omitempty"`
}

func printBookies(cmd *cobra.Command, p *cli.Printer, known []bookies.Known) error {
	rows := make([]bookieRow, 0, len(known))
	for _, k := range known {
		r := bookieRow{ID: k.ID, State: k.State()}
		if k.Cookie != nil {
			r.Instance = k.Cookie.InstanceId
		}
		if k.Info != nil {
			r.Address, r.FreeBytes, r.TotalBytes, r.Rack = k.Info.Address, k.Info.FreeBytes, k.Info.TotalBytes, k.Info.Rack
		}
		rows = append(rows, r)
	}
	if p.Format == cli.FormatJSON {
		return p.JSON(rows)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tADDRESS\tFREE\tTOTAL\tRACK\tINSTANCE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, dash(r.Address),
			cli.Bytes(r.FreeBytes), cli.Bytes(r.TotalBytes), dash(r.Rack), r.Instance)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
