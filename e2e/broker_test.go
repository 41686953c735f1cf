package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/clockfault"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// strataCluster is a whole cluster of processes: 3 metad, 3 bookies and
// some brokers.
type strataCluster struct {
	meta    *proctest.MetadCluster
	bookies []*proctest.BookieNode
	brokers []*proctest.BrokerNode
}

func startStrata(t testing.TB, brokers int, brokerArgs ...string) *strataCluster {
	t.Helper()
	c := &strataCluster{meta: proctest.StartMetad(t, bins["metad"], 3)}
	for i := 1; i <= 3; i++ {
		c.bookies = append(c.bookies, proctest.StartBookie(t, bins["bookie"], c.meta, fmt.Sprintf("b%d", i)))
	}
	for i := 1; i <= brokers; i++ {
		c.brokers = append(c.brokers, proctest.StartBroker(t, bins["broker"], c.meta, fmt.Sprintf("k%d", i), brokerArgs...))
	}
	return c
}

func (c *strataCluster) brokerAddrs() []string {
	var out []string
	for _, b := range c.brokers {
		out = append(out, b.Listen)
	}
	return out
}

func (c *strataCluster) client(t testing.TB) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Brokers: c.brokerAddrs(), ClientID: t.Name(), RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func (c *strataCluster) brokerAt(addr string) *proctest.BrokerNode {
	for _, b := range c.brokers {
		if b.Listen == addr {
			return b
		}
	}
	return nil
}

// createTopic creates a topic and waits until every partition is served.
func createTopic(t testing.TB, cl *client.Client, name string, partitions int32, configs map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.CreateTopic(ctx, name, partitions, configs); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 20*time.Second, "every partition served", func() error {
		md, err := cl.Metadata(ctx, name)
		if err != nil {
			return err
		}
		for _, p := range md.Topics[0].Partitions {
			if p.OwnerAddress == "" {
				return fmt.Errorf("partition %d has no owner", p.Partition)
			}
		}
		return nil
	})
}

// ownerOf returns the address serving a partition.
func ownerOf(ctx context.Context, cl *client.Client, topic string, partition int32) (string, error) {
	md, err := cl.Metadata(ctx, topic)
	if err != nil {
		return "", err
	}
	if len(md.Topics) != 1 || int(partition) >= len(md.Topics[0].Partitions) {
		return "", fmt.Errorf("no metadata for %s/%d", topic, partition)
	}
	return md.Topics[0].Partitions[partition].OwnerAddress, nil
}

// TestBrokerKillOwner: kill -9 the broker that owns a partition while an
// idempotent producer writes keyed records with acks=quorum. Every
// acknowledged record is consumed exactly once, per-key order holds, and
// the other broker serves the partition within 10 s.
func TestBrokerKillOwner(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 2)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "orders", 2, nil)
	load := loadtest.Start(t, cl, loadtest.Config{Topic: "orders", Keys: 20, Rate: 0, Producer: client.ProducerConfig{Acks: client.AcksQuorum, Linger: 2 * time.Millisecond}})
	load.AwaitAcks(t, 200, "the load before the kill")
	owner, err := ownerOf(ctx, cl, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.brokerAt(owner)
	victim.Kill()
	killed := time.Now()
	t.Logf("killed %s (owner of orders/0)", victim.ID)
	testwait.UntilNil(t, 10*time.Second, "partition 0 served by the other broker", func() error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cl.ListOffsets(cctx, client.TopicPartition{Topic: "orders", Partition: 0}, -1)
		return err
	})
	t.Logf("orders/0 served again %s after the kill", time.Since(killed).Round(time.Millisecond))
	load.AwaitAcks(t, 200, "the load after the failover")
	acks := load.Finish(t).Acks
	log := loadtest.ReadAll(t, cl, "orders", 2)
	loadtest.CheckExactlyOnce(t, log, acks)
	t.Logf("%d records acknowledged, all consumed exactly once", len(acks))
}

// TestBrokerZombieFenced: the owner is paused past its session, the other
// broker takes over; when the zombie resumes, its appends fail and it
// drops the partition; no offset holds two records.
func TestBrokerZombieFenced(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 2)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "zombie", 1, nil)
	p, err := cl.NewProducer(client.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	produceN := func(from, n int) {
		for i := from; i < from+n; i++ {
			if _, err := p.ProduceSync(ctx, &client.Record{Topic: "zombie", Partition: 0, Value: []byte("v" + strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	produceN(0, 50)
	owner, err := ownerOf(ctx, cl, "zombie", 0)
	if err != nil {
		t.Fatal(err)
	}
	zombie := c.brokerAt(owner)
	// Connected before the pause, so that a request sent during it lands,
	// unread, in the paused zombie's socket (zombieQueued).
	var dialed sync.Map // local address of each connection to the owner
	conn, err := grpc.NewClient(owner, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err == nil {
				dialed.Store(nc.LocalAddr().String(), true)
			}
			return nc, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testwait.Until(t, 10*time.Second, "a connection to the owner", func() bool {
		conn.Connect()
		return conn.GetState() == connectivity.Ready
	})
	zombie.Pause()
	paused := true
	defer func() {
		if paused {
			zombie.Resume()
		}
	}()
	testwait.UntilNil(t, 20*time.Second, "the other broker owns the partition", func() error {
		o, err := ownerOf(ctx, cl, "zombie", 0)
		if err != nil {
			return err
		}
		if o == "" || o == owner {
			return fmt.Errorf("owner is still %q", o)
		}
		return nil
	})
	produceN(50, 50)

	// A request that reaches the zombie while it is still paused is served
	// when it wakes up: it must fail, not be stored.
	queuedBefore := zombieQueued(t, owner, &dialed)
	batch, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: []recordbatch.Record{{TimestampMs: time.Now().UnixMilli(), Value: []byte("zombie-write")}}})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		resp *brokerpb.ProduceResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		resp, err := brokerpb.NewBrokerClient(conn).Produce(rctx, &brokerpb.ProduceRequest{
			Partitions: []*brokerpb.ProducePartition{{Topic: "zombie", Partition: 0, Records: batch}}})
		done <- result{resp, err}
	}()
	testwait.Until(t, 10*time.Second, "the request queued in the paused zombie's socket", func() bool {
		return zombieQueued(t, owner, &dialed) > queuedBefore
	})
	zombie.Resume()
	paused = false
	r := <-done
	if r.err == nil {
		pr := r.resp.Partitions[0]
		if pr.Error == nil {
			t.Fatalf("the zombie stored a record at offset %d", pr.BaseOffset)
		}
		t.Logf("zombie's append refused: %s: %s", pr.Error.GetInfo().GetReason(), pr.Error.Message)
	} else {
		t.Logf("zombie's append refused: %v", r.err)
	}
	testwait.UntilNil(t, 10*time.Second, "the zombie drops the partition", func() error {
		resp, err := brokerpb.NewBrokerClient(conn).ListOffsets(ctx, &brokerpb.ListOffsetsRequest{Topic: "zombie", Partition: 0, Timestamp: -1})
		if err == nil {
			return fmt.Errorf("zombie still serves: high watermark %d", resp.Offset)
		}
		return nil
	})
	produceN(100, 10)
	log := loadtest.ReadAll(t, cl, "zombie", 1)
	recs := log[0]
	if len(recs) != 110 {
		t.Fatalf("want 110 records, got %d", len(recs))
	}
	for i, r := range recs {
		if r.Offset != int64(i) || string(r.Value) != "v"+strconv.Itoa(i) {
			t.Fatalf("offset %d holds %q at %d", i, r.Value, r.Offset)
		}
	}
}

// zombieQueued is how many bytes wait unread in server's end of the
// connections whose client ends are the local addresses in dialed: the
// receive queues of /proc/net/tcp (Linux).
func zombieQueued(t *testing.T, server string, dialed *sync.Map) int {
	t.Helper()
	hexAddr := func(addr string) string {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().Is4() {
			t.Fatalf("not an IPv4 address: %q (%v)", addr, err)
		}
		ip := ap.Addr().As4() // /proc/net/tcp prints it as a little-endian word
		return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ap.Port())
	}
	remotes := map[string]bool{}
	dialed.Range(func(k, _ any) bool { remotes[hexAddr(k.(string))] = true; return true })
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	local, queued := hexAddr(server), 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue ...
		f := strings.Fields(line)
		if len(f) < 5 || f[1] != local || !remotes[f[2]] {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseInt(rx, 16, 64)
		if err != nil {
			t.Fatalf("/proc/net/tcp: %q: %v", line, err)
		}
		queued += int(n)
	}
	return queued
}

// TestBrokerBookieKill: kill -9 one of three bookies during produce: no
// acknowledged record is lost and acknowledgements stall for less than 2 s.
func TestBrokerBookieKill(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	cl := c.client(t)
	createTopic(t, cl, "bk", 2, nil)
	load := loadtest.Start(t, cl, loadtest.Config{Topic: "bk", Keys: 10, Rate: 0, Producer: client.ProducerConfig{Linger: time.Millisecond}})
	load.AwaitAcks(t, 200, "the load before the kill")
	c.bookies[1].Kill()
	time.Sleep(3 * time.Second) // the window the stall bound is measured over, not a wait
	load.AwaitAcks(t, 100, "the load after the kill")
	res := load.Finish(t)
	acks, gap := res.Acks, res.MaxGap
	t.Logf("%d records acknowledged; longest gap between acknowledgements %s", len(acks), gap.Round(time.Millisecond))
	if gap >= 2*time.Second {
		t.Errorf("produce stalled %s after the bookie kill (want < 2s)", gap)
	}
	loadtest.Verify(t, cl, "bk", 2, acks)
}

// TestBrokerFetchAtOffsetsAndTimes: fetches at arbitrary offsets and
// timestamps, across many ledger rolls, return exactly the right records.
func TestBrokerFetchAtOffsetsAndTimes(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "seek", 1, map[string]string{"segment.bytes": "16384"})
	p, err := cl.NewProducer(client.ProducerConfig{Linger: time.Millisecond, BatchBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	ts := func(i int) time.Time { return base.Add(time.Duration(i) * 10 * time.Millisecond) }
	var wg sync.WaitGroup
	var perr error
	var mu sync.Mutex
	for i := 0; i < n; i++ {
		wg.Add(1)
		rec := &client.Record{Topic: "seek", Partition: 0, Value: []byte(fmt.Sprintf("r%05d-%s", i, strings.Repeat("x", 40))), Timestamp: ts(i)}
		if err := p.Produce(ctx, rec, func(r *client.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				perr = err
				mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if perr != nil {
		t.Fatal(perr)
	}
	p.Close(ctx)
	desc, err := cl.DescribeTopic(ctx, "seek")
	if err != nil {
		t.Fatal(err)
	}
	ledgers := len(desc.Partitions[0].Ledgers)
	t.Logf("%d records in %d ledgers", n, ledgers)
	if ledgers < 3 {
		t.Fatalf("want several ledger rolls, got %d ledgers", ledgers)
	}
	tp := client.TopicPartition{Topic: "seek", Partition: 0}
	first := func(off client.Offset) *client.Record {
		t.Helper()
		cons, err := cl.NewConsumer(client.ConsumerConfig{MaxWait: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := cons.Assign(cctx, map[client.TopicPartition]client.Offset{tp: off}); err != nil {
			t.Fatal(err)
		}
		recs, err := cons.Poll(cctx)
		if err != nil || len(recs) == 0 {
			t.Fatalf("poll at %v: %v (%d records)", off, err, len(recs))
		}
		return recs[0]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	offsets := []int{0, n - 1}
	for range 25 {
		offsets = append(offsets, rng.IntN(n))
	}
	sort.Ints(offsets)
	for _, o := range offsets {
		r := first(client.OffsetAt(int64(o)))
		if r.Offset != int64(o) || !strings.HasPrefix(string(r.Value), fmt.Sprintf("r%05d-", o)) {
			t.Fatalf("fetch at offset %d returned offset %d %q", o, r.Offset, r.Value[:6])
		}
		// A time between records o-1 and o, and exactly o's.
		for _, at := range []time.Time{ts(o), ts(o).Add(-5 * time.Millisecond)} {
			r := first(client.OffsetAtTime(at))
			if r.Offset != int64(o) {
				t.Fatalf("fetch at time of record %d (%s) returned offset %d", o, at.Sub(base), r.Offset)
			}
		}
	}
	lo, err := cl.ListOffsets(ctx, tp, ts(n).UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if lo.Offset != n {
		t.Fatalf("time after the last record: offset %d, want the end %d", lo.Offset, n)
	}
	if _, err := cl.ListOffsets(ctx, tp, -2); err != nil {
		t.Fatal(err)
	}
	cons, err := cl.NewConsumer(client.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if err := cons.Assign(ctx, map[client.TopicPartition]client.Offset{tp: client.OffsetAt(n + 10)}); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = cons.Poll(cctx)
		if !errors.Is(err, client.ErrOffsetOutOfRange) {
			t.Fatalf("fetch beyond the end: want ErrOffsetOutOfRange, got %v", err)
		}
	}
}

// TestBrokerBadInput: corrupt, oversized and misaddressed batches and bad
// topic requests get clear errors, and nothing already acknowledged is
// affected.
func TestBrokerBadInput(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "good", 1, map[string]string{"max.message.bytes": "2048"})
	p, err := cl.NewProducer(client.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.ProduceSync(ctx, &client.Record{Topic: "good", Partition: 0, Value: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.brokers[0].Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bc := brokerpb.NewBrokerClient(conn)
	batch := func(value string) []byte {
		b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, Records: []recordbatch.Record{{TimestampMs: 1, Value: []byte(value)}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	corrupt := batch("corrupt")
	corrupt[len(corrupt)-1] ^= 0xff
	for _, tc := range []struct {
		name, topic string
		partition   int32
		records     []byte
		reason      string
		message     string
	}{
		{"bad crc", "good", 0, corrupt, "CORRUPT_BATCH", "crc"},
		{"truncated", "good", 0, batch("short")[:30], "CORRUPT_BATCH", ""},
		{"too large", "good", 0, batch(strings.Repeat("x", 4096)), "TOO_LARGE", "at most 2048"},
		{"unknown topic", "nope", 0, batch("x"), "NOT_FOUND", "nope"},
		{"unknown partition", "good", 7, batch("x"), "NOT_FOUND", "partitions 0..0"},
	} {
		resp, err := bc.Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{
			{Topic: tc.topic, Partition: tc.partition, Records: tc.records}}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		pe := resp.Partitions[0].Error
		if pe.GetInfo().GetReason() != tc.reason || !strings.Contains(pe.GetMessage(), tc.message) {
			t.Errorf("%s: got %s %q, want %s containing %q", tc.name, pe.GetInfo().GetReason(), pe.GetMessage(), tc.reason, tc.message)
		}
	}
	// An acks value the protocol does not define: INVALID, not INTERNAL.
	if _, err := bc.Produce(ctx, &brokerpb.ProduceRequest{Acks: brokerpb.Acks(7), Partitions: []*brokerpb.ProducePartition{
		{Topic: "good", Partition: 0, Records: batch("odd acks")}}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "acks 7") {
		t.Errorf("produce with acks 7: %v, want InvalidArgument naming acks 7", err)
	}
	for _, tc := range []struct {
		name       string
		partitions int32
		configs    map[string]string
		message    string
	}{
		{"bad/name", 1, nil, "only ASCII letters"},
		{"ok", 0, nil, "partitions"},
		{"ok", 1, map[string]string{"retention.ms": "soon"}, "retention.ms"},
		{"ok", 1, map[string]string{"no.such.config": "1"}, "unknown topic config"},
		{"ok", 1, map[string]string{"ensemble": "5"}, "writable bookies"},
		{"good", 1, nil, "exists"},
	} {
		_, err := cl.CreateTopic(ctx, tc.name, tc.partitions, tc.configs)
		if err == nil || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("create %q %d %v: %v, want an error containing %q", tc.name, tc.partitions, tc.configs, err, tc.message)
		}
	}
	if _, err := p.ProduceSync(ctx, &client.Record{Topic: "good", Partition: 0, Value: []byte("second")}); err != nil {
		t.Fatal(err)
	}
	recs := loadtest.ReadAll(t, cl, "good", 1)[0]
	if len(recs) != 2 || string(recs[0].Value) != "first" || string(recs[1].Value) != "second" {
		t.Fatalf("log after bad input: %d records", len(recs))
	}
	// A config change reaches the owner while it serves the partition.
	if _, err := cl.AlterTopicConfigs(ctx, "good", map[string]string{"max.message.bytes": "65536"}, nil); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 10*time.Second, "larger batches accepted after alter", func() error {
		resp, err := bc.Produce(ctx, &brokerpb.ProduceRequest{Partitions: []*brokerpb.ProducePartition{
			{Topic: "good", Partition: 0, Records: batch(strings.Repeat("y", 4096))}}})
		if err != nil {
			return err
		}
		if pe := resp.Partitions[0].Error; pe != nil {
			return errors.New(pe.Message)
		}
		return nil
	})
}

// TestBrokerDrainAndLag: a broker stopped with SIGTERM hands its partitions
// over while a producer writes, and the producer sees no error; the group
// lag metric of the coordinator matches the committed offsets.
func TestBrokerDrainAndLag(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 2, "--lag-interval", "200ms")
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "drain", 4, nil)
	load := loadtest.Start(t, cl, loadtest.Config{Topic: "drain", Keys: 8, Rate: 0, Producer: client.ProducerConfig{Linger: 2 * time.Millisecond}})
	load.AwaitAcks(t, 100, "the load before the drain")
	leaving := c.brokers[1]
	stopped := time.Now()
	leaving.Stop(30 * time.Second) // SIGTERM: drain, then exit
	t.Logf("%s drained and exited in %s", leaving.ID, time.Since(stopped).Round(time.Millisecond))
	load.AwaitAcks(t, 100, "the load after the drain")
	acks := load.Finish(t).Acks
	for part := int32(0); part < 4; part++ {
		if o, err := ownerOf(ctx, cl, "drain", part); err != nil || o != c.brokers[0].Listen {
			t.Fatalf("partition %d owner %q (%v), want %s", part, o, err, c.brokers[0].Listen)
		}
	}
	log := loadtest.ReadAll(t, cl, "drain", 4)
	loadtest.CheckExactlyOnce(t, log, acks)
	t.Logf("%d records acknowledged across the drain, none failed", len(acks))

	// Lag: commit offset 10 of every partition; the coordinator reports
	// the rest of each partition as lag.
	commits := map[client.TopicPartition]int64{}
	var want int64
	for part, recs := range log {
		commits[client.TopicPartition{Topic: "drain", Partition: part}] = 10
		want += int64(len(recs)) - 10
	}
	if err := cl.CommitGroupOffsets(ctx, "lagging", commits); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 10*time.Second, "lag metric", func() error {
		got, err := metricValue("http://"+c.brokers[0].AdminAddr+"/metrics", `strata_broker_group_lag_records{group="lagging",topic="drain"}`)
		if err != nil {
			return err
		}
		if int64(got) != want {
			return fmt.Errorf("lag %v, want %d", got, want)
		}
		return nil
	})
}

// metricValue reads one sample from a Prometheus text endpoint.
func metricValue(url, series string) (float64, error) {
	return metricValueWith(http.DefaultClient, url, series)
}

// metricsText fetches a Prometheus text endpoint.
func metricsText(url string) (string, error) { return metricsTextWith(http.DefaultClient, url) }

// metricValueWith is metricValue through c (HTTPS with an admin
// certificate, on a TLS node).
func metricValueWith(c *http.Client, url, series string) (float64, error) {
	body, err := metricsTextWith(c, url)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no %s", series)
}

// metricsTextWith fetches a Prometheus text endpoint through c; any
// answer but 200 is an error.
func metricsTextWith(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), err
}

// TestBrokerMetadLeaderKill: kill -9 metad's leader while producing: the
// brokers keep serving (a new leader restarts every lease clock), no
// record fails, every acknowledged record is stored once.
func TestBrokerMetadLeaderKill(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 2)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "metakill", 4, nil)
	load := loadtest.Start(t, cl, loadtest.Config{Topic: "metakill", Keys: 8, Rate: 0, Producer: client.ProducerConfig{Linger: 2 * time.Millisecond}})
	load.AwaitAcks(t, 100, "the load before the kill")
	mc := newMetaClient(t, c.meta)
	lead, err := leader(ctx, mc)
	if err != nil {
		t.Fatal(err)
	}
	c.meta.Member(lead).Kill()
	t.Logf("killed metad leader %s", lead)
	// 5 s of load without the old leader: an election and the lease
	// clocks it restarts.
	time.Sleep(5 * time.Second) // load through the election, not a wait for a condition
	load.AwaitAcks(t, 100, "the load after the kill")
	res := load.Finish(t)
	acks, gap := res.Acks, res.MaxGap
	t.Logf("%d records acknowledged; longest gap between acknowledgements %s", len(acks), gap.Round(time.Millisecond))
	loadtest.Verify(t, cl, "metakill", 4, acks)
}

// TestBrokerOrphanLedgerSweep: the controller deletes the ledgers that
// claim a partition but are not in its list (or whose topic is gone) once
// they are older than the grace (a sweep deletes what it finds in
// batches), and leaves alone the partition's own ledgers and ledgers of
// other users.
func TestBrokerOrphanLedgerSweep(t *testing.T) {
	skipShort(t)
	// The grace is far above the milliseconds between a roll's or a
	// takeover's ledger create and its list CAS, even on a loaded machine:
	// the partition's own ledger must never look like an orphan.
	c := startStrata(t, 1, "--orphan-ledger-grace", "5s", "--orphan-ledger-interval", "200ms")
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "orph", 1, nil)
	p, err := cl.NewProducer(client.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.ProduceSync(ctx, &client.Record{Topic: "orph", Partition: 0, Value: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	env, _ := realLedgerEnv(t, c.meta)
	create := func(env ledger.Env, props map[string]string) uint64 {
		w, err := ledger.Create(ctx, env, ledger.CreateOptions{Properties: props})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.AppendSync(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return w.ID()
	}
	orphans := []uint64{
		create(env, map[string]string{"topic": "orph", "partition": "0"}),
		create(env, map[string]string{"topic": "orph", "partition": "0"}),
		create(env, map[string]string{"topic": "never-created", "partition": "3"}),
	}
	foreign := create(env, map[string]string{"owner": "someone else"})
	// One more orphan, dated a second later: it outlives the grace a
	// second after the others, so once it is gone sweeps have run for a
	// second past theirs.
	later := env
	later.Now = func() time.Time { return time.Now().Add(time.Second) }
	lastOrphan := create(later, map[string]string{"topic": "orph", "partition": "0"})
	// existence asks metad, retrying what a loaded machine's metad may
	// answer for a moment (an election, a deadline).
	existence := func(id uint64) (bool, error) {
		_, _, err := env.Meta.Get(ctx, id)
		if err != nil && !errors.Is(err, ledger.ErrNoSuchLedger) {
			return false, err
		}
		return err == nil, nil
	}
	exists := func(id uint64) bool {
		var found bool
		testwait.UntilNil(t, 30*time.Second, fmt.Sprintf("metad answers about ledger %d", id), func() (err error) {
			found, err = existence(id)
			return err
		})
		return found
	}
	gone := func(ids ...uint64) func() error {
		return func() error {
			for _, id := range ids {
				if found, err := existence(id); err != nil || found {
					return fmt.Errorf("ledger %d still exists (%v)", id, err)
				}
			}
			return nil
		}
	}
	testwait.UntilNil(t, 60*time.Second, "orphans deleted", gone(orphans...))
	testwait.UntilNil(t, 60*time.Second, "the later orphan deleted", gone(lastOrphan))
	// The sweeps (every 200ms) since the first orphans went deleted that
	// one and nothing else, and counted nothing twice.
	if !exists(foreign) {
		t.Fatalf("ledger %d without partition properties was deleted", foreign)
	}
	if n, err := metricValue("http://"+c.brokers[0].AdminAddr+"/metrics", "strata_broker_orphan_ledgers_deleted_total"); err != nil || n != float64(len(orphans)+1) {
		t.Fatalf("orphan ledgers deleted: %v (%v), want exactly %d", n, err, len(orphans)+1)
	}
	desc, err := cl.DescribeTopic(ctx, "orph")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range desc.Partitions[0].Ledgers {
		if !exists(l.LedgerId) {
			t.Fatalf("listed ledger %d was deleted", l.LedgerId)
		}
	}
	if recs := loadtest.ReadAll(t, cl, "orph", 1)[0]; len(recs) != 1 || string(recs[0].Value) != "kept" {
		t.Fatalf("partition data after the sweep: %d records", len(recs))
	}
}

// A controller whose clock runs ahead of the broker that created a ledger
// by more than the grace does not take that ledger for an old orphan: it
// deletes an unlisted ledger only once it has itself seen it unlisted for
// the grace.
func TestOrphanSweepOutlastsClockSkew(t *testing.T) {
	skipShort(t)
	clock := filepath.Join(t.TempDir(), "clock")
	if err := os.WriteFile(clock, []byte("+2h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const grace = 3 * time.Second
	c := &strataCluster{meta: proctest.StartMetad(t, bins["metad"], 3)}
	for i := 1; i <= 3; i++ {
		c.bookies = append(c.bookies, proctest.StartBookie(t, bins["bookie"], c.meta, fmt.Sprintf("b%d", i)))
	}
	c.brokers = append(c.brokers, proctest.StartBrokerEnv(t, bins["broker"], c.meta, "k1",
		[]string{clockfault.EnvVar + "=" + clock}, "--orphan-ledger-grace", grace.String(), "--orphan-ledger-interval", "100ms"))
	cl := c.client(t)
	createTopic(t, cl, "skew", 1, nil)
	ctx := context.Background()
	env, _ := realLedgerEnv(t, c.meta)
	created := time.Now()
	w, err := ledger.Create(ctx, env, ledger.CreateOptions{Properties: map[string]string{"topic": "skew", "partition": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// To the controller the ledger is two hours old from the start.
	testwait.UntilNil(t, 60*time.Second, "the unlisted ledger deleted", func() error {
		_, _, err := env.Meta.Get(ctx, w.ID())
		if errors.Is(err, ledger.ErrNoSuchLedger) {
			return nil
		}
		return fmt.Errorf("ledger %d still there (%v)", w.ID(), err)
	})
	if after := time.Since(created); after < grace {
		t.Fatalf("deleted %v after it was created, within the grace (%v): the controller's clock alone aged it", after, grace)
	}
}

// TestBrokerAckLevels: acks none, one, quorum and all each store every
// record exactly once (none answers without offsets).
func TestBrokerAckLevels(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	cl := c.client(t)
	ctx := context.Background()
	createTopic(t, cl, "acks", 2, nil)
	want := map[string]bool{}
	for _, acks := range []client.Acks{client.AcksNone, client.AcksOne, client.AcksQuorum, client.AcksAll} {
		p, err := cl.NewProducer(client.ProducerConfig{Acks: acks, Compression: recordbatch.CompressionLZ4})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed error
		for i := range 200 {
			v := fmt.Sprintf("%s-%d", acks, i)
			want[v] = true
			wg.Add(1)
			err := p.Produce(ctx, &client.Record{Topic: "acks", Partition: -1, Key: []byte(v), Value: []byte(v)}, func(r *client.Record, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err == nil && acks != client.AcksNone && r.Offset < 0 {
					err = fmt.Errorf("acks=%s: no offset for %s", acks, v)
				}
				if err != nil && failed == nil {
					failed = err
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if failed != nil {
			t.Fatalf("acks=%s: %v", acks, failed)
		}
	}
	testwait.UntilNil(t, 10*time.Second, "every record stored", func() error {
		log := loadtest.ReadAll(t, cl, "acks", 2)
		got := map[string]int{}
		for _, recs := range log {
			for _, r := range recs {
				got[string(r.Value)]++
			}
		}
		for v := range want {
			if got[v] != 1 {
				return fmt.Errorf("%s stored %d times", v, got[v])
			}
		}
		if len(got) != len(want) {
			return fmt.Errorf("%d distinct records, want %d", len(got), len(want))
		}
		return nil
	})
}
