package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testtool"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// testPKI is a CA and the certificates a test issues from it, as files,
// with the CA's revocation list (empty until revoke).
type testPKI struct {
	t       *testing.T
	dir     string
	ca      *pki.CA
	caFile  string
	crlFile string
	revoked []*big.Int
}

func newTestPKI(t *testing.T, name string) *testPKI {
	t.Helper()
	ca, err := pki.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	p.caFile = filepath.Join(p.dir, "ca.crt")
	if err := os.WriteFile(p.caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	p.crlFile = filepath.Join(p.dir, "ca.crl")
	p.writeCRL()
	return p
}

// writeCRL publishes the CA's revocation list (by rename: nodes re-read
// it on change and must not see it half written).
func (p *testPKI) writeCRL() {
	p.t.Helper()
	crl, err := p.ca.CRL(int64(len(p.revoked)+1), time.Hour, p.revoked...)
	if err != nil {
		p.t.Fatal(err)
	}
	tmp := p.crlFile + ".tmp"
	if err := os.WriteFile(tmp, crl, 0o644); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Rename(tmp, p.crlFile); err != nil {
		p.t.Fatal(err)
	}
}

// revoke adds f's certificate to the CA's revocation list.
func (p *testPKI) revoke(f pki.Files) {
	p.t.Helper()
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		p.t.Fatal(err)
	}
	cert, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		p.t.Fatal(err)
	}
	p.revoked = append(p.revoked, cert.SerialNumber)
	p.writeCRL()
}

// issue writes a certificate for role/name valid for 127.0.0.1 (an hour,
// unless req says otherwise) and returns its files.
func (p *testPKI) issue(req pki.Request) pki.Files {
	p.t.Helper()
	return p.issueFile(req, req.Role+"-"+req.Name)
}

// issueFile is issue writing files named by file.
func (p *testPKI) issueFile(req pki.Request, file string) pki.Files {
	p.t.Helper()
	if req.NotAfter.IsZero() {
		req.NotAfter = time.Now().Add(time.Hour)
	}
	req.Hosts = append(req.Hosts, "127.0.0.1", "localhost")
	certPEM, keyPEM, err := p.ca.Issue(req)
	if err != nil {
		p.t.Fatal(err)
	}
	f, err := pki.WriteFiles(p.dir, file, certPEM, keyPEM, p.caFile)
	if err != nil {
		p.t.Fatal(err)
	}
	f.CRL = p.crlFile
	return f
}

func tlsArgs(f pki.Files) []string {
	args := []string{"--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-file", f.CA}
	if f.CRL != "" {
		args = append(args, "--tls-crl-file", f.CRL)
	}
	return args
}

// tlsCluster is 3 metad members (Raft over TLS), 3 bookies and one broker
// with their own certificates (each named by its node's id), every link
// mutual TLS.
type tlsCluster struct {
	pki         *testPKI
	meta        *proctest.MetadCluster
	bookies     []*proctest.BookieNode
	bookieCerts []pki.Files
	broker      *proctest.BrokerNode
	brokerCert  pki.Files
	admin       *http.Client // HTTPS with an admin certificate: what a TLS node's /metrics asks for
	// provoked are the (principal, key) refusals the test asked for
	// (expectDenied).
	provoked [][2]string
}

// startTLSCluster starts it, every node with the extra flags too.
func startTLSCluster(t *testing.T, extra ...string) *tlsCluster {
	t.Helper()
	return startTLSClusterWith(t, 3, extra, nil)
}

// startTLSClusterWith starts a tlsCluster of n bookies, every node with
// the extra flags too, the bookies with bookieArgs as well.
func startTLSClusterWith(t *testing.T, n int, extra, bookieArgs []string) *tlsCluster {
	t.Helper()
	c := &tlsCluster{pki: newTestPKI(t, "strata e2e CA")}
	args := func(f pki.Files) []string { return append(tlsArgs(f), extra...) }
	c.meta = proctest.StartMetad(t, bins["metad"], 3, args(c.pki.issue(pki.Request{Role: pki.RoleMetad, Name: "metad"}))...)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("b%d", i)
		cert := c.pki.issue(pki.Request{Role: pki.RoleBookie, Name: id})
		c.bookieCerts = append(c.bookieCerts, cert)
		c.bookies = append(c.bookies, proctest.StartBookie(t, bins["bookie"], c.meta, id, append(args(cert), bookieArgs...)...))
	}
	c.brokerCert = c.pki.issue(pki.Request{Role: pki.RoleBroker, Name: "k1"})
	c.broker = proctest.StartBroker(t, bins["broker"], c.meta, "k1", args(c.brokerCert)...)
	c.admin = adminHTTPS(t, c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "metrics"}))
	t.Cleanup(func() { c.checkNodesNeverDenied(t) })
	return c
}

// metricValue reads a series of the /metrics of the node whose admin
// address is adminAddr, over TLS with the admin certificate.
func (c *tlsCluster) metricValue(adminAddr, series string) (float64, error) {
	return metricValueWith(c.admin, "https://"+adminAddr+"/metrics", series)
}

// client connects to the broker with files (zero: plaintext).
func (c *tlsCluster) client(ctx context.Context, t *testing.T, f pki.Files) (*client.Client, error) {
	return client.New(ctx, client.Config{Brokers: []string{c.broker.Listen}, ClientID: t.Name(), RequestTimeout: 5 * time.Second,
		TLSCAFile: f.CA, TLSCertFile: f.Cert, TLSKeyFile: f.Key})
}

// dial opens a raw gRPC connection to addr with files' certificate.
func dial(t *testing.T, addr string, f pki.Files) *grpc.ClientConn {
	t.Helper()
	creds, err := mtls.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, creds.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// wantDenied checks that err is PERMISSION_DENIED naming the role needed.
func wantDenied(t *testing.T, what string, err error, needs string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), needs) {
		t.Errorf("%s: %v; want PERMISSION_DENIED naming %q", what, err, needs)
	}
}

// TestTLS runs a cluster with mutual TLS on every link (client, broker,
// bookies, metad's gRPC and Raft), every node reading the CA's CRL: a good
// client produces and consumes; a plaintext client, one whose certificate
// comes from another CA, one with an expired certificate and one whose
// certificate was revoked (the CRL published while the cluster runs) are
// refused; certificates are checked per call by role; a Raft connection
// needs a metad certificate.
func TestTLS(t *testing.T) {
	skipShort(t)
	c := startTLSCluster(t)
	alice := c.pki.issue(pki.Request{Role: pki.RoleUser, Name: "alice"})
	// An admin certificate is a super-user: the data path without ACLs
	// (TestACL covers users and their ACLs).
	root := c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "root"})

	t.Run("good client", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := c.client(ctx, t, root)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		createTopic(t, cl, "secure", 2, nil)
		p, err := cl.NewProducer(client.ProducerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			if err := p.Produce(ctx, &client.Record{Topic: "secure", Partition: -1, Key: []byte(fmt.Sprint(i)), Value: []byte("v")}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := loadtest.Counts(loadtest.ReadAll(t, cl, "secure", 2)); got[0]+got[1] != 100 {
			t.Fatalf("consumed %v, want 100 records", got)
		}
	})

	other := newTestPKI(t, "another CA")
	mallory := other.issue(pki.Request{Role: pki.RoleAdmin, Name: "mallory"})
	mallory.CA = c.pki.caFile // trusts the cluster, presents a stranger's certificate
	mallory.CRL = c.pki.crlFile
	expired := c.pki.issue(pki.Request{Role: pki.RoleUser, Name: "old",
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, tc := range []struct {
		name  string
		files pki.Files
	}{
		{"plaintext client", pki.Files{}},
		{"certificate from another CA", mallory},
		{"expired certificate", expired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			cl, err := c.client(ctx, t, tc.files)
			if err == nil {
				cl.Close()
				t.Fatal("connected")
			}
			t.Logf("client refused: %v", err)
			// The same credentials on a raw connection: the handshake
			// fails (UNAVAILABLE), or, for a certificate the broker's CA
			// did not sign, which Go's TLS client then does not present,
			// the call arrives with no identity and is refused
			// (UNAUTHENTICATED: brokers also take password logins, so a
			// connection without a certificate is not refused outright).
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			cc := dial(t, c.broker.Listen, tc.files)
			_, err = brokerpb.NewBrokerClient(cc).Metadata(rctx, &brokerpb.MetadataRequest{})
			if code := status.Code(err); code != codes.Unavailable && code != codes.Unauthenticated {
				t.Fatalf("raw call: %v, want UNAVAILABLE or UNAUTHENTICATED", err)
			}
			t.Logf("raw call refused: %v", err)
		})
	}

	t.Run("revoked certificate", func(t *testing.T) {
		eve := c.pki.issue(pki.Request{Role: pki.RoleUser, Name: "eve"})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cl, err := c.client(ctx, t, eve)
		if err != nil {
			t.Fatalf("before the revocation: %v", err)
		}
		cl.Close()
		c.pki.revoke(eve)
		// Nodes look at the CRL file at most every second.
		testwait.UntilNil(t, 10*time.Second, "the revoked client refused", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			cl, err := c.client(ctx, t, eve)
			if err == nil {
				cl.Close()
				return errors.New("connected")
			}
			t.Logf("client refused: %v", err)
			return nil
		})
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		_, err = brokerpb.NewBrokerClient(dial(t, c.broker.Listen, eve)).Metadata(rctx, &brokerpb.MetadataRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("raw call: %v, want UNAVAILABLE", err)
		}
		t.Logf("raw call refused: %v", err)
		// Others are unaffected: the cluster's own links and alice.
		cl, err = c.client(ctx, t, alice)
		if err != nil {
			t.Fatalf("alice after eve's revocation: %v", err)
		}
		cl.Close()
	})

	t.Run("roles", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A broker's certificate may read metad but not change members.
		asBroker := metadpb.NewMetadClient(dial(t, c.meta.Members[0].Listen, c.brokerCert))
		if _, err := asBroker.Status(ctx, &metadpb.StatusRequest{}); err != nil {
			t.Fatalf("broker certificate, Status: %v", err)
		}
		_, err := asBroker.MemberAdd(ctx, &metadpb.MemberAddRequest{Id: "4", RaftAddress: "127.0.0.1:1"})
		wantDenied(t, "broker certificate, MemberAdd", err, "metad or admin")
		_, err = asBroker.MemberRemove(ctx, &metadpb.MemberRemoveRequest{Id: "3"})
		wantDenied(t, "broker certificate, MemberRemove", err, "metad or admin")

		// A user's certificate may call no bookie RPC, nor metad.
		asUser := bookiepb.NewBookieClient(dial(t, c.bookies[0].Listen, alice))
		_, err = asUser.ReadEntry(ctx, &bookiepb.ReadEntryRequest{})
		wantDenied(t, "user, ReadEntry", err, "broker or bookie")
		_, err = asUser.ReadLAC(ctx, &bookiepb.ReadLACRequest{})
		wantDenied(t, "user, ReadLAC", err, "broker or bookie")
		_, err = asUser.Fence(ctx, &bookiepb.FenceRequest{})
		wantDenied(t, "user, Fence", err, "broker or bookie")
		_, err = asUser.WriteLAC(ctx, &bookiepb.WriteLACRequest{})
		wantDenied(t, "user, WriteLAC", err, "broker or admin")
		_, err = asUser.DeleteLedger(ctx, &bookiepb.DeleteLedgerRequest{})
		wantDenied(t, "user, DeleteLedger", err, "broker or admin")
		_, err = asUser.Info(ctx, &bookiepb.InfoRequest{})
		wantDenied(t, "user, Info", err, "broker or bookie")
		if s, err := asUser.AddEntries(ctx); err == nil {
			_, err = s.Recv()
			wantDenied(t, "user, AddEntries", err, "broker or bookie")
		} else {
			wantDenied(t, "user, AddEntries", err, "broker or bookie")
		}
		if s, err := asUser.ReadEntries(ctx, &bookiepb.ReadEntriesRequest{}); err == nil {
			_, err = s.Recv()
			wantDenied(t, "user, ReadEntries", err, "broker or bookie")
		} else {
			wantDenied(t, "user, ReadEntries", err, "broker or bookie")
		}
		_, err = metadpb.NewMetadClient(dial(t, c.meta.Members[0].Listen, alice)).Put(ctx, &metadpb.PutRequest{Key: "x"})
		wantDenied(t, "user, metad Put", err, "metad or bookie or broker or admin")
		// Denials are counted.
		testwait.UntilNil(t, 5*time.Second, "denials counted", func() error {
			v, err := c.metricValue(c.bookies[0].AdminAddr, `strata_bookie_rpc_denied_total{method="/strata.bookie.v1.Bookie/Fence",role="user"}`)
			if err == nil && v != 1 {
				err = fmt.Errorf("counter %v, want 1", v)
			}
			return err
		})
	})

	t.Run("raft needs a metad certificate", func(t *testing.T) {
		creds, err := mtls.Load(c.brokerCert)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tls.Dial("tcp", c.meta.Members[0].RaftAddr, creds.ClientTLS("127.0.0.1", nil))
		if err == nil {
			// TLS 1.3: the server judges the client's certificate after the
			// client's side of the handshake; it answers with an alert.
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a broker certificate on the Raft port: %v; want the connection refused", err)
		}
		t.Logf("refused: %v", err)
	})
}

// TestTLSRotation replaces the broker's certificate files with newly
// issued ones while a producer runs: no record fails, and new connections
// are served the new certificate without a restart.
func TestTLSRotation(t *testing.T) {
	skipShort(t)
	c := startTLSCluster(t)
	alice := c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "alice"}) // a super-user: no ACLs needed
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := c.client(ctx, t, alice)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	createTopic(t, cl, "rotate", 2, nil)
	load := loadtest.Start(t, cl, loadtest.Config{Topic: "rotate", Keys: 50, Rate: 500, Producer: client.ProducerConfig{}})
	load.AwaitAcks(t, 200, "the load before the rotation")

	creds, err := mtls.Load(alice)
	if err != nil {
		t.Fatal(err)
	}
	served := func() (*x509.Certificate, error) {
		conn, err := tls.Dial("tcp", c.broker.Listen, creds.ClientTLS("127.0.0.1", nil))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	old, err := served()
	if err != nil || old.Subject.CommonName != "k1" {
		t.Fatalf("before the rotation the broker serves %v (%v)", old, err)
	}
	// Issue the new certificate (the same identity: a node's certificate
	// is named by its id) and replace the files the broker reads, each by
	// rename, key first (a certificate that does not match its key yet is
	// not loaded).
	fresh := c.pki.issueFile(pki.Request{Role: pki.RoleBroker, Name: "k1"}, "broker-k1-rotated")
	for _, f := range [][2]string{{fresh.Key, c.brokerCert.Key}, {fresh.Cert, c.brokerCert.Cert}} {
		if err := os.Rename(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	atRotation := load.Acked()
	before := establishedTo(t, c.broker.Listen)
	if len(before) == 0 {
		t.Fatal("no connection to the broker before the rotation")
	}
	testwait.UntilNil(t, 10*time.Second, "new connections served the new certificate", func() error {
		cert, err := served()
		if err == nil && cert.SerialNumber.Cmp(old.SerialNumber) == 0 {
			err = fmt.Errorf("served the old certificate, serial %v", cert.SerialNumber)
		}
		return err
	})
	testwait.UntilNil(t, 20*time.Second, "records acknowledged after the rotation", func() error {
		if n := load.Acked(); n < atRotation+500 {
			return fmt.Errorf("%d acknowledged, %d at the rotation", n, atRotation)
		}
		return nil
	})
	// No reconnect storm: the connections open before the rotation are
	// still the ones in use (a rotation applies to new handshakes only).
	after := establishedTo(t, c.broker.Listen)
	for conn := range before {
		if !after[conn] {
			t.Errorf("connection from %s to the broker was dropped by the rotation", conn)
		}
	}
	acks := load.Finish(t).Acks // fails the test on any record error
	t.Logf("%d records acknowledged, %d of them after the rotation, none failed", len(acks), len(acks)-atRotation)
	// A client connecting now works with the rotated broker.
	cl2, err := c.client(ctx, t, alice)
	if err != nil {
		t.Fatalf("a new client after the rotation: %v", err)
	}
	cl2.Close()
}

// TestInsecureListenerRefused: a node asked to listen on a non-loopback
// address without TLS refuses to start, unless --insecure is given.
func TestInsecureListenerRefused(t *testing.T) {
	skipShort(t)
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bins[args[0]], args[1:]...).CombinedOutput()
		return string(out), err
	}
	anyAddr := func() string { return strings.Replace(proctest.FreeAddr(t), "127.0.0.1", "0.0.0.0", 1) }
	for _, args := range [][]string{
		{"metad", "--id", "1", "--data-dir", t.TempDir(), "--listen", anyAddr(), "--raft-listen", proctest.FreeAddr(t),
			"--admin-listen", proctest.FreeAddr(t), "--peers", "1=127.0.0.1:1"},
		{"bookie", "--id", "b1", "--data-dir", t.TempDir(), "--listen", proctest.FreeAddr(t), "--admin-listen", anyAddr(),
			"--metad", "127.0.0.1:1"},
		{"broker", "--id", "k1", "--listen", anyAddr(), "--admin-listen", proctest.FreeAddr(t), "--metad", "127.0.0.1:1"},
	} {
		out, err := run(args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || !strings.Contains(out, "non-loopback") || !strings.Contains(out, "--insecure") {
			t.Errorf("%s on 0.0.0.0 without TLS: %v\n%s", args[0], err, out)
		}
	}
	// With --insecure the same metad starts.
	m := &proctest.MetadMember{ID: "1", Listen: anyAddr(), RaftAddr: proctest.FreeAddr(t), AdminAddr: proctest.FreeAddr(t), DataDir: t.TempDir()}
	m.Process = proctest.Start(t, "metad-insecure", bins["metad"], "--id", "1", "--data-dir", m.DataDir, "--listen", m.Listen,
		"--raft-listen", m.RaftAddr, "--admin-listen", m.AdminAddr, "--peers", "1="+m.RaftAddr, "--insecure")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	m.Stop(10 * time.Second)
}

// TestDevTLS runs `strata dev --tls`: every node starts with its own
// certificate, the profile carries the admin certificate, and the CLI
// works through it with no flags; a plaintext CLI is refused. The Kafka
// listener speaks TLS and serves a client with the admin certificate or a
// SCRAM user (checkDevKafkaTLS).
func TestDevTLS(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "profile.json")
	env := []string{"STRATA_PROFILE=" + profile, "STRATA_METAD=", "STRATA_BROKER=", "PATH=" + empty, "GOPATH=" + empty}
	clusterDir := filepath.Join(dir, "cluster")
	ports, _ := devPortFlags(t)
	d := startDev(t, clusterDir, env, append(ports, "--tls", "--metad", "1", "--brokers", "1")...)
	d.waitFor("cluster ready", 60*time.Second)
	d.waitFor("tls:     mutual TLS", 5*time.Second)
	st, err := devcluster.LoadState(clusterDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if !strings.Contains(strings.Join(n.Args, " "), "--tls-cert-file") {
			t.Errorf("%s runs without TLS: %v", n.Name, n.Args)
		}
	}
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bins["strata"], args...)
		cmd.Env = append(cmd.Environ(), env...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("strata %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("", "meta", "put", "/dev", "secure")
	run("", "topic", "create", "secure", "-p", "1")
	testwait.UntilNil(t, 20*time.Second, "produce through the profile's certificate", func() error {
		cmd := exec.Command(bins["strata"], "produce", "secure")
		cmd.Env = append(cmd.Environ(), env...)
		cmd.Stdin = strings.NewReader("one\ntwo\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	if out := run("", "consume", "secure", "-n", "2", "-f", "%v\n"); !strings.Contains(out, "one\ntwo") {
		t.Fatalf("consumed %q", out)
	}
	run("s3cret\n", "user", "create", "alice", "--password-stdin")
	checkDevKafkaTLS(t, d, st, clusterDir, "alice", "s3cret")
	// Without the profile (plaintext) the same cluster refuses the CLI.
	plain := []string{"STRATA_PROFILE=" + filepath.Join(dir, "none.json"), "STRATA_METAD=" + st.Nodes[0].Listen}
	if out, errOut, code := strata(t, append(append([]string{}, env...), plain...), "--timeout", "3s", "meta", "get", "/dev"); code == 0 {
		t.Fatalf("a plaintext CLI read metad: %q %q", out, errOut)
	}
	// Each node's certificate lets it do its work: no metad key refused.
	for _, n := range st.Nodes {
		if out, err := os.ReadFile(n.LogFile); err != nil || strings.Contains(string(out), "metad key access denied") {
			t.Errorf("%s (log %s, %v) was refused a metad key", n.Name, n.LogFile, err)
		}
	}
	d.interrupt()
}

// TestTLSAdmin runs a metad member with --admin-tls and --admin-token-file
// on a non-loopback admin address (no --insecure needed with admin TLS):
// /readyz and /livez answer anyone holding the CA; /metrics and /debug/
// need the bearer token (401 without), or an admin certificate; plain
// HTTP gets nothing.
func TestTLSAdmin(t *testing.T) {
	skipShort(t)
	p := newTestPKI(t, "strata e2e CA")
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte("e2e-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	adminAddr := strings.Replace(proctest.FreeAddr(t), "127.0.0.1", "0.0.0.0", 1)
	raft := proctest.FreeAddr(t)
	m := proctest.Start(t, "metad-admin-tls", bins["metad"], append([]string{"--id", "1", "--data-dir", t.TempDir(),
		"--listen", proctest.FreeAddr(t), "--raft-listen", raft, "--admin-listen", adminAddr, "--peers", "1=" + raft,
		"--admin-tls", "--admin-token-file", tokenFile, "--enable-pprof"},
		tlsArgs(p.issue(pki.Request{Role: pki.RoleMetad, Name: "1"}))...)...)
	base := "https://" + strings.Replace(adminAddr, "0.0.0.0", "127.0.0.1", 1)

	caPEM, err := os.ReadFile(p.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	httpsClient := func(f pki.Files) *http.Client {
		cfg := &tls.Config{RootCAs: pool}
		if f.Cert != "" {
			cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	caOnly := httpsClient(pki.Files{})
	get := func(c *http.Client, path, token string) (int, error) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			return 0, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	testwait.UntilNil(t, 30*time.Second, "metad ready over admin TLS", func() error {
		if !m.Running() {
			t.Fatal("metad exited (a non-loopback admin address with --admin-tls must not need --insecure)")
		}
		code, err := get(caOnly, "/readyz", "")
		if err == nil && code != 200 {
			err = fmt.Errorf("readyz %d", code)
		}
		return err
	})
	for _, tc := range []struct {
		name   string
		client *http.Client
		path   string
		token  string
		want   int
	}{
		{"livez, no token", caOnly, "/livez", "", 200},
		{"readyz, no token", caOnly, "/readyz", "", 200},
		{"metrics, no token", caOnly, "/metrics", "", 401},
		{"metrics, wrong token", caOnly, "/metrics", "nope", 401},
		{"metrics, token", caOnly, "/metrics", "e2e-token", 200},
		{"pprof, no token", caOnly, "/debug/pprof/", "", 401},
		{"pprof, token", caOnly, "/debug/pprof/", "e2e-token", 200},
		{"metrics, admin certificate", httpsClient(p.issue(pki.Request{Role: pki.RoleAdmin, Name: "ops"})), "/metrics", "", 200},
		{"metrics, user certificate", httpsClient(p.issue(pki.Request{Role: pki.RoleUser, Name: "alice"})), "/metrics", "", 401},
	} {
		code, err := get(tc.client, tc.path, tc.token)
		if err != nil || code != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.name, code, err, tc.want)
		}
	}
	// Plain HTTP on the admin address gets no metrics.
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get(strings.Replace(base, "https://", "http://", 1) + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP served /metrics")
		}
	}
	// The token file is re-read on change.
	if err := os.WriteFile(tokenFile+".new", []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tokenFile+".new", tokenFile); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 10*time.Second, "the rotated token accepted", func() error {
		code, err := get(caOnly, "/metrics", "rotated")
		if err == nil && code != 200 {
			err = fmt.Errorf("metrics with the rotated token: %d", code)
		}
		return err
	})
	if code, err := get(caOnly, "/metrics", "e2e-token"); err != nil || code != 401 {
		t.Errorf("the old token after the rotation: %d %v, want 401", code, err)
	}
}

// establishedTo returns the peer addresses ("IP:port", hex as in
// /proc/net/tcp) of the established IPv4 TCP connections to the local
// address addr (host:port).
func establishedTo(t *testing.T, addr string) map[string]bool {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		// sl local_address rem_address st ...; state 01 is ESTABLISHED.
		if len(f) < 4 || f[3] != "01" || !strings.HasSuffix(f[1], fmt.Sprintf(":%04X", p)) {
			continue
		}
		out[f[2]] = true
	}
	return out
}

// checkDevKafkaTLS checks the Kafka listeners of a `strata dev --tls`
// cluster: TLS with the admin certificate the profile holds, TLS with
// SCRAM-SHA-512 as user (made by `strata user create`), and nothing for a
// plaintext client; then the kcat lines the summary prints, run as
// printed (the user's name and password filled in) when kcat is installed.
func checkDevKafkaTLS(t *testing.T, d *devRun, st *devcluster.State, clusterDir, user, password string) {
	t.Helper()
	d.waitFor("Try:", 5*time.Second) // the end of the summary, after its kcat lines
	files, err := devcluster.AdminTLSFiles(clusterDir)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := mtls.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	checkDevKafka(t, st, kgo.DialTLSConfig(creds.ClientTLS("127.0.0.1", nil)))
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	caOnly := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	checkDevKafka(t, st, kgo.DialTLSConfig(caOnly), kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()))

	plain, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(devcluster.KafkaBootstrap(st.Nodes), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if md, err := kadm.NewClient(plain).BrokerMetadata(ctx); err == nil {
		t.Fatalf("a plaintext Kafka client got metadata from a TLS cluster: %+v", md.Brokers)
	}

	t.Run("kcat", func(t *testing.T) {
		kcat := testtool.Kcat(t)
		var lines []string
		for _, l := range d.output {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "kcat -b ") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 2 {
			t.Fatalf("the summary gives %d kcat lines, want 2 (certificate, SASL):\n%s", len(lines), strings.Join(d.output, "\n"))
		}
		for _, l := range lines {
			l = strings.NewReplacer("kcat ", kcat+" ", "=NAME", "="+user, "=PASSWORD", "="+password).Replace(l)
			out, err := exec.Command("sh", "-c", l).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "1 brokers:") {
				t.Fatalf("%s: %v\n%s", l, err, out)
			}
		}
	})
}
