package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
)

// Bounds on the broker's heap in TestKafkaHostile, in MiB. The attacks
// declare frames of 100 MiB to 2 GiB and arrays of 2^31 elements: a
// broker that allocated what a peer declares would grow by that much.
// What is left is the refusals' own cost and the steady load's.
const (
	// hostileLiveHeapBoundMiB bounds the live heap (after a forced GC)
	// while 32 connections each hold a frame declared at 99 MiB of which
	// 1 KiB arrived: the read buffer starts at 64 KiB, so about 2 MiB.
	hostileLiveHeapBoundMiB = 24
	// hostileHeapSysBoundMiB bounds the growth of the heap's reservation
	// (go_memstats_heap_sys_bytes, which a transient allocation raises
	// and which does not shrink) over every attack. The largest legal
	// one, a 600 KB Metadata request of 100,100 topic names, costs about
	// 20 MiB: kmsg's decoded structs are some 30 times their wire size.
	hostileHeapSysBoundMiB = 64
)

// kafkaHeader is a request header v1: API key, version, correlation id
// and client id.
func kafkaHeader(key, version int16) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, 1)
	return append(binary.BigEndian.AppendUint16(b, 7), "hostile"...)
}

// sizePrefixed is body behind an int32 size that says declared bytes.
func sizePrefixed(declared uint32, body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, declared), body...)
}

// framed is a frame of exactly body.
func framed(body []byte) []byte { return sizePrefixed(uint32(len(body)), body) }

// closedByServer waits until the peer closes nc (EOF or a reset, any
// bytes before that discarded) and fails on a timeout: a connection the
// server keeps open after a protocol violation.
func closedByServer(nc net.Conn, within time.Duration) error {
	_ = nc.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, nc)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("still open after %v", within)
	}
	return nil // EOF (io.Copy's nil) or a reset
}

// kafkaRoundTrip sends req at its own version on a new connection to addr
// and decodes the answer.
func kafkaRoundTrip[R kmsg.Response](t *testing.T, addr string, req kmsg.Request) R {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := nc.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("hostile")).AppendRequest(nil, req, 1)); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatal(err)
	}
	resp := req.ResponseKind()
	body = body[4:] // correlation id
	if resp.IsFlexible() {
		body = body[1:] // the header's empty tag section
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return resp.(R)
}

// brokerHeap is the broker's heap in bytes from its /metrics: live
// (go_memstats_heap_alloc_bytes just after the GC that /debug/pprof/heap?gc=1
// runs) and reserved (go_memstats_heap_sys_bytes).
func brokerHeap(t *testing.T, b *proctest.BrokerNode) (live, reserved float64) {
	t.Helper()
	resp, err := http.Get("http://" + b.AdminAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	metrics := "http://" + b.AdminAddr + "/metrics"
	if live, err = metricValue(metrics, "go_memstats_heap_alloc_bytes"); err != nil {
		t.Fatal(err)
	}
	if reserved, err = metricValue(metrics, "go_memstats_heap_sys_bytes"); err != nil {
		t.Fatal(err)
	}
	return live, reserved
}

func mib(bytes float64) float64 { return bytes / (1 << 20) }

// TestKafkaHostile sends a real broker's Kafka listener what no client
// should: frames declared above the 100 MiB cap (one of 2 GiB, an HTTP
// request read as a size), a frame shorter than a header, an unknown API
// key and one not served, arrays declared with 2^31-1 elements in small
// frames, 32 connections that each declare a 99 MiB frame and send 1 KiB
// of it, and a Metadata request naming 1001 topics 100 times each (too
// many for the broker, answered once per name). Each violating connection
// is closed, counted under its reason; the broker's heap stays within a few MiB of where it was
// (hostile*BoundMiB); and a franz-go producer writing meanwhile has every
// record acknowledged and stored exactly once.
func TestKafkaHostile(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1, "--enable-pprof")
	b := c.brokers[0]
	cl := c.client(t)
	createTopic(t, cl, "kafka-steady", 2, nil)
	load := loadtest.StartWith(t, kafkaProducer{kafkaClient(t, c.kafkaAddrs())}, loadtest.Config{Topic: "kafka-steady", Keys: 8, Rate: 200})
	load.AwaitAcks(t, 100, "the load before the attacks")
	startLive, startReserved := brokerHeap(t, b)
	t.Logf("broker heap before: %.1f MiB live, %.1f MiB reserved", mib(startLive), mib(startReserved))

	hugeArray := binary.BigEndian.AppendUint32(nil, 0x7fffffff)
	produceHead := binary.BigEndian.AppendUint16(nil, 0xffff)        // null transactional id
	produceHead = binary.BigEndian.AppendUint16(produceHead, 0xffff) // acks -1
	produceHead = binary.BigEndian.AppendUint32(produceHead, 30000)  // timeout
	for _, tc := range []struct {
		name, reason string
		bytes        []byte
	}{
		{"a frame one byte over the cap", "frame_too_large", sizePrefixed(100<<20+1, make([]byte, 1024))},
		{"a 2 GiB frame", "frame_too_large", sizePrefixed(0x7fffffff, make([]byte, 1024))},
		{"an HTTP request", "frame_too_large", []byte("GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n")},
		{"a frame shorter than a header", "malformed_request", framed([]byte{0, 3, 0, 1, 0})},
		{"garbage after a Metadata header", "malformed_request", framed(append(kafkaHeader(3, 9), 0xff, 0xff, 0xff, 0xff, 0xff))},
		{"an unknown API key", "unknown_api", framed(kafkaHeader(1000, 0))},
		{"an API not served (AddPartitionsToTxn)", "unknown_api", framed(append(kafkaHeader(24, 0), make([]byte, 16)...))},
		{"a Metadata array of 2^31-1 topics", "malformed_request", framed(append(append(kafkaHeader(3, 1), hugeArray...), make([]byte, 64)...))},
		{"a Produce array of 2^31-1 topics", "malformed_request", framed(append(append(append(kafkaHeader(0, 7), produceHead...), hugeArray...), make([]byte, 64)...))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			series := fmt.Sprintf(`strata_broker_kafka_connections_closed_total{reason=%q}`, tc.reason)
			before, _ := metricValue("http://"+b.AdminAddr+"/metrics", series)
			nc, err := net.DialTimeout("tcp", b.KafkaAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			if err := closedByServer(nc, 10*time.Second); err != nil {
				t.Fatalf("the connection: %v", err)
			}
			testwait.UntilNil(t, 10*time.Second, "the close counted as "+tc.reason, func() error {
				v, err := metricValue("http://"+b.AdminAddr+"/metrics", series)
				if err == nil && v != before+1 {
					err = fmt.Errorf("%s = %v, was %v", series, v, before)
				}
				return err
			})
		})
	}

	t.Run("a Metadata request repeating 1001 names 100 times", func(t *testing.T) {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 1
		for i := range 1001 * 100 {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(fmt.Sprintf("t%d", i%1001))
			req.Topics = append(req.Topics, rt)
		}
		resp := kafkaRoundTrip[*kmsg.MetadataResponse](t, b.KafkaAddr, req)
		if len(resp.Topics) != 1001 {
			t.Fatalf("answered %d topics, want each of the 1001 names once", len(resp.Topics))
		}
	})

	t.Run("frames declared large, barely sent", func(t *testing.T) {
		var held []net.Conn
		defer func() {
			for _, nc := range held {
				nc.Close()
			}
		}()
		for range 32 {
			nc, err := net.DialTimeout("tcp", b.KafkaAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, nc)
			if _, err := nc.Write(sizePrefixed(99<<20, append(kafkaHeader(0, 7), make([]byte, 1024)...))); err != nil {
				t.Fatal(err)
			}
		}
		testwait.UntilNil(t, 10*time.Second, "the 32 connections open on the broker", func() error {
			v, err := metricValue("http://"+b.AdminAddr+"/metrics", "strata_broker_kafka_connections_open")
			if err == nil && v < 32 {
				err = fmt.Errorf("%v open", v)
			}
			return err
		})
		live, _ := brokerHeap(t, b)
		t.Logf("live heap with 32 frames of 99 MiB declared: %.1f MiB (%.1f before)", mib(live), mib(startLive))
		if grew := mib(live - startLive); grew > hostileLiveHeapBoundMiB {
			t.Errorf("the live heap grew by %.1f MiB with 32 partial frames held, bound %d MiB", grew, hostileLiveHeapBoundMiB)
		}
	})

	load.AwaitAcks(t, 200, "the load after the attacks")
	_, endReserved := brokerHeap(t, b)
	t.Logf("broker heap reserved after: %.1f MiB (%.1f before)", mib(endReserved), mib(startReserved))
	if grew := mib(endReserved - startReserved); grew > hostileHeapSysBoundMiB {
		t.Errorf("the heap's reservation grew by %.1f MiB, bound %d MiB", grew, hostileHeapSysBoundMiB)
	}
	res := load.Finish(t)
	loadtest.CheckExactlyOnce(t, clientLog(kafkaReadAll(t, c.kafkaAddrs(), "kafka-steady")), res.Acks)
	t.Logf("%d records acknowledged while the attacks ran (longest gap %v), each stored once", len(res.Acks), res.MaxGap.Round(time.Millisecond))
}
