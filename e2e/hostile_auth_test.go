package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// The broker's login budget per source (broker/security.go's
// loginlimit.Config): 10 failures at once, one more a second; a refused
// attempt is answered after a second.
const (
	loginBurst          = 10
	loginsPerSecond     = 1
	loginRefusalDelay   = time.Second
	guessWindow         = 8 * time.Second
	realLoginDeadline   = 3 * time.Second
	hostilePassword     = "victim-secret"
	largeBodyBytes      = 15 << 20
	largeBodyGrowthMiB  = 64
	largeBodyControlMiB = 128
)

// dialerFrom dials from ip: Linux routes all of 127.0.0.0/8 to the
// loopback, so each test party is a source address of its own.
func dialerFrom(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
}

func caPool(t *testing.T, caFile string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no CA certificate in " + caFile)
	}
	return pool
}

// grpcFrom connects to the broker from ip over TLS without a client
// certificate: a password login, or no credentials at all.
func grpcFrom(t *testing.T, c *tlsCluster, ip string) brokerpb.BrokerClient {
	t.Helper()
	cc, err := grpc.NewClient(c.broker.Listen,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: caPool(t, c.pki.caFile), MinVersion: tls.VersionTLS13})),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialerFrom(ip).DialContext(ctx, "tcp", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(grpcopts.MaxMessageBytes)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return brokerpb.NewBrokerClient(cc)
}

func asUser(user, password string) grpc.CallOption {
	return grpc.PerRPCCredentials(client.PasswordCredentials(user, password))
}

// guesses counts a guessing loop's answers.
type guesses struct {
	checked, throttled, other atomic.Int64
	mu                        sync.Mutex
	firstOther                error
}

func (g *guesses) otherErr(err error) {
	g.other.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.firstOther == nil {
		g.firstOther = err
	}
}

// check asserts the loop got at most the source's budget of password
// checks over the window, and at most one refused attempt a second per
// connection besides (a refusal is answered after loginRefusalDelay).
func (g *guesses) check(t *testing.T, what string, window time.Duration, parallel int) {
	t.Helper()
	checked, throttled, other := g.checked.Load(), g.throttled.Load(), g.other.Load()
	attempts := checked + throttled
	t.Logf("%s: %d attempts (%.1f/s): %d passwords checked (%.1f/s), %d refused as throttled; %d other answers (first: %v); over %v",
		what, attempts, float64(attempts)/window.Seconds(), checked, float64(checked)/window.Seconds(), throttled, other, g.firstOther, window)
	// Admissions at the window's edges and attempts already admitted
	// when the budget ran out account for the slack.
	checks := int64(loginBurst + loginsPerSecond*int(window/time.Second) + parallel + 2)
	if checked > checks {
		t.Errorf("%s: %d passwords checked in %v, want at most %d (burst %d, %d a second)",
			what, checked, window, checks, loginBurst, loginsPerSecond)
	}
	if bound := checks + int64(parallel)*int64(window/loginRefusalDelay+1); attempts > bound {
		t.Errorf("%s: %d attempts in %v (%.1f/s), want at most %d", what, attempts, window, float64(attempts)/window.Seconds(), bound)
	}
	if other > 0 {
		t.Errorf("%s: %d unexpected answers, first %v", what, other, g.firstOther)
	}
}

// over reports whether ctx's deadline has passed: its timer may fire a
// little later, and a loop must not take the calls failing meanwhile for
// answers.
func over(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	return ctx.Err() != nil || (ok && !time.Now().Before(deadline))
}

// guessesPerGoroutine numbers each guessing goroutine's guesses apart:
// guess n is goroutine n/guessesPerGoroutine's.
const guessesPerGoroutine = 1_000_000

// during runs guess from parallel goroutines until window ends, and
// meanwhile calls real every window/4 (three times), each under
// realLoginDeadline.
func during(t *testing.T, window time.Duration, parallel int, guess func(ctx context.Context, n int), real []func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	var wg sync.WaitGroup
	for i := range parallel {
		wg.Go(func() {
			for n := 0; !over(ctx) && n < guessesPerGoroutine; n++ {
				guess(ctx, i*guessesPerGoroutine+n)
			}
		})
	}
	for i, login := range real {
		time.Sleep(window / time.Duration(len(real)+1)) // spread the real logins over the attack
		start := time.Now()
		lctx, lcancel := context.WithTimeout(context.Background(), realLoginDeadline)
		err := login(lctx)
		lcancel()
		if err != nil {
			t.Errorf("real login %d during the guessing: %v (after %v)", i, err, time.Since(start))
		} else {
			t.Logf("real login %d during the guessing took %v", i, time.Since(start).Round(time.Millisecond))
		}
	}
	wg.Wait()
}

// logged waits for a line holding every one of parts in one of the logs.
func logged(t *testing.T, what string, logs []string, parts ...string) {
	t.Helper()
	testwait.UntilNil(t, 10*time.Second, what, func() error {
		for _, path := range logs {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(b), "\n") {
				if containsAll(line, parts) {
					return nil
				}
			}
		}
		return fmt.Errorf("no line with %q", parts)
	})
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// loggedWithSource waits for a broker log line about a failed login that
// names source.
func loggedWithSource(t *testing.T, c *tlsCluster, source string) {
	t.Helper()
	logged(t, "a failed login logged with source "+source, []string{c.broker.LogPath}, "login failed", "source="+source)
}

// restartBroker restarts the broker (a fresh process: its memory back to
// a start-up's) and waits until it serves password logins.
func restartBroker(t *testing.T, c *tlsCluster) {
	t.Helper()
	c.broker.Stop(10 * time.Second)
	c.broker.Restart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.broker.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	warm := grpcFrom(t, c, "127.0.0.1")
	testwait.UntilNil(t, 20*time.Second, "the restarted broker serves password logins", func() error {
		_, err := warm.Metadata(ctx, &brokerpb.MetadataRequest{}, asUser("warm", hostilePassword))
		return err
	})
}

// TestHostileLogins runs a TLS cluster against password guessing and
// unauthenticated work: a guessing loop over gRPC and over the Kafka
// listener's SASL PLAIN and SCRAM gets at most the source's budget of
// password checks while a real user's logins from another address
// succeed within their deadline; failed logins are logged with their
// source; large requests from a caller without valid credentials are
// refused before their body is read (the broker's peak memory stays
// flat, while the same requests from an authenticated caller raise it);
// administrative actions are logged with their principal.
func TestHostileLogins(t *testing.T) {
	skipShort(t)
	c := startTLSCluster(t)
	admin := c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "root"})
	asAdmin := aclCLI{t: t, c: c, files: admin}
	users := []string{"victim", "real-0", "real-1", "real-2", "kreal-0", "kreal-1", "kreal-2", "warm"}
	for _, u := range users {
		asAdmin.must(hostilePassword+"\n", "user", "create", u, "--password-stdin")
	}
	// Users are mirrored in order: once the last logs in, all are there.
	warm := grpcFrom(t, c, "127.0.0.1")
	testwait.UntilNil(t, 20*time.Second, "the broker mirrors the users", func() error {
		_, err := warm.Metadata(context.Background(), &brokerpb.MetadataRequest{}, asUser("warm", hostilePassword))
		return err
	})

	// Administrative actions are logged with who did them: the user
	// creations above in metad, a topic's creation on the broker.
	var metadLogs []string
	for _, m := range c.meta.Members {
		metadLogs = append(metadLogs, m.LogPath)
	}
	logged(t, "a user's creation logged with its principal", metadLogs, "metad changed by a client", "/strata/security/users/victim", "principal=admin:root")
	adminCl, err := c.client(context.Background(), t, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer adminCl.Close()
	createTopic(t, adminCl, "audited", 1, nil)
	logged(t, "a topic's creation logged with its principal", []string{c.broker.LogPath}, "created topic", "topic=audited", "principal=User:root")

	t.Run("gRPC password guessing", func(t *testing.T) { grpcGuessing(t, c) })
	t.Run("Kafka SASL guessing", func(t *testing.T) { kafkaGuessing(t, c) })
	t.Run("large requests without credentials", func(t *testing.T) { largeUnauthenticated(t, c, admin) })
}

func grpcGuessing(t *testing.T, c *tlsCluster) {
	const parallel = 4
	var g guesses
	var attackers []brokerpb.BrokerClient // a connection per guessing goroutine
	for range parallel {
		attackers = append(attackers, grpcFrom(t, c, "127.0.0.2"))
	}
	guess := func(ctx context.Context, n int) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := attackers[n/guessesPerGoroutine].Metadata(cctx, &brokerpb.MetadataRequest{}, asUser("victim", fmt.Sprintf("guess-%d", n)))
		switch {
		case status.Code(err) == codes.Unauthenticated:
			g.checked.Add(1)
		case status.Code(err) == codes.ResourceExhausted:
			g.throttled.Add(1)
		case over(ctx): // the window ended during the call
		default:
			g.otherErr(err)
		}
	}
	var real []func(ctx context.Context) error
	for i := range 3 {
		real = append(real, func(ctx context.Context) error {
			_, err := grpcFrom(t, c, "127.0.0.3").Metadata(ctx, &brokerpb.MetadataRequest{}, asUser(fmt.Sprintf("real-%d", i), hostilePassword))
			return err
		})
	}
	during(t, guessWindow, parallel, guess, real)
	g.check(t, "gRPC", guessWindow, parallel)
	loggedWithSource(t, c, "127.0.0.2")
}

// kafkaLogin runs one SASL login over a new TLS connection from ip: the
// error of SaslAuthenticate (with its message), or nil.
func kafkaLogin(ctx context.Context, c *tlsCluster, pool *x509.CertPool, ip string, mech sasl.Mechanism) error {
	d := &tls.Dialer{NetDialer: dialerFrom(ip), Config: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	nc, err := d.DialContext(ctx, "tcp", c.broker.KafkaAddr)
	if err != nil {
		return err
	}
	defer nc.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	rc := &kafkaConn{nc: nc}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, mech.Name()
	var hsResp kmsg.SASLHandshakeResponse
	if err := rc.roundTrip(hs, &hsResp); err != nil {
		return err
	}
	if err := kerr.ErrorForCode(hsResp.ErrorCode); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	session, token, err := mech.Authenticate(ctx, c.broker.KafkaAddr)
	if err != nil {
		return err
	}
	for {
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.Version, req.SASLAuthBytes = 1, token
		var resp kmsg.SASLAuthenticateResponse
		if err := rc.roundTrip(req, &resp); err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			msg := ""
			if resp.ErrorMessage != nil {
				msg = *resp.ErrorMessage
			}
			return fmt.Errorf("%w: %s", err, msg)
		}
		done, next, err := session.Challenge(resp.SASLAuthBytes)
		if err != nil || done {
			return err
		}
		token = next
	}
}

// kafkaConn is a bare Kafka protocol connection (non-flexible versions).
type kafkaConn struct {
	nc   net.Conn
	corr int32
}

func (k *kafkaConn) roundTrip(req kmsg.Request, resp kmsg.Response) error {
	k.corr++
	if _, err := k.nc.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("guesser")).AppendRequest(nil, req, k.corr)); err != nil {
		return err
	}
	var size [4]byte
	if _, err := readFull(k.nc, size[:]); err != nil {
		return err
	}
	body := make([]byte, int(size[0])<<24|int(size[1])<<16|int(size[2])<<8|int(size[3]))
	if _, err := readFull(k.nc, body); err != nil {
		return err
	}
	resp.SetVersion(req.GetVersion())
	return resp.ReadFrom(body[4:]) // after the correlation id
}

func readFull(nc net.Conn, b []byte) (int, error) {
	for got := 0; got < len(b); {
		n, err := nc.Read(b[got:])
		got += n
		if err != nil {
			return got, err
		}
	}
	return len(b), nil
}

func kafkaGuessing(t *testing.T, c *tlsCluster) {
	const parallel = 4
	pool := caPool(t, c.pki.caFile)
	var g guesses
	guess := func(ctx context.Context, n int) {
		var mech sasl.Mechanism = plain.Auth{User: "victim", Pass: fmt.Sprintf("guess-%d", n)}.AsMechanism()
		if n%2 == 1 {
			mech = scram.Auth{User: "victim", Pass: fmt.Sprintf("guess-%d", n)}.AsSha256Mechanism()
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := kafkaLogin(cctx, c, pool, "127.0.0.4", mech)
		switch {
		case err != nil && strings.Contains(err.Error(), "invalid credentials"):
			g.checked.Add(1)
		case err != nil && strings.Contains(err.Error(), "too many failed logins"):
			g.throttled.Add(1)
		case over(ctx):
		case err == nil:
			g.otherErr(fmt.Errorf("guess %d logged in", n))
		default:
			g.otherErr(err)
		}
	}
	real := []func(ctx context.Context) error{
		func(ctx context.Context) error { // franz-go, SCRAM-SHA-256
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.broker.KafkaAddr),
				kgo.Dialer((&tls.Dialer{NetDialer: dialerFrom("127.0.0.5"), Config: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}).DialContext),
				kgo.SASL(scram.Auth{User: "kreal-0", Pass: hostilePassword}.AsSha256Mechanism()))
			if err != nil {
				return err
			}
			defer cl.Close()
			return cl.Ping(ctx)
		},
		func(ctx context.Context) error {
			return kafkaLogin(ctx, c, pool, "127.0.0.5", plain.Auth{User: "kreal-1", Pass: hostilePassword}.AsMechanism())
		},
		func(ctx context.Context) error {
			return kafkaLogin(ctx, c, pool, "127.0.0.5", scram.Auth{User: "kreal-2", Pass: hostilePassword}.AsSha512Mechanism())
		},
	}
	during(t, guessWindow, parallel, guess, real)
	g.check(t, "Kafka SASL", guessWindow, parallel)
	loggedWithSource(t, c, "127.0.0.4")
}

// largeUnauthenticated sends Produce requests of largeBodyBytes at once
// from callers without valid credentials: none may be read, so the
// broker's peak RSS stays within largeBodyGrowthMiB; the same requests
// from an admin certificate are read (the control: the peak does grow).
func largeUnauthenticated(t *testing.T, c *tlsCluster, admin pki.Files) {
	body := make([]byte, largeBodyBytes)
	send := func(bc brokerpb.BrokerClient, n int, opts ...grpc.CallOption) []error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, errs[i] = bc.Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{
					{Topic: "no-such-topic", Partition: 0, Records: body}}}, opts...)
			})
		}
		wg.Wait()
		return errs
	}
	growth := func(what string, fn func()) int64 {
		t.Helper()
		// A fresh process: a heap grown by an earlier phase would absorb
		// this one's allocations without raising the peak.
		restartBroker(t, c)
		resetPeakRSS(t, c.broker.Pid())
		_, before, err := rssKiB(c.broker.Pid())
		if err != nil {
			t.Fatal(err)
		}
		fn()
		_, after, err := rssKiB(c.broker.Pid())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: the broker's peak RSS grew %d MiB", what, (after-before)>>10)
		return (after - before) >> 10
	}
	const conns, perConn = 4, 6
	refusedAll := func(what string, ip string, want codes.Code, opts ...grpc.CallOption) {
		t.Helper()
		if g := growth(what, func() {
			var wg sync.WaitGroup
			for range conns {
				bc := grpcFrom(t, c, ip)
				wg.Go(func() {
					for _, err := range send(bc, perConn, opts...) {
						if code := status.Code(err); code != want && code != codes.ResourceExhausted {
							t.Errorf("%s: %v, want %v (or throttled)", what, err, want)
						}
					}
				})
			}
			wg.Wait()
		}); g > largeBodyGrowthMiB {
			t.Errorf("%s: %d requests of %d MiB grew the broker's peak RSS by %d MiB, want at most %d: their bodies were read",
				what, conns*perConn, largeBodyBytes>>20, g, largeBodyGrowthMiB)
		}
	}
	refusedAll("no credentials", "127.0.0.6", codes.Unauthenticated)
	// Past its budget the source is throttled instead.
	refusedAll("wrong password", "127.0.0.7", codes.Unauthenticated, asUser("victim", "wrong"))

	// The control: an admin's requests are read (and answered per
	// partition: the topic does not exist).
	adminConn := brokerpb.NewBrokerClient(dial(t, c.broker.Listen, admin))
	if g := growth("admin certificate", func() {
		for _, err := range send(adminConn, conns*perConn, grpc.MaxCallSendMsgSize(grpcopts.MaxMessageBytes)) {
			if err != nil {
				t.Errorf("admin's produce: %v", err)
			}
		}
	}); g < largeBodyControlMiB {
		t.Errorf("the control grew the broker's peak RSS by %d MiB only, want at least %d: the measure does not see bodies read", g, largeBodyControlMiB)
	}
}

// resetPeakRSS resets the process's peak RSS (VmHWM) to its current RSS.
func resetPeakRSS(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
}
