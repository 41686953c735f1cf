package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// Bounds of `strata dev` and its node commands.
const (
	// StopGrace is how long a stopped node gets between SIGTERM and
	// SIGKILL, and Run's cluster on Ctrl-C.
	StopGrace = 10 * time.Second
	// killWait bounds waiting for a node killed with SIGKILL to be gone.
	killWait = 10 * time.Second
	// readyWait bounds waiting for a started node's /readyz.
	readyWait = 30 * time.Second
	// superviseInterval is how often Run checks the nodes.
	superviseInterval = time.Second
)

// Run is `strata dev`: it starts the cluster o describes, writes the CLI
// profile (to DIR/profile.json and the user's), prints the addresses to
// out and then reports nodes that exit or come back until ctx ends, when
// it stops the cluster. Meanwhile it starts the nodes `strata dev start`
// asks it for (the control socket, DIR/dev.sock), so that every node is
// its child and dies with it. Warnings go to stderr.
func Run(ctx context.Context, o Options, out, stderr io.Writer) error {
	start := time.Now()
	tierStore, err := TierStore(o)
	if err != nil {
		return err
	}
	// Up refuses a directory whose nodes run; this refuses one whose
	// `strata dev` runs with every node stopped ('strata dev stop').
	if supervisorAnswers(o.Dir) {
		return fmt.Errorf("devcluster: another 'strata dev' runs for %s", o.Dir)
	}
	if o.MinIO == "" && o.Brokers > 0 {
		fmt.Fprintf(out, "no minio binary beside the role binaries, on PATH or in $(go env GOPATH)/bin: "+
			"brokers tier to the local directory %s ('make minio' installs MinIO)\n", tierStore)
	}
	st, err := Up(ctx, o, out)
	if err != nil {
		return err
	}
	prof := ProfileFromState(st)
	if o.TLS {
		admin, err := AdminTLSFiles(o.Dir)
		if err != nil {
			Down(st, StopGrace)
			return err
		}
		prof.TLSCA, prof.TLSCert, prof.TLSKey = admin.CA, admin.Cert, admin.Key
	}
	ctl, err := listenControl(o.Dir)
	if err != nil {
		fmt.Fprintf(stderr, "strata: warning: %v: 'strata dev start' will start nodes that outlive this process\n", err)
	}
	profiles := writeProfiles(o.Dir, prof, stderr)
	fmt.Fprintf(out, "\nStrata dev cluster ready in %s (data in %s, state in %s)\n", time.Since(start).Round(time.Millisecond),
		o.Dir, filepath.Join(o.Dir, StateFile))
	PrintSummary(out, st, prof, tierStore, profiles)
	supervise(ctx, out, o.Dir)
	fmt.Fprintln(out, "\nstopping the cluster...")
	// No node may start once Down has begun.
	if ctl != nil {
		if err := ctl.Close(); err != nil {
			fmt.Fprintf(stderr, "strata: warning: control socket: %v\n", err)
		}
	}
	// Nodes may have been restarted since: stop what the state file lists
	// now.
	if cur, err := LoadState(o.Dir); err == nil {
		st = cur
	}
	Down(st, StopGrace)
	fmt.Fprintln(out, "stopped")
	return nil
}

// writeProfiles writes prof to DIR/profile.json and the user's profile;
// it returns their paths. A profile that cannot be written is a warning.
func writeProfiles(dir string, prof Profile, stderr io.Writer) []string {
	profiles := []string{filepath.Join(dir, "profile.json")}
	if p, err := UserProfilePath(); err == nil {
		profiles = append(profiles, p)
	}
	for _, p := range profiles {
		if err := WriteProfile(p, prof); err != nil {
			fmt.Fprintf(stderr, "strata: warning: profile %s not written: %v\n", p, err)
		}
	}
	return profiles
}

// PrintSummary lists the cluster's addresses, object store and profiles.
// The MinIO credentials stay out of it: the output is often pasted into
// issues.
func PrintSummary(out io.Writer, st *State, prof Profile, tierStore string, profiles []string) {
	fmt.Fprintf(out, "  metad:   %s\n", prof.Metad)
	if bookies := Endpoints(st.Nodes, RoleBookie); len(bookies) > 0 {
		fmt.Fprintf(out, "  bookies: %s\n", strings.Join(bookies, ","))
	}
	if prof.Brokers != "" {
		fmt.Fprintf(out, "  brokers: %s\n", prof.Brokers)
	}
	kafka := KafkaBootstrap(st.Nodes)
	if kafka != "" {
		fmt.Fprintf(out, "  kafka:   %s\n", kafka)
	}
	if m, err := st.Node(MinIOName); err == nil {
		fmt.Fprintf(out, "  objects: %s (MinIO, data in %s; console http://%s, login in %s)\n", tierStore, m.DataDir, m.Admin,
			filepath.Join(st.Dir, StateFile))
	} else if prof.Brokers != "" {
		fmt.Fprintf(out, "  objects: %s (local directory; 'make minio' installs MinIO)\n", tierStore)
	}
	if prof.TLSCert != "" {
		fmt.Fprintf(out, "  tls:     mutual TLS on every link; CA %s, CLI certificate %s (role admin)\n", prof.TLSCA, prof.TLSCert)
	}
	fmt.Fprintf(out, "  profile: %s\n", strings.Join(profiles, ", "))
	if kafka != "" {
		printKafkaClient(out, strings.Split(kafka, ",")[0], prof)
	}
	if prof.Brokers != "" {
		fmt.Fprintf(out, "Try:  strata cluster status    (Ctrl-C stops the cluster)\n")
	} else {
		fmt.Fprintf(out, "Try:  strata meta status    (Ctrl-C stops the cluster)\n")
	}
}

// KafkaBootstrap is the brokers' Kafka addresses, comma-separated: what a
// Kafka client is given as its bootstrap list.
func KafkaBootstrap(nodes []Node) string {
	var out []string
	for _, n := range nodes {
		if n.Role == RoleBroker && n.Kafka != "" {
			out = append(out, n.Kafka)
		}
	}
	return strings.Join(out, ",")
}

// printKafkaClient says how a Kafka client connects, with kcat as the
// example: plaintext, or, on a --tls cluster (where the Kafka listener
// speaks TLS and requires a client certificate or SASL), with the
// profile's admin certificate, or as a user made by 'strata user create'.
func printKafkaClient(out io.Writer, addr string, prof Profile) {
	if prof.TLSCert == "" {
		fmt.Fprintf(out, "Kafka: kcat -b %s -L\n", addr)
		return
	}
	fmt.Fprintf(out, "Kafka (TLS, the admin certificate):\n  kcat -b %s -X security.protocol=ssl -X ssl.ca.location=%s "+
		"-X ssl.certificate.location=%s -X ssl.key.location=%s -L\n", addr, prof.TLSCA, prof.TLSCert, prof.TLSKey)
	fmt.Fprintf(out, "Kafka (TLS, a user from 'strata user create NAME --password-stdin'):\n  kcat -b %s -X security.protocol=sasl_ssl "+
		"-X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=NAME -X sasl.password=PASSWORD -X ssl.ca.location=%s -L\n", addr, prof.TLSCA)
}

// supervise reports nodes that exit or come back, until ctx ends.
func supervise(ctx context.Context, out io.Writer, dir string) {
	reported := map[string]bool{}
	ticker := time.NewTicker(superviseInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if cur, err := LoadState(dir); err == nil {
				reportChanges(out, cur.Nodes, reported, func(n Node) bool { return Signal(n, 0) == nil })
			}
		}
	}
}

// reportChanges prints a line for each node that stopped running or runs
// again since the last call; reported holds the nodes reported down.
func reportChanges(out io.Writer, nodes []Node, reported map[string]bool, running func(Node) bool) {
	for _, n := range nodes {
		up := running(n)
		if !up && !reported[n.Name] {
			fmt.Fprintf(out, "%s (pid %d) is not running; 'strata dev start %s' restarts it\n", n.Name, n.PID, n.Name)
		}
		if up && reported[n.Name] {
			fmt.Fprintf(out, "%s is running again (pid %d)\n", n.Name, n.PID)
		}
		reported[n.Name] = !up
	}
}

// ParseSignal parses `strata dev kill --signal`: a name with or without
// SIG, or a number, of KILL, TERM, INT, STOP and CONT.
func ParseSignal(s string) (syscall.Signal, error) {
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

// KillNode is `strata dev kill NODE`: it sends sig (named as given, for
// the message) and, for SIGKILL, waits until the node is gone (its ports
// free) so that `dev start` right after it works.
func KillNode(out io.Writer, n Node, sig string) error {
	s, err := ParseSignal(sig)
	if err != nil {
		return err
	}
	if err := Signal(n, s); err != nil {
		return err
	}
	if s == syscall.SIGKILL && !WaitGone(n, killWait) {
		return fmt.Errorf("%s (pid %d) still runs 10s after SIGKILL", n.Name, n.PID)
	}
	fmt.Fprintf(out, "sent SIG%s to %s (pid %d)\n", strings.ToUpper(sig), n.Name, n.PID)
	return nil
}

// StopNode is `strata dev stop NODE`: SIGTERM, then SIGKILL after
// StopGrace.
func StopNode(out io.Writer, n Node) error {
	switch err := Stop(n, StopGrace); {
	case errors.Is(err, ErrNotRunning):
		fmt.Fprintf(out, "%s was not running\n", n.Name)
	case err != nil:
		return err
	default:
		fmt.Fprintf(out, "stopped %s\n", n.Name)
	}
	return nil
}

// StartNode is `strata dev start NODE`: it starts a node that is not
// running with its recorded arguments, records its pid in st and waits
// for it to be ready. The `strata dev` that runs the cluster starts it
// (askSupervisor), so that the node is that process's child and dies with
// it like the others. When none answers (it was killed, or the cluster
// was started by Up in another program), the node is started here, free
// to outlive this command, and the output says so: it then runs until
// 'strata dev stop NODE' (a new `strata dev` for the directory refuses to
// start while it runs).
func StartNode(ctx context.Context, out io.Writer, st *State, n *Node) error {
	if Signal(*n, 0) == nil {
		return fmt.Errorf("%s is already running (pid %d)", n.Name, n.PID)
	}
	pid, err := askSupervisor(ctx, st.Dir, n.Name)
	switch {
	case err == nil:
		n.PID = pid // recorded by the supervisor
	case errors.Is(err, errNoSupervisor):
		if err := startRecorded(st, n, false); err != nil {
			return err
		}
		fmt.Fprintf(out, "no 'strata dev' runs for %s: %s (pid %d) runs on its own, until 'strata dev stop %s'\n",
			st.Dir, n.Name, n.PID, n.Name)
	default:
		return err
	}
	if err := WaitReady(ctx, *n, readyWait); err != nil {
		return err
	}
	fmt.Fprintf(out, "started %s (pid %d), ready\n", n.Name, n.PID)
	return nil
}

// NodeStatus is one node of `strata dev status`.
type NodeStatus struct {
	Node
	Running bool `json:"running"`
}

// Statuses lists st's nodes and whether each runs.
func Statuses(st *State) []NodeStatus {
	var rows []NodeStatus
	for _, n := range st.Nodes {
		rows = append(rows, NodeStatus{Node: n, Running: Signal(n, 0) == nil})
	}
	return rows
}

// PrintStatuses prints rows as `strata dev status`'s table.
func PrintStatuses(w io.Writer, rows []NodeStatus) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tPID\tRUNNING\tLISTEN\tADMIN\tKAFKA\tDATA DIR")
	for _, r := range rows {
		kafka := r.Kafka
		if kafka == "" {
			kafka = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%t\t%s\t%s\t%s\t%s\n", r.Name, r.Role, r.PID, r.Running, r.Listen, r.Admin, kafka, r.DataDir)
	}
	return tw.Flush()
}
