package kafka

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/internal/alloctest"
	"github.com/strata-log/strata/internal/racedetect"
)

// seedRequests are real requests encoded by kmsg: every API kmsg knows at
// its lowest, middle and highest version (empty bodies), and a few with
// content.
func seedRequests() []kmsg.Request {
	var out []kmsg.Request
	for key := int16(0); key < 128; key++ {
		probe := kmsg.RequestForKey(key)
		if probe == nil {
			continue
		}
		for _, v := range []int16{0, probe.MaxVersion() / 2, probe.MaxVersion()} {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			out = append(out, req)
		}
	}
	produce := kmsg.NewPtrProduceRequest()
	produce.Version, produce.Acks = 9, -1
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "orders"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = []byte("not a batch, but bytes")
	pt.Partitions = []kmsg.ProduceRequestTopicPartition{pp}
	produce.Topics = []kmsg.ProduceRequestTopic{pt}
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version, auth.SASLAuthBytes = 2, []byte("n,,n=alice,r=abc")
	handshake := kmsg.NewPtrSASLHandshakeRequest()
	handshake.Version, handshake.Mechanism = 1, "SCRAM-SHA-256"
	return append(out, produce, auth, handshake, metadataRequest(12, "a", "block:x"), metadataRequest(1, "b"), apiVersionsRequest(3))
}

// FuzzDecodeRequest feeds arbitrary request frames (without the size
// prefix) to the header and body decoding: it must not panic, and a
// request that decodes is of the key and version its header says.
func FuzzDecodeRequest(f *testing.F) {
	for _, req := range seedRequests() {
		f.Add(frame(req, 42)[4:])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		key, version, _, rest, err := readRequestStart(body)
		if err != nil {
			return
		}
		req, _, err := decodeRequest(key, version, rest)
		if err != nil {
			return
		}
		if req.Key() != key || req.GetVersion() != version {
			t.Fatalf("decoded %d v%d from a %d v%d header", req.Key(), req.GetVersion(), key, version)
		}
	})
}

// FuzzConnection feeds arbitrary bytes through a connection's reader
// (over net.Pipe), with the test handlers registered. The first byte
// picks the setup: bit 0 a listener requiring authentication, bit 1 an
// in-flight bound of 1. Nothing may panic, and the connection must end
// (Close waits for every goroutine it started).
func FuzzConnection(f *testing.F) {
	stream := func(reqs ...kmsg.Request) []byte {
		var b []byte
		for i, r := range reqs {
			b = append(b, frame(r, int32(i))...)
		}
		return b
	}
	seeds := seedRequests()
	f.Add(append([]byte{0}, stream(seeds...)...))
	f.Add(append([]byte{2}, stream(apiVersionsRequest(3), metadataRequest(1, "block:a"), metadataRequest(4, "b"))...))
	handshakeV0 := kmsg.NewPtrSASLHandshakeRequest()
	handshakeV0.Mechanism = "SCRAM-SHA-256"
	token := []byte("n,,n=alice,r=abcdef")
	v0 := append(stream(apiVersionsRequest(0), handshakeV0), binary.BigEndian.AppendUint32(nil, uint32(len(token)))...)
	f.Add(append([]byte{1}, append(v0, token...)...))
	f.Add([]byte{1, 0, 0, 0, 4, 0, 3, 0, 1})
	f.Add([]byte{0, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		h := &testHandler{host: "localhost", port: 9092}
		reg := NewRegistry()
		h.register(t, reg)
		cfg := Config{Address: "pipe", Handlers: reg, Logger: slog.New(slog.DiscardHandler), IdleTimeout: time.Minute}
		if data[0]&1 != 0 {
			sec, err := fuzzSecurity()
			if err != nil {
				t.Fatal(err)
			}
			cfg.Security = sec
		}
		if data[0]&2 != 0 {
			cfg.InFlightPerConnection = 1
		}
		s := newServer(cfg)
		client, server := net.Pipe()
		s.accept(server)
		drained := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, client)
			close(drained)
		}()
		_, _ = client.Write(data[1:])
		_ = client.Close()
		<-drained
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzSecurity is one fake for every fuzz input: building users runs
// PBKDF2, too slow per input.
var fuzzSecurity = sync.OnceValues(func() (*fakeSecurity, error) {
	return buildFakeSecurity(true, map[string]string{"alice": "alice-secret"})
})

// kmsg bounds a declared array length by the bytes left before it
// allocates: a count of 2^31-1 in a small frame allocates nothing near
// it and fails.
func TestDecodeHugeArrayAllocatesNothing(t *testing.T) {
	for _, v := range []int16{1, 9} { // int32 count; compact (uvarint) count
		body := frame(metadataRequest(v, "a"), 1)[4:]
		_, version, _, rest, err := readRequestStart(body)
		if err != nil {
			t.Fatal(err)
		}
		// After the client id (2+8) and, flexible, the header tags (1).
		at := 10
		if v >= 9 {
			at = 11
			rest = append(append(rest[:at:at], 0xff, 0xff, 0xff, 0xff, 0x07), rest[at+1:]...)
		} else {
			binary.BigEndian.PutUint32(rest[at:], 0x7fffffff)
		}
		var decodeErr error
		grew := alloctest.Bytes(func() { _, _, decodeErr = decodeRequest(3, version, rest) })
		if decodeErr == nil || grew > 1<<20 {
			t.Errorf("v%d: err %v, %d bytes allocated", v, decodeErr, grew)
		}
	}
}

// What kmsg allocates for a request is bounded by its frame's size times
// a constant; for arrays of near-empty elements (the worst case) that
// constant is 24 (a Metadata topic: a 32-byte struct and a 16-byte
// string header per 2 bytes on the wire). The package doc states this
// bound; this pins it.
func TestDecodeAmplificationAllocationBounded(t *testing.T) {
	if racedetect.Enabled {
		t.Skip("the race detector pads allocations")
	}
	const topics = 1 << 18
	names := make([]string, topics)
	req := metadataRequest(1, names...)
	body := frame(req, 1)[4:]
	_, version, _, rest, _ := readRequestStart(body)
	var decoded kmsg.Request
	grew := alloctest.Bytes(func() { decoded, _, _ = decodeRequest(3, version, rest) })
	if decoded == nil || len(decoded.(*kmsg.MetadataRequest).Topics) != topics {
		t.Fatal("the request did not decode")
	}
	if factor := float64(grew) / float64(len(body)); factor > 25 {
		t.Errorf("%d bytes decoded into %d allocated: x%.1f, documented at most x24", len(body), grew, factor)
	}
}
