package broker_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/broker/brokertest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Clients that send many large fetches and stop reading their answers,
// over gRPC (16 calls on a connection) and over Kafka (16 requests in
// flight on a connection), hold at most their connections' shares of the
// fetch budget, and the broker at most the budget: its heap grows by no
// more than the budget while they stall, where each stalled fetch held
// its 15 MiB before (16 x 15 MiB per connection). Meanwhile other
// consumers catch up on 64 MiB and long polls are answered; once the
// stalled clients read, every stalled fetch completes; once they are
// closed instead, what they held is released: the budget ends at zero,
// each response released exactly once.
func TestStalledFetchReadersHoldOnlyTheBudget(t *testing.T) {
	const budget = 64 << 20
	cl := brokertest.Start(t, brokertest.Options{Kafka: true, Configure: func(_ int, cfg *broker.Config) {
		cfg.MaxInflightFetchBytes = budget
	}})
	b := cl.Brokers[0].Broker
	cl.CreateTopic("catch-up", catchUpPartitions, nil)
	cl.CreateTopic("tail", 4, nil)
	size := produceCatchUp(t, cl.Client(0), "catch-up")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	heapBefore := liveHeap()

	st := stallReaders(t, ctx, cl)
	catchUpBeside(t, cl)
	t.Logf("3 consumers caught up on %d MiB beside the stalled clients", size>>20)
	checkLongPolls(t, ctx, cl)

	grown := liveHeap() - heapBefore
	used, peak, limit := broker.FetchBudget(b)
	t.Logf("stalled: fetch budget %d MiB used, %d MiB at most (limit %d MiB, %d MiB a connection); heap grown by %d MiB",
		used>>20, peak>>20, limit>>20, broker.FetchConnShare(b)>>20, grown>>20)
	if peak > limit {
		t.Errorf("fetch responses held %d bytes at once, limit %d", peak, limit)
	}
	// What the responses hold, and the Kafka listener's copies of what
	// it counts (a joined record set, and the frame being written, per
	// connection): within the budget. The live heap also holds what the
	// rest of the process keeps at that moment (gRPC's transport buffers
	// of the stalled streams, the in-memory bookies' and the caches'
	// state), which moves with scheduling: 96 MiB was seen on a machine
	// busy with other clusters. Twice the budget still tells the budget
	// from none, where each stalled fetch held its 15 MiB (16 x 15 MiB on
	// each of the four stalled connections, 960 MiB).
	if bound := int64(2 * budget); grown > bound {
		t.Errorf("heap grew by %d MiB with readers stalled, bound %d MiB", grown>>20, bound>>20)
	}

	// One stalled client of each protocol reads: all its fetches
	// complete. The other is closed: what it held is released.
	st.grpc[0].unstall()
	st.grpc[1].Close()
	_ = st.kafka[0].SetReadDeadline(time.Now().Add(30 * time.Second))
	if err := readKafkaFetches(st.kafka[0], 16); err != nil {
		t.Fatalf("stalled Kafka client, once reading: %v", err)
	}
	st.kafka[1].Close()
	if err := st.grpcCalls[0].Wait(); err != nil {
		t.Fatalf("stalled gRPC client, once reading: %v", err)
	}
	_ = st.grpcCalls[1].Wait() // closed: its calls fail
	testwait.UntilNil(t, 30*time.Second, "the fetch budget back to zero", func() error {
		if used, _, _ := broker.FetchBudget(b); used != 0 {
			return fmt.Errorf("%d bytes still held", used)
		}
		return nil
	})
}

// stalledReaders are clients that sent fetches and do not read the
// answers.
type stalledReaders struct {
	grpc      []*stallConn
	grpcCalls [2]calls
	kafka     []net.Conn
}

// stallReaders starts two stalled clients per protocol, each with 16
// fetches of 15 MiB in flight, and waits until they hold their shares of
// the budget.
func stallReaders(t *testing.T, ctx context.Context, cl *brokertest.Cluster) *stalledReaders {
	st := &stalledReaders{}
	for c := range 2 {
		sc, bc := dialStalled(t, cl.Addr())
		st.grpc = append(st.grpc, sc)
		for i := range 16 {
			st.grpcCalls[c].Go(func() error {
				_, err := bc.Fetch(ctx, grpcFetchOf("catch-up", int64(i*100), 0), grpc.MaxCallRecvMsgSize(16<<20))
				return err
			})
		}
	}
	for range 2 {
		nc, err := net.Dial("tcp", cl.Brokers[0].KafkaAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		for i := range 16 {
			if _, err := nc.Write(kafkaFetchFrame(int32(i), "catch-up", int64(i*100), 0)); err != nil {
				t.Fatal(err)
			}
		}
		st.kafka = append(st.kafka, nc)
	}
	b := cl.Brokers[0].Broker
	share := broker.FetchConnShare(b)
	testwait.Until(t, 30*time.Second, "the stalled connections holding their shares", func() bool {
		used, _, _ := broker.FetchBudget(b)
		return used >= 4*(share-(1<<20))
	})
	return st
}

// catchUpBeside reads topic catch-up whole with two gRPC consumers and a
// Kafka one, each on a connection of its own.
func catchUpBeside(t *testing.T, cl *brokertest.Cluster) {
	var catchUps calls
	for range 2 {
		conn, err := grpc.NewClient(cl.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		catchUps.Go(func() error { return fetchAllGRPC(brokerpb.NewBrokerClient(conn), "catch-up") })
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(cl.KafkaAddrs()...), kgo.MaxVersions(kversion.V3_0_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	catchUps.Go(func() error { return fetchAllKafka(kc, "catch-up") })
	if err := catchUps.Wait(); err != nil {
		t.Fatalf("a consumer beside the stalled clients: %v", err)
	}
}

// grpcFetchOf fetches 4 MiB from each partition of topic from offset, in
// at most 15 MiB.
func grpcFetchOf(topic string, offset int64, maxWaitMs int32) *brokerpb.FetchRequest {
	req := &brokerpb.FetchRequest{MaxBytes: 15 << 20, MaxWaitMs: maxWaitMs}
	for p := range int32(catchUpPartitions) {
		req.Partitions = append(req.Partitions, &brokerpb.FetchPartition{Topic: topic, Partition: p, Offset: offset, MaxBytes: 4 << 20})
	}
	return req
}

// kafkaFetchFrame is a Fetch v11 request frame like grpcFetchOf's.
func kafkaFetchFrame(corr int32, topic string, offset int64, maxWaitMs int32) []byte {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 11, -1, maxWaitMs, 1, 15<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	for p := range int32(catchUpPartitions) {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = p, offset, 4<<20, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("fetch-test")).AppendRequest(nil, req, corr)
}

// readKafkaFetches reads n Fetch v11 responses and checks their errors.
func readKafkaFetches(nc net.Conn, n int) error {
	for range n {
		var size [4]byte
		if _, err := io.ReadFull(nc, size[:]); err != nil {
			return err
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(nc, body); err != nil {
			return err
		}
		resp := kmsg.NewPtrFetchResponse()
		resp.Version = 11
		if err := resp.ReadFrom(body[4:]); err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return fmt.Errorf("partition %d: error %d", p.Partition, p.ErrorCode)
				}
			}
		}
	}
	return nil
}

// checkLongPolls parks long polls on every partition of "tail", 4 over
// gRPC and 4 over Kafka, then appends to each partition: every poll
// answers with the batch.
func checkLongPolls(t *testing.T, ctx context.Context, cl *brokertest.Cluster) {
	b := cl.Brokers[0].Broker
	before := broker.FetchPartitionReads(b)
	var polls calls
	for p := range int32(4) {
		polls.Go(func() error {
			resp, err := cl.Client(0).Fetch(ctx, &brokerpb.FetchRequest{MaxWaitMs: 30_000, MinBytes: 1,
				Partitions: []*brokerpb.FetchPartition{{Topic: "tail", Partition: p}}})
			if err == nil && len(resp.Partitions[0].AllRecords()) == 0 {
				err = fmt.Errorf("gRPC long poll on tail/%d answered without the batch", p)
			}
			return err
		})
		nc, err := net.Dial("tcp", cl.Brokers[0].KafkaAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 11, -1, 30_000, 1, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "tail"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = p, 1<<20, -1
		rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
		req.Topics = []kmsg.FetchRequestTopic{rt}
		if _, err := nc.Write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 1)); err != nil {
			t.Fatal(err)
		}
		polls.Go(func() error { return readKafkaFetches(nc, 1) })
	}
	testwait.Until(t, 30*time.Second, "8 long polls parked", func() bool { return broker.FetchPartitionReads(b)-before >= 8 })
	for p := range int32(4) {
		produceBatch(t, cl, "tail", p, "wake up")
	}
	if err := polls.Wait(); err != nil {
		t.Fatal(err)
	}
}

// liveHeap is the heap in use after two collections (the second empties
// what pools kept through the first).
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// stallConn is a client connection whose reads can be held back: a
// client that stops reading its answers.
type stallConn struct {
	net.Conn
	mu   sync.Mutex
	gate chan struct{} // non-nil: reads wait until it is closed
}

func (c *stallConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return c.Conn.Read(b)
}

func (c *stallConn) unstall() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
}

func (c *stallConn) Close() error {
	c.unstall()
	return c.Conn.Close()
}

// dialStalled connects a gRPC client to addr and, once connected, stops
// its reads.
func dialStalled(t *testing.T, addr string) (*stallConn, brokerpb.BrokerClient) {
	t.Helper()
	var sc *stallConn
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			sc = &stallConn{Conn: nc}
			return sc, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	bc := brokerpb.NewBrokerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := bc.Metadata(ctx, &brokerpb.MetadataRequest{Topics: []string{"catch-up"}}); err != nil {
		t.Fatal(err)
	}
	sc.mu.Lock()
	sc.gate = make(chan struct{})
	sc.mu.Unlock()
	return sc, bc
}

// calls runs functions in goroutines and keeps the first error.
type calls struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func (c *calls) Go(f func() error) {
	c.wg.Go(func() {
		if err := f(); err != nil {
			c.mu.Lock()
			c.err = cmp.Or(c.err, err)
			c.mu.Unlock()
		}
	})
}

// Wait waits for every function and returns the first error.
func (c *calls) Wait() error {
	c.wg.Wait()
	return c.err
}
