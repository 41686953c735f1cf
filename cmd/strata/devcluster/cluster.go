package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StateFile is the state file's name inside the cluster directory.
const StateFile = "cluster.json"

// State is the content of the state file.
type State struct {
	Dir   string `json:"dir"`
	Nodes []Node `json:"nodes"`
}

// Node returns the node with the given name.
func (s *State) Node(name string) (*Node, error) {
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return &s.Nodes[i], nil
		}
	}
	var names []string
	for _, n := range s.Nodes {
		names = append(names, n.Name)
	}
	return nil, fmt.Errorf("devcluster: no node %q (nodes: %v)", name, names)
}

// stateMu serialises writers of the state file within this process.
var stateMu sync.Mutex

// LoadState reads DIR/cluster.json.
func LoadState(dir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("devcluster: no cluster in %s (start one with 'strata dev')", dir)
		}
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("devcluster: %s: %w", filepath.Join(dir, StateFile), err)
	}
	return &s, nil
}

// Save writes the state file atomically (temporary file, then rename).
func (s *State) Save() error {
	stateMu.Lock()
	defer stateMu.Unlock()
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(s.Dir, StateFile)
	tmp := path + ".tmp"
	// Owner-only: nodes' Env holds the object store's credentials.
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Up starts every node of the plan, waits until each is ready, and writes
// the state file. Progress goes to out.
func Up(ctx context.Context, o Options, out io.Writer) (*State, error) {
	nodes, err := Plan(o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if old, err := LoadState(o.Dir); err == nil {
		for _, n := range old.Nodes {
			if Check(n) == nil {
				return nil, fmt.Errorf("devcluster: %s is still running (pid %d): is another 'strata dev' using %s?", n.Name, n.PID, o.Dir)
			}
		}
	}
	for _, n := range nodes {
		for _, a := range n.Addresses() {
			// A node in a namespace of its own has its ports to itself.
			if n.Netns == "" && !portFree(a) {
				return nil, fmt.Errorf("devcluster: %s: address %s is in use (another cluster running?)", n.Name, a)
			}
		}
		if _, err := os.Stat(n.Bin); err != nil {
			return nil, fmt.Errorf("devcluster: %s: binary %s not found (run 'make build')", n.Name, n.Bin)
		}
	}
	if o.TLS {
		if err := WriteCertificates(o, nodes); err != nil {
			return nil, err
		}
	}
	s := &State{Dir: o.Dir, Nodes: nodes}
	// Two phases: metad, bookies and MinIO start together (bookies retry
	// metad until it answers), brokers once all are ready, so that their
	// first partition takeovers find bookies to write to, and their tier
	// store (opened at start-up) its bucket.
	for _, phase := range [][]string{{RoleMetad, RoleBookie, RoleMinIO}, {RoleBroker}} {
		var started []int
		for i := range s.Nodes {
			if !slices.Contains(phase, s.Nodes[i].Role) {
				continue
			}
			if err := Start(&s.Nodes[i]); err != nil {
				Down(s, 5*time.Second)
				return nil, err
			}
			started = append(started, i)
			n := s.Nodes[i]
			kafka := ""
			if n.Kafka != "" {
				kafka = ", kafka " + n.Kafka
			}
			fmt.Fprintf(out, "started %-9s pid %-7d %s (admin %s%s)\n", n.Name, n.PID, n.Listen, n.Admin, kafka)
		}
		if err := s.Save(); err != nil {
			Down(s, 5*time.Second)
			return nil, err
		}
		for _, i := range started {
			if err := WaitReady(ctx, s.Nodes[i], 30*time.Second); err != nil {
				Down(s, 5*time.Second)
				return nil, err
			}
			fmt.Fprintf(out, "ready   %s\n", s.Nodes[i].Name)
		}
	}
	return s, nil
}

// Start starts n in its own process group, appending to its log file,
// and records the pid in n. The node is tied to this process: on Linux it
// gets SIGKILL when this process dies, however it dies (startTied), so a
// `strata dev`, bench suite or chaos run that is killed leaves no node
// behind. Start is for processes that outlive their nodes; a short-lived
// command starts a node through the running `strata dev` (StartNode).
func Start(n *Node) error { return start(n, true) }

// start starts n; tied: as Start, else free to outlive this process.
func start(n *Node, tied bool) error {
	if err := os.MkdirAll(filepath.Dir(n.LogFile), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(n.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(n.Bin, n.Args...)
	if n.Netns != "" {
		// ip execs the binary in the namespace: the pid stays the node's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", n.Netns, n.Bin}, n.Args...)...)
	}
	// Later entries win: n.Env overrides what the user's shell has.
	cmd.Env = append(os.Environ(), n.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if tied {
		err = startTied(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return fmt.Errorf("devcluster: start %s: %w", n.Name, err)
	}
	n.PID = cmd.Process.Pid
	// Reap it when it exits so it does not linger as a zombie while the
	// supervisor runs.
	go func() { _ = cmd.Wait() }()
	return nil
}

// WaitReady polls the node until it is ready: /readyz answers 200 on its
// admin address, or for MinIO, /minio/health/live answers and the bucket
// exists (created if missing).
func WaitReady(ctx context.Context, n Node, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	probe := func(ctx context.Context) error { return httpOK(ctx, "http://"+n.Admin+"/readyz") }
	if n.Role == RoleMinIO {
		var err error
		if probe, err = minIOProbe(n); err != nil {
			return err
		}
	}
	for {
		err := probe(ctx)
		if err == nil {
			return nil
		}
		if !alive(n.PID) {
			return fmt.Errorf("devcluster: %s exited during start-up; see %s", n.Name, n.LogFile)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devcluster: %s not ready after %s (%v); see %s", n.Name, timeout, err, n.LogFile)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ErrNotRunning is returned by Signal, Stop and Check when the node's
// recorded process has exited.
var ErrNotRunning = errors.New("devcluster: node not running")

// ErrOtherProgram is returned by Signal, Stop and Check when the node's
// recorded pid is alive but no longer the node: the node exited and the
// pid was reused by another program, which is never signalled.
var ErrOtherProgram = errors.New("devcluster: recorded pid is not the node")

// Check reports whether n's recorded process still runs: nil when its pid
// is alive, runs n's binary (/proc/PID/exe, where /proc exists) and leads
// its own process group (Start makes every node a group leader, and
// Signal and Stop signal the group); otherwise ErrNotRunning or
// ErrOtherProgram, wrapped with the details. Without /proc only the group
// is checked.
func Check(n Node) error {
	if n.PID <= 0 || !alive(n.PID) {
		return fmt.Errorf("%w: %s (pid %d) has exited", ErrNotRunning, n.Name, n.PID)
	}
	if why := notTheNode(n); why != "" {
		return fmt.Errorf("%w: %s has exited and its pid %d %s; not signalled", ErrOtherProgram, n.Name, n.PID, why)
	}
	return nil
}

// Signal sends sig to the node's process group, after Check: a node that
// has exited, or whose pid now belongs to another program, gets no signal
// and Signal returns Check's error. Signal(n, 0) is thus a liveness test.
func Signal(n Node, sig syscall.Signal) error {
	if err := Check(n); err != nil {
		return err
	}
	return syscall.Kill(-n.PID, sig)
}

// WaitGone waits up to timeout for n's process to be gone (exited: its
// ports are free), reporting whether it is.
func WaitGone(n Node, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for Check(n) == nil {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Stop sends SIGTERM to the node's process group and waits up to grace,
// then SIGKILL. Like Signal it first checks that the recorded process is
// still the node (Check, again before SIGKILL), returning Check's error
// without signalling anything when it is not; and an error when the node
// still runs after SIGKILL.
func Stop(n Node, grace time.Duration) error {
	if err := Check(n); err != nil {
		return err
	}
	_ = syscall.Kill(-n.PID, syscall.SIGCONT)
	_ = syscall.Kill(-n.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for alive(n.PID) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if Check(n) != nil {
		return nil // gone (or, its pid already reused: gone too)
	}
	_ = syscall.Kill(-n.PID, syscall.SIGKILL)
	for i := 0; i < 100 && alive(n.PID); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(n.PID) {
		return fmt.Errorf("devcluster: %s (pid %d) still runs after SIGKILL", n.Name, n.PID)
	}
	return nil
}

// Down stops every node, in rounds in the reverse of the start order:
// brokers first, while metad, bookies and MinIO still run for their clean
// hand-off and last uploads, then bookies and MinIO, then metad, then any
// node of a role this version does not know. Nodes of a round stop
// together.
func Down(s *State, grace time.Duration) {
	rounds := [][]string{{RoleBroker}, {RoleBookie, RoleMinIO}, {RoleMetad}}
	known := slices.Concat(rounds...)
	rounds = append(rounds, nil)
	for i, round := range rounds {
		var wg sync.WaitGroup
		for _, n := range s.Nodes {
			in := slices.Contains(round, n.Role)
			if i == len(rounds)-1 {
				in = !slices.Contains(known, n.Role)
			}
			if !in {
				continue
			}
			wg.Add(1)
			go func(n Node) {
				defer wg.Done()
				_ = Stop(n, grace) // a node already gone is what Down wants
			}(n)
		}
		wg.Wait()
	}
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: trust kill(0)
	}
	// The state is the field after the parenthesised command name.
	for i := len(data) - 1; i >= 0; i-- {
		if data[i] == ')' && i+2 < len(data) {
			return data[i+2] != 'Z'
		}
	}
	return true
}

// notTheNode says why the live process n.PID is not n ("" when it is, or
// when nothing here can tell): another binary, another user's process, or
// not the leader of its process group.
func notTheNode(n Node) string {
	if pgid, err := syscall.Getpgid(n.PID); err == nil && pgid != n.PID {
		return "is not a process group leader (another program)"
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", n.PID))
	if err != nil {
		if _, selfErr := os.Readlink("/proc/self/exe"); selfErr == nil && !errors.Is(err, os.ErrNotExist) {
			// /proc works, but this process's binary may not be read:
			// another user's.
			return "belongs to another user"
		}
		return "" // no /proc: the group check is all there is
	}
	want, err := filepath.Abs(n.Bin)
	if err != nil {
		return ""
	}
	// The binary may be found through a symlink (minio on PATH often is).
	if resolved, err := filepath.EvalSymlinks(want); err == nil {
		want = resolved
	}
	if !sameExecutable(exe, want) {
		return "runs " + exe + ", not " + want
	}
	return ""
}

// sameExecutable reports whether exe, read from /proc/PID/exe, is the
// binary want. A binary replaced while it runs (make build during 'strata
// dev') reads as "PATH (deleted)": still the node.
func sameExecutable(exe, want string) bool {
	return exe == want || strings.TrimSuffix(exe, " (deleted)") == want
}

func portFree(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
