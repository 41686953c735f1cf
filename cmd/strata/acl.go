package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/access"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/metad/metaclient"
)

func newACLCommand(g *globalOptions) *cobra.Command {
	a := &cobra.Command{Use: "acl", Short: "Add, remove and list ACLs (stored in metad; needs an admin certificate)",
		Long: "ACLs allow or deny a principal (User:NAME or User:*) an operation on topics, groups or the\n" +
			"cluster, named literally or by prefix. Deny overrides allow; with TLS on, what no ACL allows\n" +
			"is refused (super-users and admin certificates excepted). See docs/security.md."}
	a.AddCommand(newACLChangeCommand(g, "add"), newACLChangeCommand(g, "remove"), newACLListCommand(g))
	return a
}

// aclFlags are the flags naming one rule.
func newACLChangeCommand(g *globalOptions, verb string) *cobra.Command {
	f := &access.RuleSpec{}
	cmd := &cobra.Command{
		Use:   verb + " (--allow|--deny) --principal User:NAME --operation OP (--topic NAME | --group NAME | --cluster) [--prefixed]",
		Short: map[string]string{"add": "Add an ACL", "remove": "Remove an ACL (named by the same flags)"}[verb],
		Args:  cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			r, err := f.Rule()
			if err != nil {
				return cli.Exit(cli.ExitUsage, err)
			}
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				if verb == "add" {
					if _, err := c.Put(ctx, r.Key(), r.Marshal()); err != nil {
						return err
					}
					return report(g, cmd, r, "added: "+r.String())
				}
				n, err := c.Delete(ctx, r.Key())
				if err != nil {
					return err
				}
				if n == 0 {
					return cli.Exit(cli.ExitRuntime, fmt.Errorf("no such ACL: %s", r))
				}
				return report(g, cmd, r, "removed: "+r.String())
			})
		}),
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.Allow, "allow", false, "allow the operation")
	fl.BoolVar(&f.Deny, "deny", false, "deny the operation (overrides any allow)")
	fl.StringVar(&f.Principal, "principal", "", "User:NAME, or User:* for every user")
	fl.StringVar(&f.Operation, "operation", "", "read, write, create, delete, alter, describe or all")
	fl.StringVar(&f.Topic, "topic", "", "a topic name (a prefix with --prefixed; * for every topic)")
	fl.StringVar(&f.Group, "group", "", "a consumer group id (a prefix with --prefixed; * for every group)")
	fl.BoolVar(&f.Cluster, "cluster", false, "the cluster (create topics, describe the cluster)")
	fl.BoolVar(&f.Prefixed, "prefixed", false, "--topic or --group is a prefix")
	return cmd
}

func newACLListCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List ACLs",
		Args:  cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				kvs, _, err := c.List(ctx, acl.ACLsPrefix)
				if err != nil {
					return err
				}
				return access.PrintRules(g.printer(cmd), access.Rules(kvs, cmd.ErrOrStderr()))
			})
		}),
	}
}
