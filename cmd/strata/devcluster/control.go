package devcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The control socket: `strata dev start NODE` is a short-lived command,
// and a node it started itself would either die when it exits (tied to
// it) or outlive a `strata dev` that is killed. So it asks the running
// `strata dev` to start the node instead, over DIR/dev.sock; the node is
// then that process's child like every other, and dies with it.
//
// The protocol is one line each way per connection:
//
//	start NAME\n      the request: start node NAME of DIR/cluster.json
//	ok PID\n          the node was started with pid PID (and recorded)
//	error TEXT\n      it was not, because TEXT
const (
	// ControlSocket is the socket's name in the cluster directory.
	ControlSocket = "dev.sock"
	// controlTimeout bounds one request: reading it, starting the node
	// and answering (not the node's start-up: the caller waits for that).
	controlTimeout = 10 * time.Second
	// maxControlLine bounds a request or an answer.
	maxControlLine = 1024
	// maxSocketPath is the longest socket path bound or dialled as it is
	// (sun_path holds 108 bytes on Linux, 104 on the BSDs).
	maxSocketPath = 100
)

// errNoSupervisor is returned by askSupervisor when no `strata dev`
// answers on the directory's control socket.
var errNoSupervisor = errors.New("devcluster: no 'strata dev' answers for this directory")

// controlServer serves a cluster directory's control socket for Run.
type controlServer struct {
	dir  string
	path string // DIR/dev.sock, removed on Close
	ln   *net.UnixListener
	done chan struct{} // closed when serve returns
}

// listenControl listens on DIR/dev.sock (owner-only) and serves it until
// Close. A socket left by a `strata dev` that was killed is replaced; one
// that answers belongs to another `strata dev`, and listenControl refuses
// to take it.
func listenControl(dir string) (*controlServer, error) {
	if supervisorAnswers(dir) {
		return nil, fmt.Errorf("devcluster: another 'strata dev' runs for %s", dir)
	}
	path := filepath.Join(dir, ControlSocket)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	addr, release, err := controlAddr(dir)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	release()
	if err != nil {
		return nil, fmt.Errorf("devcluster: control socket: %w", err)
	}
	// Close removes the socket by its real path: addr may name it through
	// a descriptor that is closed (and its number reused) by then.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	s := &controlServer{dir: dir, path: path, ln: ln, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

// Close stops serving, waits for a request in progress and removes the
// socket.
func (s *controlServer) Close() error {
	err := s.ln.Close()
	<-s.done
	if rmErr := os.Remove(s.path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && err == nil {
		err = rmErr
	}
	return err
}

// serve answers requests one at a time until the listener is closed.
func (s *controlServer) serve() {
	defer close(s.done)
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A connection that failed before it was accepted, or no
			// descriptor left: try again shortly, not in a hot loop.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		s.handle(conn)
	}
}

// handle answers one connection's request.
func (s *controlServer) handle(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(controlTimeout))
	line, err := bufio.NewReader(io.LimitReader(conn, maxControlLine)).ReadString('\n')
	if err != nil {
		return // a probe (supervisorAnswers), or a client gone
	}
	name, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "start ")
	if !ok {
		fmt.Fprintf(conn, "error unknown request %q\n", strings.TrimSpace(line))
		return
	}
	pid, err := s.start(name)
	if err != nil {
		fmt.Fprintf(conn, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	fmt.Fprintf(conn, "ok %d\n", pid)
}

// start starts node name of the directory's state file, tied to this
// process, and records its pid.
func (s *controlServer) start(name string) (int, error) {
	st, err := LoadState(s.dir)
	if err != nil {
		return 0, err
	}
	n, err := st.Node(name)
	if err != nil {
		return 0, err
	}
	if err := startRecorded(st, n, true); err != nil {
		return 0, err
	}
	return n.PID, nil
}

// startRecorded starts n, a node of st that must not be running (tied as
// Start, or free to outlive this process), and saves st with its pid. A
// node whose pid cannot be recorded is stopped again.
func startRecorded(st *State, n *Node, tied bool) error {
	if Signal(*n, 0) == nil {
		return fmt.Errorf("%s is already running (pid %d)", n.Name, n.PID)
	}
	if err := start(n, tied); err != nil {
		return err
	}
	if err := st.Save(); err != nil {
		_ = Stop(*n, StopGrace)
		return err
	}
	return nil
}

// askSupervisor asks the `strata dev` serving dir to start node name and
// returns the node's pid. It returns errNoSupervisor (wrapped) when none
// answers, and that process's reason when it did not start the node.
func askSupervisor(ctx context.Context, dir, name string) (int, error) {
	addr, release, err := controlAddr(dir)
	if err != nil {
		return 0, fmt.Errorf("%w (%v)", errNoSupervisor, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", addr)
	release()
	if err != nil {
		return 0, fmt.Errorf("%w (%v)", errNoSupervisor, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(controlTimeout + 5*time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	if _, err := fmt.Fprintf(conn, "start %s\n", name); err != nil {
		return 0, fmt.Errorf("devcluster: asking 'strata dev' to start %s: %w", name, err)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, maxControlLine)).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("devcluster: 'strata dev' did not answer the start of %s: %w", name, err)
	}
	line = strings.TrimSuffix(line, "\n")
	if text, ok := strings.CutPrefix(line, "error "); ok {
		return 0, fmt.Errorf("devcluster: 'strata dev' did not start %s: %s", name, text)
	}
	if p, ok := strings.CutPrefix(line, "ok "); ok {
		if pid, err := strconv.Atoi(p); err == nil && pid > 0 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("devcluster: 'strata dev' answered %q to the start of %s", line, name)
}

// supervisorAnswers reports whether a `strata dev` serves dir's control
// socket. The probe sends no request, which the server takes as none.
func supervisorAnswers(dir string) bool {
	addr, release, err := controlAddr(dir)
	if err != nil {
		return false
	}
	defer release()
	conn, err := net.DialTimeout("unix", addr, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// controlAddr is the address to bind or dial for dir's control socket,
// and what to call once that is done. A path longer than a socket address
// holds is named through /proc/self/fd/N/, N a descriptor of dir held
// open until release, where /proc has it.
func controlAddr(dir string) (addr string, release func(), err error) {
	path := filepath.Join(dir, ControlSocket)
	if len(path) <= maxSocketPath {
		return path, func() {}, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return "", nil, fmt.Errorf("devcluster: %w", err)
	}
	fdDir := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if fi, err := os.Stat(fdDir); err != nil || !fi.IsDir() {
		f.Close()
		return "", nil, fmt.Errorf("devcluster: control socket path %s is longer than %d bytes", path, maxSocketPath)
	}
	return fdDir + "/" + ControlSocket, func() { f.Close() }, nil
}
