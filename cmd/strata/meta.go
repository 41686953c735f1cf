package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/metad/metaclient"
)

// statusProbeTimeout bounds each member's answer to `meta status`.
const statusProbeTimeout = 2 * time.Second

func newMetaCommand(g *globalOptions) *cobra.Command {
	meta := &cobra.Command{
		Use:   "meta",
		Short: "Read and change metad, the metadata service",
	}
	meta.AddCommand(
		newMetaStatusCommand(g),
		newMetaGetCommand(g),
		newMetaPutCommand(g),
		newMetaDeleteCommand(g),
		newMetaListCommand(g),
		newMetaWatchCommand(g),
		newMetaMemberCommand(g),
		newMetaSnapshotCommand(g),
	)
	return meta
}

func newMetaStatusCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show every metad member's state and the leader",
		Long: "Asks any endpoint for the membership, then each member for its own status.\n" +
			"Exits 2 when there is no leader or a member is unreachable.",
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			eps, err := g.endpoints()
			if err != nil {
				return err
			}
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				cs := cli.CollectStatus(ctx, c, eps, min(statusProbeTimeout, g.timeout), cli.DefaultLagThreshold)
				if err := g.printer(cmd).Status(cs); err != nil {
					return err
				}
				if problems := cs.Problems(); len(problems) > 0 {
					return cli.Exit(cli.ExitUsage, fmt.Errorf("cluster unhealthy: %s", strings.Join(problems, ", ")))
				}
				return nil
			})
		}),
	}
}

func newMetaGetCommand(g *globalOptions) *cobra.Command {
	var stale bool
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print a key's value",
		Long:  "Prints the value and a newline. Exits 1 with \"not found\" when the key does not exist.",
		Args:  cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				var opts []metaclient.ReadOption
				if stale {
					opts = append(opts, metaclient.Stale())
				}
				kv, err := c.Get(ctx, args[0], opts...)
				if errors.Is(err, metaclient.ErrNotFound) {
					return fmt.Errorf("not found: %s", args[0])
				}
				if err != nil {
					return err
				}
				return g.printer(cmd).Value(kv)
			})
		}),
	}
	cmd.Flags().BoolVar(&stale, "stale", false, "read from any member without confirming leadership (faster, may be behind)")
	return cmd
}

func newMetaPutCommand(g *globalOptions) *cobra.Command {
	var (
		lease           int64
		expectedVersion int64
	)
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Write a key (VALUE - reads the value from stdin)",
		Long: "Writes KEY. VALUE \"-\" reads the value from stdin, byte for byte.\n" +
			"--expected-version makes the write a compare-and-set (0: the key must not exist).",
		Args: cobra.ExactArgs(2),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			key, value := args[0], []byte(args[1])
			if args[1] == "-" {
				var err error
				if value, err = readValue(cmd.InOrStdin()); err != nil {
					return err
				}
			}
			var opts []metaclient.WriteOption
			if lease != 0 {
				opts = append(opts, metaclient.WithLease(lease))
			}
			cas := cmd.Flags().Changed("expected-version")
			if cas {
				opts = append(opts, metaclient.WithExpectedVersion(expectedVersion))
			}
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				kv, err := c.Put(ctx, key, value, opts...)
				switch {
				case errors.Is(err, metaclient.ErrVersionConflict):
					return fmt.Errorf("put %q: version conflict: the key is not at version %d, nothing written (%s)",
						key, expectedVersion, cli.ServerMessage(err))
				case errors.Is(err, metaclient.ErrLeaseNotFound):
					return fmt.Errorf("put %q: lease %d not found, nothing written (%s)", key, lease, cli.ServerMessage(err))
				case err != nil:
					return err
				}
				return g.printer(cmd).Put(kv)
			})
		}),
	}
	cmd.Flags().Int64Var(&lease, "lease", 0, "attach the key to this lease id")
	cmd.Flags().Int64Var(&expectedVersion, "expected-version", 0, "write only if the key is at this version (0: does not exist)")
	return cmd
}

// readValue reads a value from r, refusing more than a request can carry.
func readValue(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, grpcopts.MaxMessageBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read value from stdin: %w", err)
	}
	if len(b) > grpcopts.MaxMessageBytes {
		return nil, fmt.Errorf("value on stdin exceeds %d bytes", grpcopts.MaxMessageBytes)
	}
	return b, nil
}

func newMetaDeleteCommand(g *globalOptions) *cobra.Command {
	var (
		prefix          bool
		yes             bool
		expectedVersion int64
	)
	cmd := &cobra.Command{
		Use:     "del KEY",
		Aliases: []string{"delete"},
		Short:   "Delete a key, or every key under a prefix",
		Long: "Deletes KEY, or with --prefix every key that starts with KEY.\n\n" +
			"A --prefix that matches more than one key asks first when stdin is a\n" +
			"terminal; otherwise it needs --yes (without, nothing is deleted, exit 2).\n" +
			"The keys are counted before the delete: keys created under the prefix\n" +
			"in between are deleted too.",
		Example: "  strata meta list /tmp/ --keys-only     # what a prefix delete would take\n" +
			"  strata meta del /tmp/ --prefix --yes",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			key := args[0]
			var opts []metaclient.WriteOption
			if prefix {
				opts = append(opts, metaclient.WithPrefix())
			}
			if cmd.Flags().Changed("expected-version") {
				opts = append(opts, metaclient.WithExpectedVersion(expectedVersion))
			}
			if prefix && !yes {
				var matches int
				err := g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
					kvs, _, err := c.List(ctx, key, metaclient.KeysOnly())
					matches = len(kvs)
					return err
				})
				if err != nil {
					return err
				}
				// Asked outside withMeta: --timeout does not run while a
				// person reads the question.
				if err := confirmPrefixDelete(cmd, key, matches); err != nil {
					return err
				}
			}
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				n, err := c.Delete(ctx, key, opts...)
				if errors.Is(err, metaclient.ErrVersionConflict) {
					return fmt.Errorf("delete %q: version conflict: the key is not at version %d, nothing deleted (%s)",
						key, expectedVersion, cli.ServerMessage(err))
				}
				if err != nil {
					return err
				}
				return g.printer(cmd).Deleted(n)
			})
		}),
	}
	cmd.Flags().BoolVar(&prefix, "prefix", false, "delete every key that starts with KEY")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "with --prefix: delete without asking, however many keys match")
	cmd.Flags().Int64Var(&expectedVersion, "expected-version", 0, "delete only if the key is at this version")
	return cmd
}

// stdinIsTerminal reports whether r, a command's stdin, is a terminal a
// person can answer from. Tests replace it.
var stdinIsTerminal = func(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && cli.IsTerminal(f)
}

// confirmPrefixDelete decides whether a prefix delete matching n keys may
// go ahead without --yes: at most one key, yes; more, only if a person at
// the terminal answers y. A non-terminal stdin is refused (exit 2), saying
// how many keys would go.
func confirmPrefixDelete(cmd *cobra.Command, prefix string, n int) error {
	if n <= 1 {
		return nil
	}
	in := cmd.InOrStdin()
	if !stdinIsTerminal(in) {
		return cli.Exit(cli.ExitUsage, fmt.Errorf("del %q --prefix would delete %d keys: pass --yes to delete them "+
			"(stdin is not a terminal to ask; 'strata meta list %s --keys-only' lists them); nothing deleted", prefix, n, prefix))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Delete %d keys under %q? [y/N] ", n, prefix)
	answer, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("del %q --prefix: not confirmed; nothing deleted", prefix)
}

func newMetaListCommand(g *globalOptions) *cobra.Command {
	var stale, keysOnly bool
	cmd := &cobra.Command{
		Use:   "list PREFIX",
		Short: "List the keys under a prefix, in key order",
		Args:  cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			var opts []metaclient.ReadOption
			if stale {
				opts = append(opts, metaclient.Stale())
			}
			if keysOnly {
				opts = append(opts, metaclient.KeysOnly())
			}
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				kvs, rev, err := c.List(ctx, args[0], opts...)
				if err != nil {
					return err
				}
				return g.printer(cmd).List(kvs, rev, keysOnly)
			})
		}),
	}
	cmd.Flags().BoolVar(&stale, "stale", false, "read from any member without confirming leadership (faster, may be behind)")
	cmd.Flags().BoolVar(&keysOnly, "keys-only", false, "print keys without values")
	return cmd
}

func newMetaWatchCommand(g *globalOptions) *cobra.Command {
	var fromRevision int64
	cmd := &cobra.Command{
		Use:   "watch PREFIX",
		Short: "Print every change under a prefix until interrupted",
		Long: "Prints one line per change: \"PUT key value rev=N\" or \"DELETE key rev=N\"\n" +
			"(--output json: one object per line), until Ctrl-C.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			if fromRevision < 0 {
				return fmt.Errorf("--from-revision %d: must not be negative", fromRevision)
			}
			c, err := g.metaClient()
			if err != nil {
				return err
			}
			defer c.Close()
			// Runs until Ctrl-C (main's context), not --timeout.
			ctx := cmd.Context()
			p := g.printer(cmd)
			for r := range c.Watch(ctx, args[0], fromRevision) {
				if r.Err != nil {
					var ce *metaclient.CompactedError
					if errors.As(r.Err, &ce) {
						return fmt.Errorf("watch %q: revision %d is compacted; the oldest available is %d",
							args[0], fromRevision, ce.CompactRevision)
					}
					return r.Err
				}
				for _, ev := range r.Events {
					if err := p.Event(ev); err != nil {
						return err
					}
				}
			}
			return nil
		}),
	}
	cmd.Flags().Int64Var(&fromRevision, "from-revision", 0, "first revision to print (0: changes from now on)")
	return cmd
}

func newMetaMemberCommand(g *globalOptions) *cobra.Command {
	member := &cobra.Command{
		Use:   "member",
		Short: "Change metad's membership",
	}
	member.AddCommand(&cobra.Command{
		Use:   "add ID RAFT_ADDR",
		Short: "Add a voting member with this id and Raft address",
		Args:  cobra.ExactArgs(2),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				members, err := c.MemberAdd(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				return g.printer(cmd).Members(members)
			})
		}),
	}, &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member",
		Args:  cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				members, err := c.MemberRemove(ctx, args[0])
				if errors.Is(err, metaclient.ErrNotFound) {
					return fmt.Errorf("member %q not found (%s)", args[0], cli.ServerMessage(err))
				}
				if err != nil {
					return err
				}
				return g.printer(cmd).Members(members)
			})
		}),
	})
	return member
}
