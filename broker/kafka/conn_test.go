package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/internal/testwait"
)

func sameKeys(a, b []kmsg.ApiVersionsResponseApiKey) bool {
	return slices.EqualFunc(a, b, func(x, y kmsg.ApiVersionsResponseApiKey) bool {
		return x.ApiKey == y.ApiKey && x.MinVersion == y.MinVersion && x.MaxVersion == y.MaxVersion
	})
}

// ApiVersions v0 to v4 list exactly what is registered (plus
// ApiVersions), sorted, with a v0 response header at every version.
func TestApiVersions(t *testing.T) {
	ts := startServer(t, Config{})
	c := dialRaw(t, ts.Addr().String())
	want := []kmsg.ApiVersionsResponseApiKey{
		{ApiKey: 0, MinVersion: 3, MaxVersion: 9},
		{ApiKey: 3, MinVersion: 0, MaxVersion: 12},
		{ApiKey: 18, MinVersion: 0, MaxVersion: 4},
	}
	for v := int16(0); v <= apiVersionsMaxVersion; v++ {
		resp := c.roundTrip(apiVersionsRequest(v)).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 || !sameKeys(resp.ApiKeys, want) {
			t.Errorf("v%d: error %d keys %+v, want %+v", v, resp.ErrorCode, resp.ApiKeys, want)
		}
	}
	// With SASL on, SaslHandshake and SaslAuthenticate are listed too.
	sec := startServer(t, Config{Security: newFakeSecurity(t, false, nil)})
	resp := dialRaw(t, sec.Addr().String()).roundTrip(apiVersionsRequest(3)).(*kmsg.ApiVersionsResponse)
	var keys []int16
	for _, k := range resp.ApiKeys {
		keys = append(keys, k.ApiKey)
	}
	if !slices.Equal(keys, []int16{0, 3, 17, 18, 36}) || resp.ApiKeys[2].MaxVersion != 1 || resp.ApiKeys[4].MaxVersion != 2 {
		t.Errorf("with SASL: %+v", resp.ApiKeys)
	}
}

// KIP-511: a version above the one served gets a v0 answer with
// UNSUPPORTED_VERSION and only ApiVersions's range, without its body
// being parsed; the connection stays open.
func TestApiVersionsFallback(t *testing.T) {
	ts := startServer(t, Config{})
	c := dialRaw(t, ts.Addr().String())
	// v5 as franz-go sends it, and a version 99 whose body is garbage.
	v99 := frame(apiVersionsRequest(4), 7)
	binary.BigEndian.PutUint16(v99[6:], 99)
	v99 = append(v99, 0xff, 0xfe, 0xfd)
	binary.BigEndian.PutUint32(v99, uint32(len(v99)-4))
	for _, f := range [][]byte{frame(apiVersionsRequest(5), 7), v99} {
		c.write(f)
		resp := c.recv(apiVersionsRequest(0), 7).(*kmsg.ApiVersionsResponse)
		want := []kmsg.ApiVersionsResponseApiKey{{ApiKey: 18, MinVersion: 0, MaxVersion: 4}}
		if resp.ErrorCode != kerr.UnsupportedVersion.Code || !sameKeys(resp.ApiKeys, want) {
			t.Fatalf("fallback: error %d keys %+v", resp.ErrorCode, resp.ApiKeys)
		}
	}
	if resp := c.roundTrip(apiVersionsRequest(4)).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 || len(resp.ApiKeys) != 3 {
		t.Fatalf("after the fallback: %+v", resp)
	}
	if got := testutil.ToFloat64(ts.metrics.requests.WithLabelValues("ApiVersions", "unknown")); got != 1 {
		t.Errorf("ApiVersions v99 counted %v times as an unknown version", got)
	}
	if got := testutil.ToFloat64(ts.metrics.errors.WithLabelValues("ApiVersions", "UNSUPPORTED_VERSION")); got != 2 {
		t.Errorf("UNSUPPORTED_VERSION counted %v times", got)
	}
}

// v3+ client software names and versions must match Kafka's pattern.
func TestApiVersionsSoftwareName(t *testing.T) {
	ts := startServer(t, Config{})
	c := dialRaw(t, ts.Addr().String())
	for _, tc := range []struct {
		name, version string
		ok            bool
	}{
		{"franz-go", "1.22.3", true},
		{"a", "0", true},
		{"librdkafka", "2.0.2-RC1", true},
		{"", "1.0", false},
		{"-lead", "1.0", false},
		{"trail.", "1.0", false},
		{"sp ace", "1.0", false},
		{"name", "1.0_beta", false},
	} {
		req := apiVersionsRequest(3)
		req.ClientSoftwareName, req.ClientSoftwareVersion = tc.name, tc.version
		resp := c.roundTrip(req).(*kmsg.ApiVersionsResponse)
		if ok := resp.ErrorCode == 0 && len(resp.ApiKeys) > 0; ok != tc.ok || (!ok && resp.ErrorCode != kerr.InvalidRequest.Code) {
			t.Errorf("%q %q: error %d, %d keys", tc.name, tc.version, resp.ErrorCode, len(resp.ApiKeys))
		}
	}
}

// K5: requests that cannot be served close their connection with one
// log line, reach no handler, and leave other connections alone.
func TestBadRequestsClose(t *testing.T) {
	ts := startServer(t, Config{})
	bystander := dialRaw(t, ts.Addr().String())
	withHeader := func(key, version int16, rest ...byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(8+len(rest)))
		b = binary.BigEndian.AppendUint16(b, uint16(key))
		b = binary.BigEndian.AppendUint16(b, uint16(version))
		b = binary.BigEndian.AppendUint32(b, 1)
		return append(b, rest...)
	}
	hugeArray := frame(metadataRequest(1, "a"), 1)
	// Metadata v1: header (8) + client id (2 + 8) before the topic count.
	binary.BigEndian.PutUint32(hugeArray[4+18:], 0x7fffffff)
	truncated := frame(metadataRequest(1, "topic"), 1)
	truncated = truncated[:len(truncated)-2]
	binary.BigEndian.PutUint32(truncated, uint32(len(truncated)-4))
	badTags := frame(metadataRequest(9), 1)
	badTags[4+18] = 5 // the header's tag count: five tags that are not there
	badTags = badTags[:4+19]
	binary.BigEndian.PutUint32(badTags, uint32(len(badTags)-4))
	for _, tc := range []struct {
		name   string
		frame  []byte
		reason string
	}{
		{"HTTP", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), reasonFrameTooLarge},
		{"2 GiB declared", []byte{0x80, 0, 0, 0, 1, 2, 3}, reasonFrameTooLarge},
		{"short header", []byte{0, 0, 0, 3, 0, 3, 0}, reasonMalformed},
		{"unknown key", withHeader(1000, 0, 0xff, 0xff), reasonUnknownAPI},
		{"negative key", withHeader(-1, 0, 0xff, 0xff), reasonUnknownAPI},
		{"not registered", frame(kmsg.NewPtrJoinGroupRequest(), 1), reasonUnknownAPI},
		{"above max", withHeader(3, 13, 0xff, 0xff), reasonUnsupportedVersion},
		{"below min", func() []byte { r := kmsg.NewPtrProduceRequest(); r.Version = 2; return frame(r, 1) }(), reasonUnsupportedVersion},
		{"negative version", withHeader(3, -1), reasonUnsupportedVersion},
		{"ApiVersions below 0", withHeader(18, -1), reasonUnsupportedVersion},
		{"huge array", hugeArray, reasonMalformed},
		{"truncated body", truncated, reasonMalformed},
		{"truncated client id", withHeader(3, 1, 0x00, 0x20, 'a'), reasonMalformed},
		{"header tags", badTags, reasonMalformed},
		{"control request over its cap", func() []byte {
			b := withHeader(3, 1, make([]byte, firstReadChunk)...)
			binary.BigEndian.PutUint32(b, uint32(DefaultMaxControlRequestBytes+1))
			return b
		}(), reasonFrameTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, handled := ts.closedBy(tc.reason), ts.handler.handled.Load()
			c := dialRaw(t, ts.Addr().String())
			c.write(tc.frame)
			c.expectClosed()
			ts.waitClosedBy(t, tc.reason, before+1)
			if lines := ts.closeLines(c); len(lines) != 1 || lines[0].attrs["reason"] != tc.reason {
				t.Errorf("log records %+v, want one of reason %s", lines, tc.reason)
			}
			if ts.handler.handled.Load() != handled {
				t.Error("a handler saw the request")
			}
			if resp := bystander.roundTrip(metadataRequest(1)).(*kmsg.MetadataResponse); len(resp.Brokers) != 1 {
				t.Fatalf("the other connection: %+v", resp)
			}
		})
	}
}

// A frame declaring 2 GiB is refused before anything is allocated for
// it, and a frame under the cap that is declared large but sent slowly
// holds about what was sent.
func TestFrameSizeAllocatesNothingNearDeclared(t *testing.T) {
	ts := startServer(t, Config{})
	allocated := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.TotalAlloc
	}
	before := allocated()
	c := dialRaw(t, ts.Addr().String())
	c.write([]byte{0x7f, 0xff, 0xff, 0xff})
	c.write(frame(metadataRequest(1), 1))
	c.expectClosed()
	ts.waitClosedBy(t, reasonFrameTooLarge, 1)
	if grew := allocated() - before; grew > 16<<20 {
		t.Errorf("a refused 2 GiB frame allocated %d bytes", grew)
	}

	before = allocated()
	received := testutil.ToFloat64(ts.metrics.received)
	slow := dialRaw(t, ts.Addr().String())
	slow.write(binary.BigEndian.AppendUint32(nil, 99<<20))
	slow.write(make([]byte, 1<<20))
	testwait.Until(t, waitTimeout, "1 MiB of the frame received", func() bool {
		return testutil.ToFloat64(ts.metrics.received) >= received+4+1<<20
	})
	if grew := allocated() - before; grew > 8<<20 {
		t.Errorf("1 MiB received of a 99 MiB frame: %d bytes allocated", grew)
	}
}

// K1, K2: requests are handled in order as they arrive while earlier
// Replies block; responses go out in request order, nothing for acks=0.
func TestPipelinedInOrder(t *testing.T) {
	ts := startServer(t, Config{})
	c := dialRaw(t, ts.Addr().String())
	first := metadataRequest(1, "block:a")
	second := metadataRequest(1, "block:b")
	third := kmsg.NewPtrProduceRequest()
	third.Version, third.Acks = 7, 0
	fourth := metadataRequest(1, "d")
	corrs := []int32{c.send(first), c.send(second), c.send(third), c.send(fourth)}
	testwait.Until(t, waitTimeout, "every request handled while the first Reply blocks", func() bool {
		return ts.handler.handled.Load() == 4
	})
	ts.handler.release("b") // the second Reply finishes first, but waits its turn
	// Deliberately let time pass: nothing may be written before the first
	// Reply finishes.
	_ = c.nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _ := c.nc.Read(make([]byte, 1)); n != 0 {
		t.Fatal("a response was written before the first request's")
	}
	ts.handler.release("a")
	for i, req := range []*kmsg.MetadataRequest{first, second, fourth} {
		corr := corrs[i]
		if i == 2 {
			corr = corrs[3] // the acks=0 produce has no response
		}
		resp := c.recv(req, corr).(*kmsg.MetadataResponse)
		if *resp.Topics[0].Topic != *req.Topics[0].Topic {
			t.Errorf("response %d for %q", i, *resp.Topics[0].Topic)
		}
	}
	// acks=1 gets its answer, through the flexible header (Produce v9).
	produce := kmsg.NewPtrProduceRequest()
	produce.Version, produce.Acks = 9, 1
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "t"
	pt.Partitions = []kmsg.ProduceRequestTopicPartition{kmsg.NewProduceRequestTopicPartition()}
	produce.Topics = []kmsg.ProduceRequestTopic{pt}
	if resp := c.roundTrip(produce).(*kmsg.ProduceResponse); len(resp.Topics) != 1 || resp.Topics[0].Topic != "t" {
		t.Errorf("produce response %+v", resp)
	}
	if got := testutil.ToFloat64(ts.metrics.errors.WithLabelValues("Metadata", "UNKNOWN_TOPIC_OR_PARTITION")); got != 3 {
		t.Errorf("error codes counted %v", got)
	}
}

// K3: at InFlightPerConnection unanswered requests the reader waits: no
// more are handled until one is answered.
func TestInFlightBound(t *testing.T) {
	ts := startServer(t, Config{InFlightPerConnection: 2})
	c := dialRaw(t, ts.Addr().String())
	reqs := []*kmsg.MetadataRequest{metadataRequest(1, "block:a"), metadataRequest(1, "x"), metadataRequest(1, "y"), metadataRequest(1, "z")}
	var corrs []int32
	for _, r := range reqs {
		corrs = append(corrs, c.send(r))
	}
	testwait.Until(t, waitTimeout, "two requests handled", func() bool { return ts.handler.handled.Load() == 2 })
	// Deliberately let time pass: the third must not be handled while two
	// are unanswered.
	time.Sleep(100 * time.Millisecond)
	if n := ts.handler.handled.Load(); n != 2 {
		t.Fatalf("%d requests handled with 2 unanswered and a bound of 2", n)
	}
	ts.handler.release("a")
	for i, r := range reqs {
		c.recv(r, corrs[i])
	}
	if n := ts.handler.handled.Load(); n != 4 {
		t.Fatalf("%d handled", n)
	}
}

// A connection that sends nothing for IdleTimeout, with nothing
// unanswered, is closed; one waiting for a Reply is not.
func TestIdleTimeout(t *testing.T) {
	const idle = 150 * time.Millisecond
	ts := startServer(t, Config{IdleTimeout: idle})
	quiet := dialRaw(t, ts.Addr().String())
	quiet.expectClosed()
	ts.waitClosedBy(t, reasonIdle, 1)

	waiting := dialRaw(t, ts.Addr().String())
	req := metadataRequest(1, "block:a")
	corr := waiting.send(req)
	testwait.Until(t, waitTimeout, "the request handled", func() bool { return ts.handler.handled.Load() == 1 })
	// Deliberately wait past the idle timeout: a connection waiting for
	// its answer is not idle.
	time.Sleep(3 * idle)
	ts.handler.release("a")
	waiting.recv(req, corr)
	if n := ts.closedBy(reasonIdle); n != 1 {
		t.Fatalf("%v idle closes, want 1", n)
	}
	waiting.expectClosed()
	ts.waitClosedBy(t, reasonIdle, 2)
}

// Connections beyond MaxConnectionsPerIP are closed at accept and
// counted; closing one makes room.
func TestPerIPCap(t *testing.T) {
	ts := startServer(t, Config{MaxConnectionsPerIP: 2})
	a, b := dialRaw(t, ts.Addr().String()), dialRaw(t, ts.Addr().String())
	a.roundTrip(metadataRequest(1))
	b.roundTrip(metadataRequest(1))
	third := dialRaw(t, ts.Addr().String())
	third.expectClosed()
	if got := testutil.ToFloat64(ts.metrics.refused.WithLabelValues("per_ip_cap")); got != 1 {
		t.Fatalf("refused %v", got)
	}
	_ = a.nc.Close()
	testwait.Until(t, waitTimeout, "one connection open", func() bool { return testutil.ToFloat64(ts.metrics.open) == 1 })
	dialRaw(t, ts.Addr().String()).roundTrip(metadataRequest(1))
}

// Connections beyond MaxConnections, whatever their IPs, are closed at
// accept and counted; closing one makes room.
func TestTotalCap(t *testing.T) {
	ts := startServer(t, Config{MaxConnections: 2, MaxConnectionsPerIP: 10})
	a, b := dialRaw(t, ts.Addr().String()), dialRaw(t, ts.Addr().String())
	a.roundTrip(metadataRequest(1))
	b.roundTrip(metadataRequest(1))
	third := dialRaw(t, ts.Addr().String())
	third.expectClosed()
	if got := testutil.ToFloat64(ts.metrics.refused.WithLabelValues("total_cap")); got != 1 {
		t.Fatalf("refused %v", got)
	}
	_ = a.nc.Close()
	testwait.Until(t, waitTimeout, "one connection open", func() bool { return testutil.ToFloat64(ts.metrics.open) == 1 })
	dialRaw(t, ts.Addr().String()).roundTrip(metadataRequest(1))
}

// K5: a handler's error or panic, in Handle or in its Reply, or a
// response of the wrong API closes that connection only, logged once.
func TestHandlerFailuresClose(t *testing.T) {
	ts := startServer(t, Config{})
	bystander := dialRaw(t, ts.Addr().String())
	for _, tc := range []struct {
		topic, reason string
		level         slog.Level
	}{
		{"handle-panic", reasonHandlerPanic, slog.LevelError},
		{"reply-panic", reasonHandlerPanic, slog.LevelError},
		{"handle-error", reasonHandlerError, slog.LevelWarn},
		{"reply-error", reasonHandlerError, slog.LevelWarn},
		{"wrong-key", reasonHandlerError, slog.LevelWarn},
	} {
		before := ts.closedBy(tc.reason)
		c := dialRaw(t, ts.Addr().String())
		c.send(metadataRequest(1, tc.topic))
		c.expectClosed()
		ts.waitClosedBy(t, tc.reason, before+1)
		if lines := ts.closeLines(c); len(lines) != 1 || lines[0].level != tc.level || lines[0].attrs["reason"] != tc.reason {
			t.Errorf("%s: log records %+v, want one %v of reason %s", tc.topic, lines, tc.level, tc.reason)
		}
		bystander.roundTrip(metadataRequest(1))
	}
}

// K4: Close ends connections whose Replies are blocked (their context is
// cancelled); goleak checks nothing is left.
func TestCloseWithBlockedReplies(t *testing.T) {
	ts := startServer(t, Config{})
	c := dialRaw(t, ts.Addr().String())
	c.send(metadataRequest(1, "block:never"))
	testwait.Until(t, waitTimeout, "the request handled", func() bool { return ts.handler.handled.Load() == 1 })
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	c.expectClosed()
	if got := testutil.ToFloat64(ts.metrics.open); got != 0 {
		t.Errorf("%v connections open after Close", got)
	}
	again, err := New(Config{Address: ts.Addr().String(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("the address is still held after Close: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{Address: ":0"}, true},
		{"no address", Config{}, false},
		{"negative max", Config{Address: ":0", MaxRequestBytes: -1}, false},
		{"unauthenticated above max", Config{Address: ":0", MaxRequestBytes: 1000, MaxUnauthenticatedRequestBytes: 2000}, false},
		{"small max lowers the unauthenticated default", Config{Address: ":0", MaxRequestBytes: 1000}, true},
		{"negative idle", Config{Address: ":0", IdleTimeout: -1}, false},
		{"negative in-flight", Config{Address: ":0", InFlightPerConnection: -1}, false},
		{"negative cap", Config{Address: ":0", MaxConnectionsPerIP: -1}, false},
		{"negative total cap", Config{Address: ":0", MaxConnections: -1}, false},
		{"unknown mechanism", Config{Address: ":0", Mechanisms: []string{"GSSAPI"}}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	s := Config{Address: ":0", Security: newFakeSecurity(t, true, nil)}.String()
	if !strings.Contains(s, "auth=true") || !strings.Contains(s, "max_request_bytes=104857600") {
		t.Errorf("String: %s", s)
	}
}

func TestRegister(t *testing.T) {
	h := HandlerFunc(func(context.Context, *Conn, kmsg.Request) (Reply, error) { return nil, nil })
	r := NewRegistry()
	for _, tc := range []struct {
		name          string
		key, min, max int16
		h             Handler
		ok            bool
	}{
		{"Metadata", 3, 0, 12, h, true},
		{"twice", 3, 0, 12, h, false},
		{"unknown key", 1000, 0, 0, h, false},
		{"negative key", -1, 0, 0, h, false},
		{"ApiVersions", 18, 0, 3, h, false},
		{"SaslHandshake", 17, 0, 1, h, false},
		{"SaslAuthenticate", 36, 0, 2, h, false},
		{"above kmsg", 0, 0, 100, h, false},
		{"min above max", 1, 5, 4, h, false},
		{"negative min", 1, -1, 4, h, false},
		{"no handler", 1, 4, 12, nil, false},
		{"Fetch", 1, 4, 12, h, true},
	} {
		if err := r.Register(tc.key, tc.min, tc.max, tc.h); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrRegister)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
