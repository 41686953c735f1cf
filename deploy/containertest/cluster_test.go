package containertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/testwait"
)

// Image names `make images` builds (IMAGE_TAG=dev).
const (
	strataImage = "strata:dev"
	labelKey    = "strata-containertest"
)

// node is one container of the cluster.
type node struct {
	service string // metad-1, bookie-2, broker-1
	role    string // metad, bookie, broker
	ip      string
	env     map[string]string
}

func (n node) grpcAddr() string {
	switch n.role {
	case "metad":
		return n.ip + ":7001"
	case "bookie":
		return n.ip + ":7301"
	}
	return n.ip + ":9092"
}

// kafkaAddr is a broker's Kafka protocol listener, advertised as it is
// (the host reaches container addresses).
func (n node) kafkaAddr() string { return n.ip + ":9093" }

func (n node) adminAddr() string {
	switch n.role {
	case "metad":
		return n.ip + ":7201"
	case "bookie":
		return n.ip + ":7401"
	}
	return n.ip + ":9192"
}

// cluster is a running set of containers on a network of their own.
type cluster struct {
	t       *testing.T
	id      string // random, in every name
	network string
	prefix  string // "10.x.y": the network is prefix.0/24
	nodes   map[string]node
}

func (c *cluster) container(service string) string { return "strata-ct-" + c.id + "-" + service }

func (c *cluster) brokers() []string {
	return []string{c.nodes["broker-1"].grpcAddr(), c.nodes["broker-2"].grpcAddr()}
}

func (c *cluster) metadEndpoints() string {
	var eps []string
	for i := 1; i <= 3; i++ {
		eps = append(eps, c.nodes[fmt.Sprintf("metad-%d", i)].grpcAddr())
	}
	return strings.Join(eps, ",")
}

var imagesOnce struct {
	sync.Once
	err error
}

// requireDocker skips the test without Docker or with -short, and builds
// the images once per run.
func requireDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the container tests")
	}
	if runtime.GOOS != "linux" {
		t.Skip("container tests need Linux (the host dials container addresses)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker not found: skipping the container tests")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("docker is not usable (%v: %s): skipping the container tests", err, bytes.TrimSpace(out))
	}
	imagesOnce.Do(func() {
		if os.Getenv("STRATA_CONTAINERTEST_NO_BUILD") == "1" {
			return
		}
		root, err := filepath.Abs("../..")
		if err != nil {
			imagesOnce.err = err
			return
		}
		start := time.Now()
		cmd := exec.Command("make", "-C", root, "image-strata")
		out, err := cmd.CombinedOutput()
		if err != nil {
			imagesOnce.err = fmt.Errorf("make image-strata: %v\n%s", err, out)
			return
		}
		t.Logf("make image-strata: %s", time.Since(start).Round(time.Second))
	})
	if imagesOnce.err != nil {
		t.Fatal(imagesOnce.err)
	}
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := dockerErr(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func dockerErr(args ...string) (string, error) {
	cmd := exec.Command("docker", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}

// startCluster starts 3 metad, 4 bookies and 2 brokers and waits until
// every node is ready and the brokers answer. Everything it creates is
// removed when t ends.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	requireDocker(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c := &cluster{t: t, id: hex.EncodeToString(b), nodes: map[string]node{}}
	c.network = "strata-ct-" + c.id
	t.Cleanup(c.remove)
	// A /24 of 10.x.y.0 that no other network uses: try a few at random.
	var err error
	for range 20 {
		_, _ = rand.Read(b)
		c.prefix = fmt.Sprintf("10.%d.%d", 200+int(b[0])%50, b[1])
		_, err = dockerErr("network", "create", "--label", labelKey+"="+c.id, "--subnet", c.prefix+".0/24", c.network)
		if err == nil || !strings.Contains(err.Error(), "overlap") {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	ip := func(n int) string { return fmt.Sprintf("%s.%d", c.prefix, n) }
	var peers []string
	for i := 1; i <= 3; i++ {
		peers = append(peers, fmt.Sprintf("%d=%s:7101", i, ip(10+i)))
	}
	for i := 1; i <= 4; i++ {
		c.nodes[fmt.Sprintf("bookie-%d", i)] = node{service: fmt.Sprintf("bookie-%d", i), role: "bookie", ip: ip(20 + i), env: map[string]string{
			"STRATA_ID": fmt.Sprintf("b%d", i), "STRATA_LISTEN": ip(20+i) + ":7301", "STRATA_ADMIN_LISTEN": ip(20+i) + ":7401",
			// Re-replication starts soon after a bookie is gone, so a test
			// sees it; a fourth bookie gives it somewhere to copy to.
			"STRATA_AUTORECOVERY_GRACE": "5s", "STRATA_AUTORECOVERY_INTERVAL": "2s",
		}}
	}
	for i := 1; i <= 3; i++ {
		c.nodes[fmt.Sprintf("metad-%d", i)] = node{service: fmt.Sprintf("metad-%d", i), role: "metad", ip: ip(10 + i), env: map[string]string{
			"STRATA_ID": fmt.Sprint(i), "STRATA_LISTEN": ip(10+i) + ":7001", "STRATA_RAFT_LISTEN": ip(10+i) + ":7101",
			"STRATA_ADMIN_LISTEN": ip(10+i) + ":7201", "STRATA_PEERS": strings.Join(peers, ","),
		}}
	}
	for i := 1; i <= 2; i++ {
		c.nodes[fmt.Sprintf("broker-%d", i)] = node{service: fmt.Sprintf("broker-%d", i), role: "broker", ip: ip(30 + i), env: map[string]string{
			"STRATA_ID": fmt.Sprintf("k%d", i), "STRATA_LISTEN": ip(30+i) + ":9092", "STRATA_ADMIN_LISTEN": ip(30+i) + ":9192",
			"STRATA_KAFKA_LISTEN":  ip(30+i) + ":9093",
			"STRATA_DRAIN_TIMEOUT": "5s", "STRATA_LAG_INTERVAL": "1s",
		}}
	}
	for _, s := range c.sortedServices() {
		c.run(s)
	}
	c.waitReady(90 * time.Second)
	return c
}

// run creates and starts the container of service.
func (c *cluster) run(service string) {
	n := c.nodes[service]
	args := []string{"run", "-d", "--name", c.container(service), "--hostname", service, "--label", labelKey + "=" + c.id,
		"--network", c.network, "--ip", n.ip,
		"-e", "STRATA_METAD=" + c.metadEndpoints(), "-e", "STRATA_BROKER=" + strings.Join(c.brokers(), ","),
		// The Go race detector is not in these binaries; keep their
		// logs short and readable in a failure dump.
		"-e", "STRATA_LOG_LEVEL=info",
		// Nodes listen on the network's addresses without TLS: these
		// scenarios are about faults, not security (the compose test,
		// TestComposeDefaultTLS, runs the secure default).
		"-e", "STRATA_INSECURE=true"}
	for k, v := range n.env {
		args = append(args, "-e", k+"="+v)
	}
	args = append(args, strataImage, n.role)
	docker(c.t, args...)
}

// waitReady waits until every node's /readyz answers 200 and a client
// bootstraps from the brokers.
func (c *cluster) waitReady(timeout time.Duration) {
	c.t.Helper()
	testwait.UntilNil(c.t, timeout, "every node ready", func() error {
		for name, n := range c.nodes {
			if !ready(n.adminAddr()) {
				return fmt.Errorf("%s (%s) not ready", name, n.adminAddr())
			}
		}
		return nil
	})
}

func ready(addr string) bool {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// remove deletes every container (and its volume) and the network, and
// dumps the containers' last log lines first when the test failed.
func (c *cluster) remove() {
	ids, _ := dockerErr("ps", "-aq", "--filter", "label="+labelKey+"="+c.id)
	if ids != "" {
		if c.t.Failed() {
			for _, s := range c.sortedServices() {
				out, _ := exec.Command("docker", "logs", "--tail", "40", c.container(s)).CombinedOutput()
				c.t.Logf("---- %s (last 40 lines)\n%s", s, out)
			}
		}
		args := append([]string{"rm", "-f", "-v"}, strings.Fields(ids)...)
		if _, err := dockerErr(args...); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	}
	if _, err := dockerErr("network", "inspect", c.network); err == nil {
		if _, err := dockerErr("network", "rm", c.network); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	}
}

func (c *cluster) sortedServices() []string {
	return []string{"metad-1", "metad-2", "metad-3", "bookie-1", "bookie-2", "bookie-3", "bookie-4", "broker-1", "broker-2"}
}

// disconnect cuts service off the network; the returned func reconnects
// it at its address (also run at cleanup if the test did not).
func (c *cluster) disconnect(service string) (reconnect func()) {
	c.t.Helper()
	docker(c.t, "network", "disconnect", c.network, c.container(service))
	var once sync.Once
	reconnect = func() {
		once.Do(func() {
			docker(c.t, "network", "connect", "--ip", c.nodes[service].ip, c.network, c.container(service))
		})
	}
	return reconnect
}

func (c *cluster) kill(service string)  { docker(c.t, "kill", c.container(service)) }
func (c *cluster) start(service string) { docker(c.t, "start", c.container(service)) }

// restart stops service cleanly (SIGTERM, so a broker drains) and starts it.
func (c *cluster) restart(service string) {
	docker(c.t, "restart", "-t", "20", c.container(service))
}

// exec runs the strata CLI inside service's container (its STRATA_METAD
// and STRATA_BROKER name the cluster).
func (c *cluster) exec(service string, args ...string) (string, error) {
	return dockerErr(append([]string{"exec", c.container(service), "strata"}, args...)...)
}

func (c *cluster) client(ctx context.Context) *client.Client {
	c.t.Helper()
	cl, err := client.New(ctx, client.Config{Brokers: c.brokers(), ClientID: "containertest", RequestTimeout: 3 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}
