package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/metad/metaclient"
)

func newMetaSnapshotCommand(g *globalOptions) *cobra.Command {
	snap := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up metad to a file, or restore a backup into a new cluster",
	}
	snap.AddCommand(newMetaSnapshotSaveCommand(g), newMetaSnapshotRestoreCommand(g))
	return snap
}

func newMetaSnapshotSaveCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "save FILE",
		Short: "Write a consistent copy of metad's keys, leases and members to FILE",
		Long: "Asks metad for a snapshot at least as fresh as the call (one revision: every key as it\n" +
			"was at once), checks its SHA-256 and writes it to FILE atomically (FILE.tmp, fsync,\n" +
			"rename). The transfer must finish within --timeout. See docs/operations.md.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				data, rev, err := c.Snapshot(ctx)
				if err != nil {
					return err
				}
				snap, err := metaclient.DecodeSnapshot(data)
				if err != nil {
					return err
				}
				if err := cli.WriteFileAtomic(args[0], metaclient.EncodeSnapshotFile(data)); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "saved %s: revision %d, %d keys, %d leases, %d members, %s\n",
					args[0], rev, len(snap.Kvs), len(snap.Leases), len(snap.Members), cli.Bytes(uint64(len(data))))
				return nil
			})
		}),
	}
}

func newMetaSnapshotRestoreCommand(g *globalOptions) *cobra.Command {
	var merge, progress bool
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Write the keys of a snapshot file into an empty metad cluster",
		Long: "Checks FILE's checksum, then writes its keys into the cluster, each only if it does not\n" +
			"exist: nothing the cluster holds is overwritten. A cluster that holds any key is refused\n" +
			"unless --merge. Keys that were attached to a lease (registrations, ownership) are skipped:\n" +
			"their owners write them again when they start. Run it before any broker or bookie uses\n" +
			"the new cluster (docs/operations.md).",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			file, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			snap, err := metaclient.DecodeSnapshotFile(file)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			stderr := cmd.ErrOrStderr()
			line := cli.NewProgressLine(stderr, progress || cli.IsTerminal(stderr))
			return g.withMeta(cmd, func(ctx context.Context, c *metaclient.Client) error {
				res, err := c.Restore(ctx, snap, metaclient.RestoreOptions{Merge: merge,
					Progress: func(done, total int) { line.Update(fmt.Sprintf("restoring: %d/%d keys", done, total)) }})
				line.Clear()
				fmt.Fprintf(cmd.OutOrStdout(), "restored %s (revision %d): %d keys written, %d already present, %d leased keys skipped\n",
					args[0], snap.Revision, res.Written, res.Existing, res.Leased)
				return err
			})
		}),
	}
	cmd.Flags().BoolVar(&merge, "merge", false, "restore into a cluster that holds keys (keys it holds are kept)")
	cmd.Flags().BoolVar(&progress, "progress", false, "show progress on stderr even when it is not a terminal")
	return cmd
}
