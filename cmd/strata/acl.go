package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/cli"
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
type aclFlags struct {
	allow, deny, cluster, prefixed bool
	principal, operation           string
	topic, group                   string
}

func (f *aclFlags) rule() (acl.Rule, error) {
	r := acl.Rule{Principal: f.principal, Operation: acl.Operation(f.operation), Pattern: acl.Literal}
	switch {
	case f.allow == f.deny:
		return r, errors.New("give one of --allow and --deny")
	case f.allow:
		r.Permission = acl.Allow
	default:
		r.Permission = acl.Deny
	}
	if n := btoi(f.topic != "") + btoi(f.group != "") + btoi(f.cluster); n != 1 {
		return r, errors.New("give one of --topic NAME, --group NAME and --cluster")
	}
	switch {
	case f.topic != "":
		r.Resource, r.Name = acl.Topic, f.topic
	case f.group != "":
		r.Resource, r.Name = acl.Group, f.group
	default:
		r.Resource, r.Name = acl.Cluster, acl.ClusterName
		if f.prefixed {
			return r, errors.New("--prefixed names topics or groups, not the cluster")
		}
	}
	if f.prefixed {
		r.Pattern = acl.Prefixed
	}
	return r, r.Validate()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func newACLChangeCommand(g *globalOptions, verb string) *cobra.Command {
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:   verb + " (--allow|--deny) --principal User:NAME --operation OP (--topic NAME | --group NAME | --cluster) [--prefixed]",
		Short: map[string]string{"add": "Add an ACL", "remove": "Remove an ACL (named by the same flags)"}[verb],
		Args:  cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			r, err := f.rule()
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
	fl.BoolVar(&f.allow, "allow", false, "allow the operation")
	fl.BoolVar(&f.deny, "deny", false, "deny the operation (overrides any allow)")
	fl.StringVar(&f.principal, "principal", "", "User:NAME, or User:* for every user")
	fl.StringVar(&f.operation, "operation", "", "read, write, create, delete, alter, describe or all")
	fl.StringVar(&f.topic, "topic", "", "a topic name (a prefix with --prefixed; * for every topic)")
	fl.StringVar(&f.group, "group", "", "a consumer group id (a prefix with --prefixed; * for every group)")
	fl.BoolVar(&f.cluster, "cluster", false, "the cluster (create topics, describe the cluster)")
	fl.BoolVar(&f.prefixed, "prefixed", false, "--topic or --group is a prefix")
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
				rules := []acl.Rule{}
				for _, kv := range kvs {
					r, err := acl.Unmarshal(kv.Value)
					if err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "strata: skipping %s: %v\n", kv.Key, err)
						continue
					}
					rules = append(rules, r)
				}
				sort.Slice(rules, func(i, j int) bool { return rules[i].ID() < rules[j].ID() })
				p := g.printer(cmd)
				if p.Format == cli.FormatJSON {
					return p.JSON(rules)
				}
				tw := tabwriter.NewWriter(p.W, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PRINCIPAL\tPERMISSION\tOPERATION\tRESOURCE\tPATTERN\tNAME")
				for _, r := range rules {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Principal, r.Permission, r.Operation, r.Resource, r.Pattern, r.Name)
				}
				return tw.Flush()
			})
		}),
	}
}
