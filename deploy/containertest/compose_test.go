package containertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// composeFile is the compose file under test.
const composeFile = "../compose/docker-compose.yml"

// composeRun is one project of the compose file, its variables and the
// host ports it publishes.
type composeRun struct {
	t       *testing.T
	project string
	file    string // the compose file, absolute
	extra   string // an override file the test writes
	env     []string
	ports   map[string]string // variable -> host port
}

// TestComposeDefaultTLS runs deploy/compose/docker-compose.yml as it
// ships (mutual TLS, the CA and the certificates made by its own services,
// authentication on) with the image `make image-strata` builds. MinIO is
// left out: its image is not built here, so the brokers run without
// tiering. Then:
//   - the cli service (the admin certificate) creates a topic, produces
//     to it and consumes it back, creates a user and grants it READ;
//   - the user reads the topic over the Kafka listener (TLS + SCRAM);
//   - clients without credentials are refused: a plaintext client, a TLS
//     gRPC client with no certificate, a TLS Kafka client with no SASL,
//     the CLI without the admin certificate;
//   - each node mounts its own certificate volume and no other (not the
//     CA's, not the admin's);
//   - a second `up` keeps the CA and every certificate.
//
// Everything the project creates (containers, volumes, network) is
// removed at the end, failed or not.
func TestComposeDefaultTLS(t *testing.T) {
	requireDocker(t)
	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Skip("docker-compose (v1) not found: skipping the compose test")
	}
	c := startCompose(t)

	// The admin certificate's directory, copied out as docs/deploy.md says.
	admin := filepath.Join(t.TempDir(), "strata-admin")
	docker(t, "cp", c.containerID("certs")+":/tls/admin", admin)
	for _, f := range []string{"ca.crt", "admin.crt", "admin.key"} {
		if _, err := os.Stat(filepath.Join(admin, f)); err != nil {
			t.Fatalf("admin directory: %v", err)
		}
	}
	const topic = "orders"
	adminCLI(t, c, topic)

	caOnly := caOnlyTLS(t, filepath.Join(admin, "ca.crt"))
	kafka := []string{"127.0.0.1:" + c.ports["STRATA_BROKER1_KAFKA_PORT"], "127.0.0.1:" + c.ports["STRATA_BROKER2_KAFKA_PORT"]}
	t.Run("UserOverKafkaTLSAndSCRAM", func(t *testing.T) {
		readAsUser(t, kafka, caOnly, topic, 3)
	})
	t.Run("NoCredentialsRefused", func(t *testing.T) {
		brokers := []string{"127.0.0.1:" + c.ports["STRATA_BROKER1_PORT"], "127.0.0.1:" + c.ports["STRATA_BROKER2_PORT"]}
		refusedPlaintext(t, brokers)
		refusedTLSWithoutCertificate(t, brokers[0], caOnly)
		refusedKafkaWithoutSASL(t, kafka, caOnly)
		noCert := []string{"run", "--rm", "-T", "-e", "STRATA_TLS_CA=", "-e", "STRATA_TLS_CERT=", "-e", "STRATA_TLS_KEY=", "cli", "topic", "list"}
		if out, err := c.composeErr("", noCert...); err == nil {
			t.Fatalf("the CLI without the admin certificate listed topics:\n%s", out)
		}
	})
	t.Run("EachNodeHoldsOnlyItsOwnKey", func(t *testing.T) {
		for _, s := range []string{"metad-1", "metad-2", "metad-3", "bookie-1", "bookie-2", "bookie-3", "broker-1", "broker-2"} {
			mounts := strings.Fields(docker(t, "inspect", "-f", "{{range .Mounts}}{{.Name}} {{end}}", c.containerID(s)))
			var tlsVolumes []string
			for _, m := range mounts {
				if strings.HasPrefix(m, c.project+"_tls-") {
					tlsVolumes = append(tlsVolumes, strings.TrimPrefix(m, c.project+"_"))
				}
			}
			if !slices.Equal(tlsVolumes, []string{"tls-" + s}) {
				t.Errorf("%s mounts the certificate volumes %v, want only tls-%s (never tls-ca, tls-admin or another node's)", s, tlsVolumes, s)
			}
		}
	})
	t.Run("SecondUpKeepsCertificates", func(t *testing.T) {
		c.compose("up", "--no-recreate", "certs")
		if logs := c.compose("logs", "--no-color", "ca"); !strings.Contains(logs, "kept the CA") {
			t.Fatalf("a second up did not keep the CA:\n%s", logs)
		}
		if logs := c.compose("logs", "--no-color", "certs"); strings.Count(logs, "kept ") != 9 || strings.Count(logs, "issued ") != 9 {
			t.Fatalf("want 9 certificates issued by the first up and kept by the second:\n%s", logs)
		}
		if out, err := c.cli("", "topic", "describe", topic); err != nil {
			t.Fatalf("after a second up: %v\n%s", err, out)
		}
	})
}

// adminCLI: the cli service, with the admin certificate, creates topic,
// produces 3 records, reads them back, and makes the user alice with READ
// on topic, as docs/deploy.md does.
func adminCLI(t *testing.T, c *composeRun, topic string) {
	t.Helper()
	if out, err := c.cli("", "topic", "create", topic, "-p", "3"); err != nil {
		t.Fatalf("topic create with the admin certificate: %v\n%s", err, out)
	}
	if out, err := c.cli("k1:hello\nk2:world\nk3:again\n", "produce", topic, "-K:"); err != nil {
		t.Fatalf("produce: %v\n%s", err, out)
	}
	out, err := c.cli("", "consume", topic, "-e", "-f", "%k=%v\n")
	if err != nil {
		t.Fatalf("consume: %v\n%s", err, out)
	}
	got := strings.Fields(out)
	slices.Sort(got)
	if want := []string{"k1=hello", "k2=world", "k3=again"}; !slices.Equal(got, want) {
		t.Fatalf("consumed %q, want %q", got, want)
	}
	if out, err := c.cli("s3cret\n", "user", "create", "alice", "--password-stdin"); err != nil {
		t.Fatalf("user create: %v\n%s", err, out)
	}
	if out, err := c.cli("", "acl", "add", "--allow", "--principal", "User:alice", "--operation", "read", "--topic", topic); err != nil {
		t.Fatalf("acl add: %v\n%s", err, out)
	}
}

// readAsUser reads n records of topic as alice over the Kafka listener:
// TLS trusting the CA, SCRAM-SHA-512.
func readAsUser(t *testing.T, kafka []string, caOnly *tls.Config, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka...), kgo.DialTLSConfig(caOnly),
		kgo.SASL(scram.Auth{User: "alice", Pass: "s3cret"}.AsSha512Mechanism()),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records as alice: %v", len(seen), n, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)] = true })
	}
}

// startCompose brings the compose project up on a free /24 with every
// published port on a free loopback port, and waits for both brokers'
// health checks (an https probe of their admin addresses) to pass.
func startCompose(t *testing.T) *composeRun {
	t.Helper()
	file, err := filepath.Abs(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c := &composeRun{t: t, project: "strata-ct-" + hex.EncodeToString(b), file: file, ports: map[string]string{}}
	// The override file must outlive `down`, which reads it: a directory
	// of the test's own, removed after it (t.TempDir's goes first).
	dir, err := os.MkdirTemp("", c.project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	t.Cleanup(c.down)
	c.env = append(os.Environ(), "STRATA_IMAGE="+strataImage, "STRATA_SECURITY=", "STRATA_SUBNET="+freeSubnet(t))
	for _, v := range []string{"STRATA_BROKER1_PORT", "STRATA_BROKER2_PORT", "STRATA_BROKER1_ADMIN_PORT", "STRATA_BROKER2_ADMIN_PORT",
		"STRATA_BROKER1_KAFKA_PORT", "STRATA_BROKER2_KAFKA_PORT", "STRATA_METAD1_PORT", "STRATA_METAD2_PORT", "STRATA_METAD3_PORT",
		"STRATA_METAD1_ADMIN_PORT", "STRATA_METAD2_ADMIN_PORT", "STRATA_METAD3_ADMIN_PORT",
		"STRATA_BOOKIE1_ADMIN_PORT", "STRATA_BOOKIE2_ADMIN_PORT", "STRATA_BOOKIE3_ADMIN_PORT", "STRATA_MINIO_PORT"} {
		_, port, _ := net.SplitHostPort(proctest.FreeAddr(t))
		c.ports[v] = port
		c.env = append(c.env, v+"="+port)
	}
	// Without MinIO the brokers do not tier (an empty --tier-store).
	c.extra = filepath.Join(dir, "no-minio.yml")
	override := "version: \"2.4\"\nservices:\n" +
		"  broker-1: {environment: {STRATA_TIER_STORE: \"\"}}\n" +
		"  broker-2: {environment: {STRATA_TIER_STORE: \"\"}}\n"
	if err := os.WriteFile(c.extra, []byte(override), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The bookies pull in what they depend on: ca, certs (each run to
	// completion first) and metad. The brokers also wait for MinIO, so
	// they are started without their dependencies, which are up by then.
	c.compose("up", "-d", "bookie-1", "bookie-2", "bookie-3")
	c.compose("up", "-d", "--no-deps", "broker-1", "broker-2")
	testwait.UntilNil(t, 2*time.Minute, "brokers healthy", func() error {
		for _, s := range []string{"bookie-1", "bookie-2", "bookie-3", "broker-1", "broker-2"} {
			h, err := dockerErr("inspect", "-f", "{{.State.Health.Status}}", c.containerID(s))
			if err != nil || h != "healthy" {
				return fmt.Errorf("%s: %q %v", s, h, err)
			}
		}
		return nil
	})
	t.Logf("compose project %s healthy in %s", c.project, time.Since(start).Round(time.Millisecond))
	return c
}

// compose runs docker-compose on the project and returns its standard
// output.
func (c *composeRun) compose(args ...string) string {
	c.t.Helper()
	out, err := c.composeErr("", args...)
	if err != nil {
		c.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// composeErr runs docker-compose with stdin and returns its standard
// output; an error carries its standard error (compose's progress lines
// and the CLI's messages go there).
func (c *composeRun) composeErr(stdin string, args ...string) (string, error) {
	cmd := exec.Command("docker-compose", append([]string{"-p", c.project, "-f", c.file, "-f", c.extra}, args...)...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.String(), nil
}

// cli runs the strata CLI in a one-off container of the cli service, with
// stdin as its standard input.
func (c *composeRun) cli(stdin string, args ...string) (string, error) {
	return c.composeErr(stdin, append([]string{"run", "--rm", "-T", "cli"}, args...)...)
}

func (c *composeRun) containerID(service string) string {
	c.t.Helper()
	id := strings.TrimSpace(c.compose("ps", "-q", service))
	if id == "" {
		c.t.Fatalf("no container for %s", service)
	}
	return id
}

// down removes the project's containers (one-off ones too), volumes and
// network, after printing the nodes' last log lines when the test failed.
func (c *composeRun) down() {
	if c.t.Failed() {
		out, _ := c.composeErr("", "logs", "--no-color", "--tail", "30")
		c.t.Logf("---- compose logs (last 30 lines each)\n%s", out)
	}
	if out, err := c.composeErr("", "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
		c.t.Errorf("cleanup: docker-compose down: %v\n%s", err, out)
	}
	// Whatever down left (it failed, or the test ended half way).
	label := "label=com.docker.compose.project=" + c.project
	for _, kind := range []string{"container", "volume", "network"} {
		ids, _ := dockerErr(kind, "ls", "-q", "--filter", label)
		if kind == "container" {
			ids, _ = dockerErr("ps", "-aq", "--filter", label)
		}
		if ids == "" {
			continue
		}
		c.t.Errorf("cleanup: docker-compose down left %s(s) %s", kind, strings.Join(strings.Fields(ids), " "))
		rm := []string{kind, "rm"}
		if kind == "container" {
			rm = []string{"rm", "-f", "-v"}
		}
		if _, err := dockerErr(append(rm, strings.Fields(ids)...)...); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	}
}

// freeSubnet is a 10.x.y prefix whose /24 no Docker network uses now (a
// network is created and removed to find out).
func freeSubnet(t *testing.T) string {
	t.Helper()
	b := make([]byte, 2)
	for range 20 {
		_, _ = rand.Read(b)
		prefix := fmt.Sprintf("10.%d.%d", 200+int(b[0])%50, b[1])
		name := "strata-ct-probe-" + hex.EncodeToString(b)
		if _, err := dockerErr("network", "create", "--subnet", prefix+".0/24", name); err == nil {
			docker(t, "network", "rm", name)
			return prefix
		}
	}
	t.Fatal("no free /24 under 10.200.0.0/13")
	return ""
}

func caOnlyTLS(t *testing.T, caFile string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s: no certificate", caFile)
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
}

// refusedPlaintext: a client without TLS gets nothing from the brokers.
func refusedPlaintext(t *testing.T, brokers []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cl, err := client.New(ctx, client.Config{Brokers: brokers, RequestTimeout: 2 * time.Second}); err == nil {
		cl.Close()
		t.Fatal("a plaintext client got the brokers' metadata")
	}
}

// refusedTLSWithoutCertificate: TLS with the right CA but neither a
// certificate nor a password is UNAUTHENTICATED.
func refusedTLSWithoutCertificate(t *testing.T, broker string, caOnly *tls.Config) {
	t.Helper()
	conn, err := grpc.NewClient(broker, grpc.WithTransportCredentials(credentials.NewTLS(caOnly)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = brokerpb.NewBrokerClient(conn).DescribeCluster(ctx, &brokerpb.DescribeClusterRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("DescribeCluster over TLS without credentials: %v, want UNAUTHENTICATED", err)
	}
}

// refusedKafkaWithoutSASL: over TLS without a certificate or a SASL login
// the Kafka listener answers nothing but the handshake APIs.
func refusedKafkaWithoutSASL(t *testing.T, kafka []string, caOnly *tls.Config) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka...), kgo.DialTLSConfig(caOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if md, err := kadm.NewClient(cl).BrokerMetadata(ctx); err == nil {
		t.Fatalf("a Kafka client without credentials got metadata: %+v", md.Brokers)
	}
}
