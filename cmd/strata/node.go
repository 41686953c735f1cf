package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

// newNodeCommand is `strata node`: checks of one node through its admin
// HTTP address. `strata node health` is the health command of the
// container images (they have no shell, so no curl or wget).
func newNodeCommand(g *globalOptions) *cobra.Command {
	node := &cobra.Command{
		Use:   "node",
		Short: "Check one node through its admin address",
	}
	node.AddCommand(newNodeHealthCommand(g))
	return node
}

func newNodeHealthCommand(g *globalOptions) *cobra.Command {
	var admin, path string
	var live bool
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 when the node at --admin answers /readyz (or /livez with --live) with 200",
		Long: "Sends one GET to http://ADMIN/readyz (/livez with --live, or --path) and exits 0 on a\n" +
			"200 answer, 1 otherwise, printing the answer's status and body. Meant for container\n" +
			"health checks: it needs no shell. --path also probes other HTTP health endpoints, e.g.\n" +
			"MinIO's /minio/health/ready.",
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("admin") {
				admin = cli.DefaultAdmin(os.Getenv(envAdminListen), admin)
			}
			if path == "" {
				path = "/readyz"
				if live {
					path = "/livez"
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			code, body, err := cli.ProbeHTTP(ctx, admin, path)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s%s: %d %s\n", admin, path, code, body)
			if code != http.StatusOK {
				return cli.Exit(cli.ExitRuntime, nil)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&admin, "admin", "127.0.0.1:7601", "the node's admin address, host:port (default: $"+envAdminListen+", the role's own setting, when set)")
	cmd.Flags().BoolVar(&live, "live", false, "probe /livez (the process runs) instead of /readyz (it can serve)")
	cmd.Flags().StringVar(&path, "path", "", "probe this path instead (overrides --live)")
	return cmd
}

// envAdminListen is the variable that sets a role's --admin-listen; in a
// container it names the admin address of the node the check runs beside.
const envAdminListen = "STRATA_ADMIN_LISTEN"
