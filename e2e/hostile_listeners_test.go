package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/metadpb"
)

// Idle connections by the thousand, from one attacker address, to every
// listener of real processes (docs/security.md): each listener refuses
// what is over its caps, closes what completes no handshake in time, and
// keeps serving real clients, while the process's memory stays bounded.

const (
	// floodConns is how many idle connections each listener gets.
	floodConns = 1000
	// attackerIP is where they come from; the cluster's own traffic and
	// the real clients come from 127.0.0.1.
	attackerIP = "127.0.0.2"
	// floodGrowthBoundMiB bounds what a flood may add to a process's Go
	// heap in use (go_memstats_heap_inuse_bytes: what the runtime has
	// handed out, resident or not yet touched). Before the caps, 1,000
	// idle connections took it up by about 257 MiB on metad's Raft port,
	// plaintext or TLS (a 256 KiB read buffer each, before any
	// handshake), and by 271 MiB on a TLS broker's gRPC port (buffers
	// after a handshake that needs no certificate). Measured growths are
	// logged, with the resident set's.
	floodGrowthBoundMiB = 32
	// floodHandshakeTimeout is the nodes' --handshake-timeout here: the
	// connections the caps admit are closed after it.
	floodHandshakeTimeout = "4s"
)

// flood opens n TCP connections to addr from the loopback address ip and
// sends nothing; they are closed when the test ends (or by closeAll).
func flood(t *testing.T, ip, addr string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("flooding %s: %v", addr, err)
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() { closeAll(conns) })
	return conns
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

// waitClosedByServer waits until the server has closed every one of
// conns (a read ends with EOF or a reset).
func waitClosedByServer(t *testing.T, what string, conns []net.Conn, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i, c := range conns {
		_ = c.SetReadDeadline(deadline)
		_, err := io.Copy(io.Discard, c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%s: connection %d still open after %v: %v", what, i, timeout, err)
		}
	}
}

// memory is a process's Go heap in use and resident set, in MiB.
type memory struct{ heap, rss int64 }

func memoryOf(t *testing.T, p *proctest.Process, metric func(string) (float64, error)) memory {
	t.Helper()
	rss, _, err := rssKiB(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	heap, err := metric("go_memstats_heap_inuse_bytes")
	if err != nil {
		t.Fatal(err)
	}
	return memory{heap: int64(heap) >> 20, rss: rss >> 10}
}

func (m memory) max(o memory) memory { return memory{max(m.heap, o.heap), max(m.rss, o.rss)} }

// checkGrowth fails t when the heap grew past floodGrowthBoundMiB from
// before to peak.
func checkGrowth(t *testing.T, what string, before, peak memory) {
	t.Helper()
	t.Logf("%s: heap in use %d MiB before the flood, at most %d while it held (bound +%d); resident %d, at most %d",
		what, before.heap, peak.heap, floodGrowthBoundMiB, before.rss, peak.rss)
	if peak.heap-before.heap > floodGrowthBoundMiB {
		t.Errorf("%s: the flood grew the heap by %d MiB, bound %d", what, peak.heap-before.heap, floodGrowthBoundMiB)
	}
}

// listenerAttack is one listener under a flood.
type listenerAttack struct {
	name string
	addr string
	proc *proctest.Process
	// metric reads a series of the process's /metrics.
	metric func(series string) (float64, error)
	// refusals: the series counting refusals at the cap, and how many the
	// flood must add.
	refusals string
	want     float64
	// served is a real client's request, made while the flood holds.
	served func(ctx context.Context) error
	// idleClosed: the admitted connections are closed at the handshake
	// timeout (they never complete one).
	idleClosed bool
}

// run floods the listener and checks the refusals, the memory, a real
// client, and (idleClosed) that every connection is closed in the end.
func (a listenerAttack) run(t *testing.T, from string) []net.Conn {
	t.Helper()
	before, _ := a.metric(a.refusals) // absent before the first refusal
	mem0 := memoryOf(t, a.proc, a.metric)
	conns := flood(t, from, a.addr, floodConns)
	testwait.UntilNil(t, 30*time.Second, a.name+": refusals counted", func() error {
		v, err := a.metric(a.refusals)
		if err == nil && v-before != a.want {
			err = fmt.Errorf("%s %v, want %v more than %v", a.refusals, v, a.want, before)
		}
		return err
	})
	peak := memoryOf(t, a.proc, a.metric)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.served(ctx); err != nil {
		t.Errorf("%s: a real client while %d idle connections are held: %v", a.name, floodConns, err)
	}
	checkGrowth(t, a.name, mem0, peak.max(memoryOf(t, a.proc, a.metric)))
	if a.idleClosed {
		waitClosedByServer(t, a.name, conns, 30*time.Second)
	}
	return conns
}

// adminMetric reads series from url's /metrics with c.
func adminMetric(c *http.Client, url string) func(series string) (float64, error) {
	return func(series string) (float64, error) { return metricValueWith(c, url, series) }
}

// grpcHealthy opens a new connection to addr with opts and asks for
// health.
func grpcHealthy(addr string, opts ...grpc.DialOption) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return err
		}
		defer cc.Close()
		_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
}

// TestHostileIdleConnections floods every listener of a plaintext
// cluster: metad's Raft and gRPC ports, a bookie's and the broker's gRPC
// ports, the broker's admin and Kafka ports. The Kafka listener is also
// flooded from a second address, past its total cap.
func TestHostileIdleConnections(t *testing.T) {
	skipShort(t)
	hs := []string{"--handshake-timeout", floodHandshakeTimeout}
	meta := proctest.StartMetad(t, bins["metad"], 3, hs...)
	var bookies []*proctest.BookieNode
	for i := 1; i <= 3; i++ {
		bookies = append(bookies, proctest.StartBookie(t, bins["bookie"], meta, fmt.Sprintf("b%d", i), hs...))
	}
	broker := proctest.StartBroker(t, bins["broker"], meta, "k1",
		append(hs, "--kafka-max-connections-per-ip", "300", "--kafka-max-connections", "500")...)
	c := &strataCluster{meta: meta, bookies: bookies, brokers: []*proctest.BrokerNode{broker}}
	cl := c.client(t)
	createTopic(t, cl, "flooded", 1, nil)
	m1, b1 := meta.Members[0], bookies[0]
	plain := http.DefaultClient
	metadServed := func(ctx context.Context) error {
		_, err := dialMetad(t, m1.Listen).Put(ctx, &metadpb.PutRequest{Key: "/flood", Value: []byte(time.Now().String())})
		return err
	}
	produce := func(ctx context.Context) error {
		fresh := c.client(t) // a new connection, from 127.0.0.1
		return produceRecords(fresh, "flooded", 1, "served", 0, 10)
	}
	kc := kafkaClient(t, c.kafkaAddrs())
	kafkaServed := func(ctx context.Context) error {
		return kc.ProduceSync(ctx, &kgo.Record{Topic: "flooded", Value: []byte("served")}).FirstErr()
	}
	// gRPC and Raft admit 512 and 64 connections per IP by default, the
	// admin address 32; the rest are refused at once.
	for _, a := range []listenerAttack{
		{name: "metad Raft", addr: m1.RaftAddr, proc: m1.Process, metric: adminMetric(plain, "http://"+m1.AdminAddr+"/metrics"),
			refusals: `strata_metad_raft_connections_refused_total{reason="max_connections_per_ip"}`, want: floodConns - 64,
			served: metadServed, idleClosed: true},
		{name: "metad gRPC", addr: m1.Listen, proc: m1.Process, metric: adminMetric(plain, "http://"+m1.AdminAddr+"/metrics"),
			refusals: `strata_metad_grpc_connections_refused_total{reason="max_connections_per_ip"}`, want: floodConns - 512,
			served: metadServed, idleClosed: true},
		{name: "bookie gRPC", addr: b1.Listen, proc: b1.Process, metric: adminMetric(plain, "http://"+b1.AdminAddr+"/metrics"),
			refusals: `strata_bookie_grpc_connections_refused_total{reason="max_connections_per_ip"}`, want: floodConns - 512,
			served: func(ctx context.Context) error {
				if err := grpcHealthy(b1.Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))(ctx); err != nil {
					return err
				}
				return produce(ctx) // through the broker's connections to the bookies
			}, idleClosed: true},
		{name: "broker gRPC", addr: broker.Listen, proc: broker.Process, metric: adminMetric(plain, "http://"+broker.AdminAddr+"/metrics"),
			refusals: `strata_broker_grpc_connections_refused_total{reason="max_connections_per_ip"}`, want: floodConns - 512,
			served: produce, idleClosed: true},
		{name: "broker admin", addr: broker.AdminAddr, proc: broker.Process, metric: adminMetric(plain, "http://"+broker.AdminAddr+"/metrics"),
			refusals: `strata_broker_admin_connections_refused_total{reason="max_connections_per_ip"}`, want: floodConns - 32,
			served: func(ctx context.Context) error { return proctest.WaitHTTP(ctx, "http://"+broker.AdminAddr+"/readyz") }, idleClosed: true},
	} {
		closeAll(a.run(t, attackerIP))
	}

	// Kafka: 300 per IP, 500 in all (idle Kafka connections stay until
	// --kafka-idle-timeout). A second address takes the places left and
	// is refused past them; once it goes, real clients get in again.
	kafka := listenerAttack{name: "broker Kafka", addr: broker.KafkaAddr, proc: broker.Process,
		metric:   adminMetric(plain, "http://"+broker.AdminAddr+"/metrics"),
		refusals: `strata_broker_kafka_connections_refused_total{reason="per_ip_cap"}`, want: floodConns - 300,
		served: kafkaServed}
	kafka.run(t, attackerIP)
	open, err := kafka.metric("strata_broker_kafka_connections_open") // the flood's 300 and the real client's
	if err != nil {
		t.Fatal(err)
	}
	second := kafka
	second.name, second.refusals = "broker Kafka, second address", `strata_broker_kafka_connections_refused_total{reason="total_cap"}`
	second.want = floodConns - (500 - open)
	second.served = func(context.Context) error { return nil } // every place is taken: real clients wait
	closeAll(second.run(t, "127.0.0.3"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkaServed(ctx); err != nil {
		t.Fatalf("Kafka client once the second address went: %v", err)
	}
}

// TestHostileIdleConnectionsTLS floods a TLS cluster: idle TCP
// connections to metad's Raft port (each must complete a mutual TLS
// handshake with a metad certificate before the transport sees it), and
// TLS handshakes without a client certificate to the broker's gRPC port
// (which lets clients log in with passwords, so it asks for none). Then
// /metrics on the TLS broker: refused without the token or an admin
// certificate, served with either.
func TestHostileIdleConnectionsTLS(t *testing.T) {
	skipShort(t)
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte("flood-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startTLSCluster(t, "--handshake-timeout", floodHandshakeTimeout, "--admin-token-file", tokenFile)
	adminCert := c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "ops"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := c.client(ctx, t, adminCert)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	createTopic(t, cl, "flooded", 1, nil)

	m1, broker := c.meta.Members[0], c.broker
	metric := func(adminAddr string) func(string) (float64, error) {
		return func(series string) (float64, error) { return c.metricValue(adminAddr, series) }
	}
	listenerAttack{name: "metad Raft (mTLS)", addr: m1.RaftAddr, proc: m1.Process,
		metric:   metric(m1.AdminAddr),
		refusals: `strata_metad_raft_connections_refused_total{reason="max_connections_per_ip"}`, want: floodConns - 64,
		served: func(ctx context.Context) error {
			_, err := metadpb.NewMetadClient(dial(t, m1.Listen, adminCert)).Put(ctx, &metadpb.PutRequest{Key: "/flood", Value: []byte("x")})
			return err
		}, idleClosed: true}.run(t, attackerIP)

	checkTLSHandshakeFlood(t, broker, c.pki.caFile, metric(broker.AdminAddr), func(ctx context.Context) error {
		return produceRecords(cl, "flooded", 1, "served", 0, 10)
	})
	checkMetricsNeedAuth(t, broker.AdminAddr, c.admin)
}

// checkTLSHandshakeFlood completes floodConns TLS handshakes with the
// broker's gRPC port from attackerIP, with no client certificate, and
// sends nothing more: the per-IP cap refuses all but 512, those hold no
// transport buffer, and are closed at the handshake timeout (no HTTP/2
// preface came); a real client is served meanwhile.
func checkTLSHandshakeFlood(t *testing.T, broker *proctest.BrokerNode, caFile string, metric func(string) (float64, error), served func(context.Context) error) {
	t.Helper()
	caOnly := &tls.Config{RootCAs: certPool(t, caFile), ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	series := `strata_broker_grpc_connections_refused_total{reason="max_connections_per_ip"}`
	before, _ := metric(series)
	mem0 := memoryOf(t, broker.Process, metric)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(attackerIP)}, Timeout: 10 * time.Second}
	var held []net.Conn
	t.Cleanup(func() { closeAll(held) })
	refused := 0
	began := time.Now()
	for range floodConns {
		c, err := tls.DialWithDialer(d, "tcp", broker.Listen, caOnly)
		if err != nil {
			refused++ // closed at accept: the handshake never started
			continue
		}
		held = append(held, c)
	}
	if len(held) != 512 {
		// More when the handshakes took longer than the handshake timeout
		// (a machine far busier than CI's): the first connections were
		// closed by then, which frees their places.
		t.Fatalf("%d TLS handshakes completed without a certificate in %v (handshake timeout %s), want the per-IP cap (512); %d refused",
			len(held), time.Since(began).Round(time.Millisecond), floodHandshakeTimeout, refused)
	}
	testwait.UntilNil(t, 30*time.Second, "TLS flood refusals counted", func() error {
		v, err := metric(series)
		if err == nil && v-before != floodConns-512 {
			err = fmt.Errorf("%s %v, want %v more than %v", series, v, floodConns-512, before)
		}
		return err
	})
	peak := memoryOf(t, broker.Process, metric)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := served(ctx); err != nil {
		t.Errorf("broker gRPC: a real client while %d TLS connections are held: %v", len(held), err)
	}
	checkGrowth(t, "broker gRPC (TLS handshakes)", mem0, peak.max(memoryOf(t, broker.Process, metric)))
	waitClosedByServer(t, "broker gRPC (TLS, no preface)", held, 30*time.Second)
}

// checkMetricsNeedAuth: on a TLS node, /metrics over plain HTTP (the
// admin address serves it beside TLS) needs the token; over TLS an admin
// certificate stands for it; /readyz stays open.
func checkMetricsNeedAuth(t *testing.T, adminAddr string, admin *http.Client) {
	t.Helper()
	get := func(c *http.Client, url, token string) int {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	plain, https := "http://"+adminAddr, "https://"+adminAddr
	for _, tc := range []struct {
		name   string
		client *http.Client
		url    string
		token  string
		want   int
	}{
		{"metrics, plain HTTP, no token", http.DefaultClient, plain + "/metrics", "", 401},
		{"metrics, plain HTTP, wrong token", http.DefaultClient, plain + "/metrics", "guess", 401},
		{"metrics, plain HTTP, the token", http.DefaultClient, plain + "/metrics", "flood-token", 200},
		{"metrics, TLS, admin certificate", admin, https + "/metrics", "", 200},
		{"readyz, plain HTTP", http.DefaultClient, plain + "/readyz", "", 200},
	} {
		if got := get(tc.client, tc.url, tc.token); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// adminHTTPS is an HTTPS client with the admin certificate f.
func adminHTTPS(t *testing.T, f pki.Files) *http.Client {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: certPool(t, f.CA), Certificates: []tls.Certificate{cert}}}}
}

// certPool holds the certificates of the PEM file caFile.
func certPool(t *testing.T, caFile string) *x509.CertPool {
	t.Helper()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", caFile)
	}
	return pool
}
