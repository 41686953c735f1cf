package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/cluster"
	"github.com/strata-log/strata/proto/brokerpb"
)

// clusterWatchInterval is how often status --watch refreshes.
const clusterWatchInterval = 2 * time.Second

func newClusterStatusCommand(g *globalOptions) *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Health of the whole cluster: metad, brokers and partitions, bookies, ledger replication",
		Long: `Shows metad's members and leader, the brokers and the partitions they own,
the bookies and their state, and how many ledgers are under-replicated.

Exits 2 when the cluster is unhealthy: metad has no leader or a member is
unreachable, no broker answers or a registered one fails its /readyz, a
partition has no owner, or a bookie is
down or read-only while fewer than 3 are writable. Under-replicated ledgers
(and bookies down with 3 still writable) are warnings. --watch refreshes
every 2 s until Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			eps, err := g.endpoints()
			if err != nil {
				return err
			}
			meta, err := g.metaClient()
			if err != nil {
				return err
			}
			defer meta.Close()
			adminTLS, err := g.adminProbeTLS()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			brokers := &brokerConn{g: g}
			defer brokers.close()
			p := g.printer(cmd)
			for {
				roundCtx, cancel := context.WithTimeout(ctx, g.timeout)
				rep := cluster.Collect(roundCtx, meta, eps, brokers.describe, min(statusProbeTimeout, g.timeout), adminTLS)
				cancel()
				if watch && ctx.Err() != nil {
					return nil
				}
				if watch && p.Format != cli.FormatJSON {
					fmt.Fprint(p.W, "\x1b[H\x1b[2J")
					fmt.Fprintf(p.W, "%s (every %s, Ctrl-C stops)\n\n", time.Now().Format(time.TimeOnly), clusterWatchInterval)
				}
				if err := cluster.Print(p, rep); err != nil {
					return err
				}
				if !watch {
					if !rep.Healthy {
						return cli.Exit(cli.ExitUsage, fmt.Errorf("cluster unhealthy: %s", strings.Join(rep.Problems, "; ")))
					}
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(clusterWatchInterval):
				}
			}
		}),
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh every 2 s until interrupted")
	return cmd
}

// brokerStatusTimeout bounds the brokers' part of a status round: a
// status command should say "unreachable" quickly.
const brokerStatusTimeout = 5 * time.Second

// brokerConn is status's broker client, connected on first use and kept
// across --watch rounds.
type brokerConn struct {
	g *globalOptions
	c *client.Client
}

func (b *brokerConn) describe(ctx context.Context) (*brokerpb.DescribeClusterResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, min(brokerStatusTimeout, b.g.timeout))
	defer cancel()
	if b.c == nil {
		c, err := b.g.brokerClient(ctx)
		if err != nil {
			if addrs, aerr := b.g.brokers(); aerr == nil && ctx.Err() != nil {
				return nil, fmt.Errorf("no broker answered at %s within %s", strings.Join(addrs, ","), min(brokerStatusTimeout, b.g.timeout))
			}
			return nil, err
		}
		b.c = c
	}
	return b.c.DescribeCluster(ctx)
}

func (b *brokerConn) close() {
	if b.c != nil {
		b.c.Close()
	}
}

// adminProbeTLS is how status probes the brokers' admin addresses: with
// the CA the CLI trusts for the brokers, https first (nodes with
// --admin-tls); plain http without one.
func (g *globalOptions) adminProbeTLS() (*tls.Config, error) {
	files, err := g.tlsFiles(g.brokersFromProfile(), g.user != "")
	if err != nil || files.CA == "" {
		return nil, err
	}
	return cli.AdminTLS(files.CA)
}
