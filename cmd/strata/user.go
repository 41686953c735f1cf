package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/access"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/scram"
	"github.com/strata-log/strata/metad/metaclient"
)

// Users and ACLs are written straight to metad (docs/security.md, "Users
// and ACLs"): metad's API admits only cluster roles and admin
// certificates, so these commands need the admin certificate (the
// profile's with `strata dev --tls`); brokers follow the keys by watch.

func newUserCommand(g *globalOptions) *cobra.Command {
	user := &cobra.Command{Use: "user", Short: "Create, delete and list users that log in with a password (stored in metad; needs an admin certificate)"}
	user.AddCommand(newUserCreateCommand(g), newUserDeleteCommand(g), newUserListCommand(g))
	return user
}

func newUserCreateCommand(g *globalOptions) *cobra.Command {
	var (
		passwordStdin bool
		iterations    int
	)
	cmd := &cobra.Command{
		Use:   "create NAME --password-stdin",
		Short: "Create a user, or change its password",
		Long: "Reads the password from the first line of standard input and stores SCRAM-SHA-256 and\n" +
			"SCRAM-SHA-512 credentials (random salt, PBKDF2 iterations, StoredKey and ServerKey; never the password)\n" +
			"under " + acl.UsersPrefix + "NAME. An existing user's password is replaced.\n" +
			"The user is the principal User:NAME in ACLs.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := acl.ValidUserName(name); err != nil {
				return cli.Exit(cli.ExitUsage, err)
			}
			if !passwordStdin {
				return cli.Exit(cli.ExitUsage, errors.New("give --password-stdin and the password on standard input"))
			}
			in, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<10))
			if err != nil {
				return err
			}
			password, err := cli.ReadPassword(string(in))
			if err != nil {
				return cli.Exit(cli.ExitUsage, err)
			}
			cred, err := scram.NewUser(name, password, iterations)
			if err != nil {
				return cli.Exit(cli.ExitUsage, err)
			}
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				if _, err := c.Put(ctx, acl.UserKey(name), cred.Marshal()); err != nil {
					return err
				}
				return report(g, cmd, map[string]any{"user": name, "principal": acl.UserPrincipal(name), "mechanism": cred.Mechanism, "iterations": cred.Iterations},
					fmt.Sprintf("user %s stored (%s, %d iterations)", name, cred.Mechanism, cred.Iterations))
			})
		}),
	}
	cmd.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of standard input")
	cmd.Flags().IntVar(&iterations, "iterations", scram.DefaultIterations, fmt.Sprintf("PBKDF2 iterations (%d to %d)", scram.MinIterations, scram.MaxIterations))
	return cmd
}

func newUserDeleteCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a user (its ACLs stay; brokers refuse its password from the next call)",
		Args:  cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				n, err := c.Delete(ctx, acl.UserKey(args[0]))
				if err != nil {
					return err
				}
				if n == 0 {
					return cli.Exit(cli.ExitRuntime, fmt.Errorf("no user %q", args[0]))
				}
				return report(g, cmd, map[string]any{"deleted": args[0]}, "user "+args[0]+" deleted")
			})
		}),
	}
}

func newUserListCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List users (names and mechanisms; never hashes)",
		Args:  cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				kvs, _, err := c.List(ctx, acl.UsersPrefix)
				if err != nil {
					return err
				}
				return access.PrintUsers(g.printer(cmd), access.Users(kvs))
			})
		}),
	}
}

// report prints v as JSON or text as a line.
func report(g *globalOptions, cmd *cobra.Command, v any, text string) error {
	p := g.printer(cmd)
	if p.Format == cli.FormatJSON {
		return p.JSON(v)
	}
	_, err := fmt.Fprintln(p.W, text)
	return err
}
