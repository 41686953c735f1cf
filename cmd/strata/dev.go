package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/internal/cli"
	"github.com/strata-log/strata/internal/devcluster"
)

func newDevCommand(g *globalOptions) *cobra.Command {
	o := devcluster.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a complete local cluster (every role a separate process) until Ctrl-C",
		Long: `Run a complete local cluster: every role as a separate process on fixed
loopback ports, data under --dir (kept across restarts). Prints the addresses,
writes a CLI profile so that strata needs no flags, and stops everything on
Ctrl-C. The state file DIR/cluster.json lists every node (role, id, pid,
addresses, data dir); 'strata dev kill|stop|start NODE' act on one node.

The brokers tier sealed ledgers to MinIO, run as one more node (minio, data in
DIR/minio, S3 on --minio-port, console on the next port), when a minio binary
is beside the role binaries, on PATH or in $(go env GOPATH)/bin ('make minio'
installs it); otherwise to the local directory DIR/tier.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.BinDir == "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				o.BinDir = filepath.Dir(exe)
			}
			o.MinIO = devcluster.FindMinIO(o.BinDir, os.Getenv)
			return runDev(cmd, o)
		},
	}
	cmd.PersistentFlags().StringVar(&o.Dir, "dir", o.Dir, "directory for data, logs, the state file and the profile")
	f := cmd.Flags()
	f.StringVar(&o.BinDir, "bin-dir", "", "directory holding the role binaries (default: beside strata)")
	f.IntVar(&o.Metad, "metad", o.Metad, "number of metad members (1, 3 or 5)")
	f.IntVar(&o.MetadPort, "metad-port", o.MetadPort, "first metad client port (raft +100, admin +200)")
	f.IntVar(&o.Bookies, "bookies", o.Bookies, "number of bookies")
	f.IntVar(&o.BookiePort, "bookie-port", o.BookiePort, "first bookie port (admin +100)")
	f.IntVar(&o.Brokers, "brokers", o.Brokers, "number of brokers")
	f.IntVar(&o.BrokerPort, "broker-port", o.BrokerPort, "first broker port (admin +100)")
	f.IntVar(&o.MinIOPort, "minio-port", o.MinIOPort, "MinIO's S3 port, when a minio binary is found (console +1)")
	f.BoolVar(&o.TLS, "tls", false, "mutual TLS on every link: a CA and per-node certificates under DIR/tls, and an admin certificate in the profile")
	cmd.AddCommand(newDevNodeCommand("kill", "Kill a node with a signal (default KILL)", &o.Dir),
		newDevNodeCommand("stop", "Stop a node (SIGTERM, then SIGKILL after 10s)", &o.Dir),
		newDevNodeCommand("start", "Start a stopped or killed node again with its recorded arguments", &o.Dir),
		newDevStatusCommand(g, &o.Dir))
	return cmd
}

func runDev(cmd *cobra.Command, o devcluster.Options) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	start := time.Now()
	tierStore, err := devcluster.TierStore(o)
	if err != nil {
		return err
	}
	if o.MinIO == "" && o.Brokers > 0 {
		fmt.Fprintf(out, "no minio binary beside the role binaries, on PATH or in $(go env GOPATH)/bin: "+
			"brokers tier to the local directory %s ('make minio' installs MinIO)\n", tierStore)
	}
	st, err := devcluster.Up(ctx, o, out)
	if err != nil {
		return err
	}
	prof := devcluster.ProfileFromState(st)
	if o.TLS {
		admin, err := devcluster.AdminTLSFiles(o.Dir)
		if err != nil {
			devcluster.Down(st, 10*time.Second)
			return err
		}
		prof.TLSCA, prof.TLSCert, prof.TLSKey = admin.CA, admin.Cert, admin.Key
	}
	profiles := []string{filepath.Join(o.Dir, "profile.json")}
	if p, err := devcluster.UserProfilePath(); err == nil {
		profiles = append(profiles, p)
	}
	for _, p := range profiles {
		if err := devcluster.WriteProfile(p, prof); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "strata: warning: profile %s not written: %v\n", p, err)
		}
	}
	fmt.Fprintf(out, "\nStrata dev cluster ready in %s (data in %s, state in %s)\n", time.Since(start).Round(time.Millisecond),
		o.Dir, filepath.Join(o.Dir, devcluster.StateFile))
	printDevSummary(out, st, prof, tierStore, profiles)
	superviseDev(ctx, out, o.Dir, st)
	return nil
}

// printDevSummary lists the cluster's addresses, object store and
// profiles. The MinIO credentials stay out of it: the output is often
// pasted into issues.
func printDevSummary(out io.Writer, st *devcluster.State, prof devcluster.Profile, tierStore string, profiles []string) {
	fmt.Fprintf(out, "  metad:   %s\n", prof.Metad)
	if bookies := devcluster.Endpoints(st.Nodes, devcluster.RoleBookie); len(bookies) > 0 {
		fmt.Fprintf(out, "  bookies: %s\n", strings.Join(bookies, ","))
	}
	if prof.Brokers != "" {
		fmt.Fprintf(out, "  brokers: %s\n", prof.Brokers)
	}
	if m, err := st.Node(devcluster.MinIOName); err == nil {
		fmt.Fprintf(out, "  objects: %s (MinIO, data in %s; console http://%s, login in %s)\n", tierStore, m.DataDir, m.Admin,
			filepath.Join(st.Dir, devcluster.StateFile))
	} else if prof.Brokers != "" {
		fmt.Fprintf(out, "  objects: %s (local directory; 'make minio' installs MinIO)\n", tierStore)
	}
	if prof.TLSCert != "" {
		fmt.Fprintf(out, "  tls:     mutual TLS on every link; CA %s, CLI certificate %s (role admin)\n", prof.TLSCA, prof.TLSCert)
	}
	fmt.Fprintf(out, "  profile: %s\n", strings.Join(profiles, ", "))
	if prof.Brokers != "" {
		fmt.Fprintf(out, "Try:  strata cluster status    (Ctrl-C stops the cluster)\n")
	} else {
		fmt.Fprintf(out, "Try:  strata meta status    (Ctrl-C stops the cluster)\n")
	}
}

// superviseDev reports nodes that exit or come back, until ctx ends; then
// it stops the cluster.
func superviseDev(ctx context.Context, out io.Writer, dir string, st *devcluster.State) {
	reported := map[string]bool{}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "\nstopping the cluster...")
			// Nodes may have been restarted since: stop what the state file
			// lists now.
			if cur, err := devcluster.LoadState(dir); err == nil {
				st = cur
			}
			devcluster.Down(st, 10*time.Second)
			fmt.Fprintln(out, "stopped")
			return
		case <-ticker.C:
			cur, err := devcluster.LoadState(dir)
			if err != nil {
				continue
			}
			for _, n := range cur.Nodes {
				up := devcluster.Signal(n, 0) == nil
				if !up && !reported[n.Name] {
					fmt.Fprintf(out, "%s (pid %d) is not running; 'strata dev start %s' restarts it\n", n.Name, n.PID, n.Name)
				}
				if up && reported[n.Name] {
					fmt.Fprintf(out, "%s is running again (pid %d)\n", n.Name, n.PID)
				}
				reported[n.Name] = !up
			}
		}
	}
}

func newDevNodeCommand(action, short string, dir *string) *cobra.Command {
	var sig string
	cmd := &cobra.Command{
		Use:   action + " NODE",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := devcluster.LoadState(*dir)
			if err != nil {
				return err
			}
			n, err := st.Node(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch action {
			case "kill":
				s, err := parseSignal(sig)
				if err != nil {
					return err
				}
				if err := devcluster.Signal(*n, s); err != nil {
					return err
				}
				// A killed node is gone (its ports free) before this
				// returns, so `dev start` right after it works.
				if s == syscall.SIGKILL && !devcluster.WaitGone(*n, 10*time.Second) {
					return fmt.Errorf("%s (pid %d) still runs 10s after SIGKILL", n.Name, n.PID)
				}
				fmt.Fprintf(out, "sent SIG%s to %s (pid %d)\n", strings.ToUpper(sig), n.Name, n.PID)
			case "stop":
				switch err := devcluster.Stop(*n, 10*time.Second); {
				case errors.Is(err, devcluster.ErrNotRunning):
					fmt.Fprintf(out, "%s was not running\n", n.Name)
				case err != nil:
					return err
				default:
					fmt.Fprintf(out, "stopped %s\n", n.Name)
				}
			case "start":
				if devcluster.Signal(*n, 0) == nil {
					return fmt.Errorf("%s is already running (pid %d)", n.Name, n.PID)
				}
				if err := devcluster.Start(n); err != nil {
					return err
				}
				if err := st.Save(); err != nil {
					return err
				}
				if err := devcluster.WaitReady(cmd.Context(), *n, 30*time.Second); err != nil {
					return err
				}
				fmt.Fprintf(out, "started %s (pid %d), ready\n", n.Name, n.PID)
			}
			return nil
		},
	}
	if action == "kill" {
		cmd.Flags().StringVarP(&sig, "signal", "s", "KILL", "signal: KILL, TERM, INT, STOP or CONT")
	}
	return cmd
}

func parseSignal(s string) (syscall.Signal, error) {
	switch strings.ToUpper(strings.TrimPrefix(strings.ToUpper(s), "SIG")) {
	case "KILL", "9":
		return syscall.SIGKILL, nil
	case "TERM", "15":
		return syscall.SIGTERM, nil
	case "INT", "2":
		return syscall.SIGINT, nil
	case "STOP":
		return syscall.SIGSTOP, nil
	case "CONT":
		return syscall.SIGCONT, nil
	}
	return 0, fmt.Errorf("--signal %q: want KILL, TERM, INT, STOP or CONT", s)
}

func newDevStatusCommand(g *globalOptions, dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "List the dev cluster's nodes: role, pid, running, addresses, data dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := devcluster.LoadState(*dir)
			if err != nil {
				return err
			}
			type row struct {
				devcluster.Node
				Running bool `json:"running"`
			}
			var rows []row
			for _, n := range st.Nodes {
				rows = append(rows, row{Node: n, Running: devcluster.Signal(n, 0) == nil})
			}
			p := g.printer(cmd)
			if p.Format == cli.FormatJSON {
				return p.JSON(rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tROLE\tPID\tRUNNING\tLISTEN\tADMIN\tDATA DIR")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%t\t%s\t%s\t%s\n", r.Name, r.Role, r.PID, r.Running, r.Listen, r.Admin, r.DataDir)
			}
			return tw.Flush()
		},
	}
}
