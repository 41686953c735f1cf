package main

import (
	"context"
	"crypto/tls"
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
		Long: "Sends one GET to ADMIN/readyz (/livez with --live, or --path) and exits 0 on a\n" +
			"200 answer, 1 otherwise, printing the answer's status and body. Meant for container\n" +
			"health checks: it needs no shell. --path also probes other HTTP health endpoints, e.g.\n" +
			"MinIO's /minio/health/ready.\n" +
			"With a CA (--tls-ca, else $" + cli.EnvTLSCA + ", else $" + envNodeTLSCA + ", the node's own) it speaks\n" +
			"https first, checking the node's certificate, and http when the node answers in\n" +
			"plaintext: a node with --admin-tls is probed the same way as one without.",
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
			tlsConf, err := probeTLS(g.tls.CA)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			code, body, err := cli.ProbeHTTP(ctx, admin, path, tlsConf)
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

// probeTLS is the TLS configuration of admin probes: the CA of --tls-ca
// (flagCA), $STRATA_TLS_CA, or the node's own $STRATA_TLS_CA_FILE when the
// probe runs in its container; nil (plain http) without any.
func probeTLS(flagCA string) (*tls.Config, error) {
	for _, ca := range []string{flagCA, os.Getenv(cli.EnvTLSCA), os.Getenv(envNodeTLSCA)} {
		if ca != "" {
			return cli.AdminTLS(ca)
		}
	}
	return nil, nil
}

// envNodeTLSCA is the variable that sets a role's --tls-ca-file.
const envNodeTLSCA = "STRATA_TLS_CA_FILE"

// envAdminListen is the variable that sets a role's --admin-listen; in a
// container it names the admin address of the node the check runs beside.
const envAdminListen = "STRATA_ADMIN_LISTEN"
