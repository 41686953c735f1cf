package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/cmd/strata/internal/chaos/netfault"
)

// The cluster's shape: three metad members (a majority survives one
// fault), four bookies (one bookie down still leaves an ensemble of three
// to write to), three brokers and MinIO.
const (
	metads  = 3
	bookies = 4
	brokers = 3
)

// Timings the nodes run with: short leases and sessions so that a fault
// shows its recovery within seconds, and small tier objects uploaded soon,
// so that a run of a minute already reads history from the object store.
var (
	brokerArgs = []string{
		"--session-ttl", "4s", "--drain-timeout", "2s",
		"--tier-segment-bytes", "262144", "--tier-max-delay", "5s", "--tier-check-interval", "1s",
		"--retention-check-interval", "2s", "--compaction-check-interval", "2s",
	}
	// Journal files of 64 MiB: a bookie keeps room for a whole new one
	// beside its read-only threshold, which on a disk of a few GiB would
	// otherwise turn it read-only with a quarter of the disk free.
	bookieArgs = []string{"--lease-ttl", "3s", "--journal-max-file-bytes", "67108864"}
)

// cluster is a Strata cluster whose every node runs in a network namespace
// of its own on a bridge (netfault), with a disk of its own for each
// bookie (a loop-mounted file system that a fault can fill), so that a
// fault can kill, pause, cut off or starve any node.
type cluster struct {
	dir   string
	net   *netfault.Net
	disks map[string]*disk // by bookie name
	log   io.Writer

	closeOnce sync.Once
	mu        sync.Mutex
	st        *devcluster.State
	state     map[string]nodeState // by node name; absent: running
}

type nodeState int

const (
	running nodeState = iota
	killed
	paused
)

// nodeNames lists the cluster's nodes in devcluster's naming.
func nodeNames() []string {
	var names []string
	for i := 1; i <= metads; i++ {
		names = append(names, fmt.Sprintf("metad-%d", i))
	}
	for i := 1; i <= bookies; i++ {
		names = append(names, fmt.Sprintf("bookie-%d", i))
	}
	for i := 1; i <= brokers; i++ {
		names = append(names, fmt.Sprintf("broker-%d", i))
	}
	return append(names, devcluster.MinIOName)
}

// startCluster creates the network (named name), the bookies' disks and
// every node, and waits until all are ready. On error everything created
// is removed.
func startCluster(ctx context.Context, name, dir, binDir, minio string, log io.Writer) (_ *cluster, err error) {
	c := &cluster{dir: dir, disks: map[string]*disk{}, log: log, state: map[string]nodeState{}}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	netfault.Cleanup(name)
	if c.net, err = netfault.New(name); err != nil {
		return nil, err
	}
	o := devcluster.DefaultOptions()
	o.Dir, o.BinDir, o.MinIO = dir, binDir, minio
	o.Metad, o.Bookies, o.Brokers = metads, bookies, brokers
	o.Hosts, o.Netns = map[string]string{}, map[string]string{}
	for _, n := range nodeNames() {
		ip, err := c.net.AddHost(n)
		if err != nil {
			return nil, err
		}
		ns, err := c.net.Namespace(n)
		if err != nil {
			return nil, err
		}
		o.Hosts[n], o.Netns[n] = ip, ns
	}
	o.BrokerArgs = brokerArgs
	for i := 1; i <= bookies; i++ {
		name := fmt.Sprintf("bookie-%d", i)
		d, err := newDisk(filepath.Join(dir, "disks", name), filepath.Join(dir, name), diskBytes)
		if err != nil {
			return nil, err
		}
		c.disks[name] = d
	}
	o.BookieArgs = bookieArgs
	// Plaintext on the namespaces' private network (the nodes refuse it on
	// a non-loopback address unless told).
	o.Env = []string{"STRATA_INSECURE=true"}
	o.NodeEnv = map[string][]string{}
	for name := range c.disks {
		o.NodeEnv[name] = []string{diskFaultEnv(dir, name), clockFaultEnv(dir, name)}
	}
	for i := 1; i <= brokers; i++ {
		name := fmt.Sprintf("broker-%d", i)
		o.NodeEnv[name] = []string{clockFaultEnv(dir, name)}
	}
	if c.st, err = devcluster.Up(ctx, o, log); err != nil {
		return nil, err
	}
	return c, nil
}

// names lists the nodes of a role.
func (c *cluster) names(role string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.st.Nodes {
		if n.Role == role {
			out = append(out, n.Name)
		}
	}
	return out
}

// addrs lists the client addresses (kafka: the Kafka listeners) of a role.
func (c *cluster) addrs(role string, kafka bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.st.Nodes {
		if n.Role == role {
			if kafka {
				out = append(out, n.Kafka)
			} else {
				out = append(out, n.Listen)
			}
		}
	}
	return out
}

// kill sends SIGKILL to a running or paused node.
func (c *cluster) kill(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.st.Node(name)
	if err != nil {
		return err
	}
	if c.state[name] == killed {
		return nil
	}
	if err := devcluster.Signal(*n, syscall.SIGKILL); err != nil {
		return err
	}
	devcluster.WaitGone(*n, 10*time.Second)
	c.state[name] = killed
	return nil
}

// pause stops a running node with SIGSTOP.
func (c *cluster) pause(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.st.Node(name)
	if err != nil {
		return err
	}
	if c.state[name] != running {
		return nil
	}
	if err := devcluster.Signal(*n, syscall.SIGSTOP); err != nil {
		return err
	}
	c.state[name] = paused
	return nil
}

// revive brings a node back: SIGCONT for a paused one, a restart with
// its recorded arguments for a killed one (waiting until it is ready).
func (c *cluster) revive(ctx context.Context, name string) error {
	c.mu.Lock()
	n, err := c.st.Node(name)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	switch c.state[name] {
	case paused:
		delete(c.state, name)
		err := devcluster.Signal(*n, syscall.SIGCONT)
		c.mu.Unlock()
		return err
	case killed:
		if err := devcluster.Start(n); err != nil {
			c.mu.Unlock()
			return err
		}
		delete(c.state, name)
		started := *n
		c.mu.Unlock()
		return devcluster.WaitReady(ctx, started, 90*time.Second)
	}
	c.mu.Unlock()
	return nil
}

// supervise restarts, every superviseEvery until ctx ends, each node the
// nemesis believes running that has exited on its own, as systemd's
// Restart=always would: a bookie stops on a failed write or fsync, and one
// restarted onto a full disk cannot start until the disk has room.
func (c *cluster) supervise(ctx context.Context) {
	for sleep(ctx, superviseEvery) {
		c.mu.Lock()
		var gone []string
		for _, n := range c.st.Nodes {
			if c.state[n.Name] == running && exited(n) {
				c.state[n.Name] = killed
				gone = append(gone, n.Name)
			}
		}
		c.mu.Unlock()
		for _, name := range gone {
			fmt.Fprintf(c.log, "%s %s had exited; restarting it\n", stamp(), name)
			if err := c.revive(ctx, name); err != nil {
				fmt.Fprintf(c.log, "%s %s: %v\n", stamp(), name, err)
			}
		}
	}
}

const superviseEvery = 2 * time.Second

// exited reports whether n's process is gone. Only that: for a moment
// after a start the pid runs `ip netns exec`, not yet the node's binary,
// and devcluster.Check says it is another program; restarted then, a
// second copy of the node would start beside the first.
func exited(n devcluster.Node) bool {
	return errors.Is(devcluster.Check(n), devcluster.ErrNotRunning)
}

// reviveAll brings every killed, paused or exited node back.
func (c *cluster) reviveAll(ctx context.Context) error {
	c.mu.Lock()
	var names []string
	for _, n := range c.st.Nodes {
		switch {
		case c.state[n.Name] != running:
			names = append(names, n.Name)
		case exited(n): // on its own
			c.state[n.Name] = killed
			names = append(names, n.Name)
		}
	}
	c.mu.Unlock()
	slices.Sort(names)
	var errs []string
	for _, name := range names {
		if err := c.revive(ctx, name); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("chaos: revive: %s", strings.Join(errs, "; "))
	}
	return nil
}

// close stops every node and removes the network and the disks; a second
// call does nothing.
func (c *cluster) close() {
	c.closeOnce.Do(c.teardown)
}

func (c *cluster) teardown() {
	if c.st != nil {
		c.mu.Lock()
		for _, n := range c.st.Nodes {
			_ = devcluster.Signal(n, syscall.SIGCONT)
		}
		c.mu.Unlock()
		devcluster.Down(c.st, 5*time.Second)
	}
	for _, d := range c.disks {
		if err := d.remove(); err != nil {
			fmt.Fprintf(c.log, "chaos: %v\n", err)
		}
	}
	if c.net != nil {
		if err := c.net.Close(); err != nil {
			fmt.Fprintf(c.log, "chaos: network: %v\n", err)
		}
	}
}

// diskBytes is the size of each bookie's file system: room for a long
// soak's ledgers (the brokers tier them and delete their local copies
// after local.retention.ms), and small enough that a fault fills it in
// seconds. The image is sparse: it takes what is written.
const diskBytes = 4 << 30

// disk is a file system of its own, an ext4 image on a loop device
// mounted at a bookie's data directory: its fsyncs reach the machine's
// disk, and a fault can fill it (a ballast file) and free it again.
type disk struct {
	image, mount string
}

// newDisk creates an image of size bytes and mounts it at mount.
func newDisk(image, mount string, size int64) (*disk, error) {
	if err := os.MkdirAll(filepath.Dir(image), 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mount, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(image)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", image).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("chaos: mkfs.ext4 %s: %v: %s", image, err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", image, mount).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("chaos: mount %s (needs root and a loop device): %v: %s", image, err, out)
	}
	// A bookie adopts only an empty data directory.
	if err := os.Remove(filepath.Join(mount, "lost+found")); err != nil {
		return nil, err
	}
	return &disk{image: image, mount: mount}, nil
}

// ballast is the file that fills a disk.
func (d *disk) ballast() string { return filepath.Join(d.mount, "chaos-ballast") }

// fill writes a ballast file until the file system has no room left.
func (d *disk) fill() error {
	f, err := os.OpenFile(d.ballast(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if err == syscall.ENOSPC || strings.Contains(err.Error(), "no space") {
				return f.Sync()
			}
			return err
		}
	}
}

// free removes the ballast.
func (d *disk) free() error {
	err := os.Remove(d.ballast())
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// remove unmounts the file system and deletes its image.
func (d *disk) remove() error {
	if out, err := exec.Command("umount", "-l", d.mount).CombinedOutput(); err != nil {
		return fmt.Errorf("umount %s: %v: %s", d.mount, err, out)
	}
	return os.Remove(d.image)
}
