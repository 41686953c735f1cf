package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

// freeBase finds a metad base port whose client, raft and admin ports
// (base..base+2, +100, +200) and bookie ports (+300, +400) are all free,
// in a span of 1,000 ports no other test binary draws from (proctest.Span),
// which also holds the brokers' (+500, +600), MinIO's (+700, +701) and the
// brokers' Kafka listeners (+800) of devPortFlags.
func freeBase(t *testing.T) int {
	t.Helper()
	for range 10 {
		base := proctest.Span(t, 1000)
		ok := true
		for _, off := range []int{0, 1, 2, 100, 101, 102, 200, 201, 202, 300, 301, 302, 400, 401, 402} {
			if !portFree(fmt.Sprintf("127.0.0.1:%d", base+off)) {
				ok = false
				break
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// devPortFlags returns `strata dev` flags that move every port off the
// defaults to free ones, so that tests do not collide with a developer's
// cluster (or MinIO) or with each other; the MinIO port is the returned int.
func devPortFlags(t *testing.T) ([]string, int) {
	t.Helper()
	base := freeBase(t)
	minioPort := freePorts(t, base+700, 1, 1) // S3 and console (+1)
	return []string{"--metad-port", fmt.Sprint(base), "--bookie-port", fmt.Sprint(base + 300),
		"--broker-port", fmt.Sprint(freePorts(t, base+500, 2, 100)), "--minio-port", fmt.Sprint(minioPort),
		"--kafka-port", fmt.Sprint(freePorts(t, base+800, 2, 0))}, minioPort
}

// checkDevKafka checks that the Kafka listeners of the dev cluster st
// answer: franz-go's Metadata, sent to the Kafka bootstrap list with opts
// (TLS, SASL), lists every broker at the Kafka address the state file
// records (waited for: a broker is listed once it has registered it).
func checkDevKafka(t *testing.T, st *devcluster.State, opts ...kgo.Opt) {
	t.Helper()
	bootstrap := devcluster.KafkaBootstrap(st.Nodes)
	want := strings.Split(bootstrap, ",")
	slices.Sort(want)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(want...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	testwait.UntilNil(t, 20*time.Second, "Kafka metadata from "+bootstrap, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		md, err := adm.BrokerMetadata(ctx)
		if err != nil {
			return err
		}
		var got []string
		for _, b := range md.Brokers {
			got = append(got, net.JoinHostPort(b.Host, fmt.Sprint(b.Port)))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("Kafka metadata lists brokers %v, want %v", got, want)
		}
		return nil
	})
}

// devRun is a `strata dev` process whose output a test reads line by line.
type devRun struct {
	t      *testing.T
	cmd    *exec.Cmd
	dir    string // its --dir
	lines  chan string
	output []string // the lines read so far
}

// startDev starts `strata dev --dir dir` with the test's role binaries and
// env added to the environment; the test's cleanup interrupts it.
func startDev(t *testing.T, dir string, env []string, args ...string) *devRun {
	t.Helper()
	args = append([]string{"dev", "--dir", dir, "--bin-dir", filepath.Dir(bins["metad"])}, args...)
	d := &devRun{t: t, cmd: exec.Command(bins["strata"], args...), dir: dir, lines: make(chan string, 1000)}
	d.cmd.Env = append(d.cmd.Environ(), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGINT)
		_ = d.cmd.Wait()
	})
	go func() {
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
	}()
	return d
}

// waitFor reads output until a line contains substr, and returns it.
func (d *devRun) waitFor(substr string, timeout time.Duration) string {
	d.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				d.t.Fatalf("strata dev exited before %q:\n%s", substr, strings.Join(d.output, "\n"))
			}
			d.output = append(d.output, l)
			if strings.Contains(l, substr) {
				return l
			}
		case <-deadline:
			d.t.Fatalf("no %q within %s:\n%s", substr, timeout, strings.Join(d.output, "\n"))
		}
	}
}

// interrupt sends Ctrl-C's SIGINT and checks that every node listed in
// the state file has stopped.
func (d *devRun) interrupt() {
	d.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		d.t.Fatal(err)
	}
	d.waitFor("stopped", 30*time.Second)
	st, err := devcluster.LoadState(d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if devcluster.Signal(n, 0) == nil {
			d.t.Errorf("%s (pid %d) still running after Ctrl-C", n.Name, n.PID)
		}
	}
}

// brokerLogsSay waits until the log of every broker of the cluster in dir
// has a line holding all of substrs.
func brokerLogsSay(t *testing.T, dir string, substrs ...string) {
	t.Helper()
	st, err := devcluster.LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Role != devcluster.RoleBroker {
			continue
		}
		testwait.UntilNil(t, 10*time.Second, n.Name+" logs "+strings.Join(substrs, " "), func() error {
			data, err := os.ReadFile(n.LogFile)
			if err != nil {
				return err
			}
		lines:
			for _, l := range strings.Split(string(data), "\n") {
				for _, s := range substrs {
					if !strings.Contains(l, s) {
						continue lines
					}
				}
				return nil
			}
			return fmt.Errorf("no line with %q in %s", substrs, n.LogFile)
		})
	}
}

// TestDevCluster runs `strata dev` as a user would: the cluster comes up,
// the CLI works with no flags through the profile, every broker serves the
// Kafka protocol at the address the summary, the state file and `dev
// status` give (a record produced over Kafka is read by the CLI), a node
// can be killed and started again, and Ctrl-C stops every process. No
// minio binary can be found (PATH and GOPATH are empty directories), so
// the brokers tier to a local directory and strata dev says so.
// TestDevMinIO runs it with MinIO.
func TestDevCluster(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"STRATA_PROFILE=" + filepath.Join(dir, "profile.json"), "STRATA_METAD=", "PATH=" + empty, "GOPATH=" + empty}
	clusterDir := filepath.Join(dir, "cluster")
	ports, _ := devPortFlags(t)
	start := time.Now()
	d := startDev(t, clusterDir, env, ports...)
	tierURL := "file://" + filepath.Join(clusterDir, "tier")
	if l := d.waitFor("no minio binary", 10*time.Second); !strings.Contains(l, tierURL) || !strings.Contains(l, "make minio") {
		t.Fatalf("fallback line %q: want the directory %s and how to get MinIO", l, tierURL)
	}
	d.waitFor("cluster ready", 10*time.Second)
	t.Logf("strata dev ready in %s", time.Since(start).Round(time.Millisecond))
	d.waitFor("objects: "+tierURL+" (local directory", 5*time.Second)
	brokerLogsSay(t, clusterDir, `msg="tiered storage"`, tierURL)

	if out, errOut, code := strata(t, env, "meta", "put", "/dev", "works"); code != 0 {
		t.Fatalf("put through the profile: %d %s %s", code, out, errOut)
	}
	st, err := devcluster.LoadState(clusterDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 8 {
		t.Fatalf("state lists %d nodes, want 3 metad, 3 bookies and 2 brokers (no minio)", len(st.Nodes))
	}
	out, _, code := strata(t, env, "cluster", "bookies")
	if code != 0 || strings.Count(out, "writable") != 3 {
		t.Fatalf("cluster bookies: exit %d\n%s", code, out)
	}
	checkDevKafkaSeen(t, d, st, env)
	devDir := []string{"--dir", clusterDir}
	if _, errOut, code := strata(t, env, append([]string{"dev", "kill", "metad-1"}, devDir...)...); code != 0 {
		t.Fatalf("dev kill: %s", errOut)
	}
	d.waitFor("metad-1", 5*time.Second) // the supervisor notices
	if _, errOut, code := strata(t, env, append([]string{"dev", "start", "metad-1"}, devDir...)...); code != 0 {
		t.Fatalf("dev start: %s", errOut)
	}
	if out, _, code := strata(t, env, "meta", "get", "/dev"); code != 0 || out != "works\n" {
		t.Fatalf("get after restart: %d %q", code, out)
	}
	d.interrupt()
}

// checkDevKafkaSeen checks the dev cluster's Kafka listeners as a user
// meets them: the summary's kafka line, each broker's address in the state
// file and in `dev status`, Metadata over Kafka, and a record produced
// with a Kafka client that the CLI then reads over gRPC.
func checkDevKafkaSeen(t *testing.T, d *devRun, st *devcluster.State, env []string) {
	t.Helper()
	bootstrap := devcluster.KafkaBootstrap(st.Nodes)
	if n := strings.Count(bootstrap, ",") + 1; bootstrap == "" || n != 2 {
		t.Fatalf("state file: Kafka addresses %q, want one per broker", bootstrap)
	}
	if !slices.Contains(d.output, "  kafka:   "+bootstrap) {
		t.Fatalf("the summary does not list the Kafka bootstrap %s:\n%s", bootstrap, strings.Join(d.output, "\n"))
	}
	out, _, code := strata(t, env, "dev", "status", "--dir", d.dir)
	for _, n := range st.Nodes {
		if n.Role == devcluster.RoleBroker && (code != 0 || !strings.Contains(out, n.Kafka)) {
			t.Fatalf("dev status: exit %d, no Kafka address %s for %s:\n%s", code, n.Kafka, n.Name, out)
		}
	}
	checkDevKafka(t, st)

	if _, errOut, code := strata(t, env, "topic", "create", "over-kafka", "-p", "2"); code != 0 {
		t.Fatalf("topic create: %s", errOut)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "over-kafka", Key: []byte("k"), Value: []byte("from kcat's protocol")}).FirstErr(); err != nil {
		t.Fatalf("produce over Kafka: %v", err)
	}
	if out, errOut, code := strata(t, env, "consume", "over-kafka", "-e", "-f", "%k=%v\n"); code != 0 || out != "k=from kcat's protocol\n" {
		t.Fatalf("consume over gRPC what Kafka produced: exit %d %q %s", code, out, errOut)
	}
}
