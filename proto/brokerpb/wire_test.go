package brokerpb

import (
	"bytes"
	"math/rand"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/wirecodec/wirecodectest"
)

// TestWireFields: the hand-written encodings know every field of their
// messages.
func TestWireFields(t *testing.T) {
	for _, c := range []struct {
		m    proto.Message
		want []protowire.Number
	}{
		{&ProduceRequest{}, []protowire.Number{1, 2, 3}},
		{&ProducePartition{}, []protowire.Number{1, 2, 3}},
		{&FetchResponse{}, []protowire.Number{1}},
		{&FetchPartitionResult{}, []protowire.Number{1, 2, 3, 4, 5, 6, 7}},
	} {
		if got := wirecodectest.Fields(c.m); !slices.Equal(got, c.want) {
			t.Errorf("%T fields %v, wire.go handles %v: update wire.go", c.m, got, c.want)
		}
	}
}

var topics = []string{"", "orders", "ünïcode"}

func randomRecords(rng *rand.Rand) []byte {
	n := rng.Intn(3)
	if n == 0 {
		return nil
	}
	b := make([]byte, rng.Intn(1<<(6*n)))
	rng.Read(b)
	return b
}

func randomProduce(rng *rand.Rand) *ProduceRequest {
	m := &ProduceRequest{Acks: Acks(rng.Intn(4) - 1), TimeoutMs: int32(rng.Intn(3) * rng.Intn(100000))}
	if rng.Intn(4) == 0 {
		m.TimeoutMs = -1
	}
	for range rng.Intn(4) {
		p := &ProducePartition{Topic: topics[rng.Intn(3)], Partition: int32(rng.Intn(3) - 1), Records: randomRecords(rng)}
		wirecodectest.RandomUnknown(rng, p)
		m.Partitions = append(m.Partitions, p)
	}
	wirecodectest.RandomUnknown(rng, m)
	return m
}

func randomFetch(rng *rand.Rand) *FetchResponse {
	m := &FetchResponse{}
	for range rng.Intn(4) {
		p := &FetchPartitionResult{Topic: topics[rng.Intn(3)], Partition: int32(rng.Intn(3) - 1),
			HighWatermark: int64(rng.Intn(3)-1) * rng.Int63(), LogStartOffset: int64(rng.Intn(2)) * rng.Int63(),
			Records: randomRecords(rng)}
		if rng.Intn(3) == 0 {
			p.Error = &PartitionError{Code: int32(rng.Intn(5)), Message: "not the owner"}
		}
		wirecodectest.RandomUnknown(rng, p)
		m.Partitions = append(m.Partitions, p)
	}
	wirecodectest.RandomUnknown(rng, m)
	return m
}

// records lists every partition's records of a ProduceRequest or a
// FetchResponse.
func records(m proto.Message) [][]byte {
	var out [][]byte
	switch m := m.(type) {
	case *ProduceRequest:
		for _, p := range m.Partitions {
			out = append(out, p.Records)
		}
	case *FetchResponse:
		for _, p := range m.Partitions {
			out = append(out, p.Records)
		}
	}
	return out
}

var wireTypes = []struct {
	name string
	wirecodectest.Case
}{
	{"ProduceRequest", wirecodectest.Case{Empty: func() wirecodectest.Aliased { return &ProduceRequest{} },
		Random: func(rng *rand.Rand) wirecodectest.Buffered { return randomProduce(rng) }, Payloads: records}},
	{"FetchResponse", wirecodectest.Case{Empty: func() wirecodectest.Aliased { return &FetchResponse{} },
		Random: func(rng *rand.Rand) wirecodectest.Buffered { return randomFetch(rng) }, Payloads: records}},
}

// TestWire: MarshalBuffers is proto.Marshal byte for byte and references
// every partition's records; UnmarshalAlias decodes what proto encodes
// into records aliasing its input, and accepts and refuses damaged,
// truncated and concatenated encodings as protobuf does (W1-W3).
func TestWire(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, wt := range wireTypes {
		t.Run(wt.name, func(t *testing.T) { wirecodectest.CheckRandom(t, rng, 3000, wt.Case) })
	}
}

// TestWireRefusesInvalidUTF8: a topic that is not UTF-8 is refused both
// ways, as protobuf refuses it.
func TestWireRefusesInvalidUTF8(t *testing.T) {
	var p, req []byte
	p = protowire.AppendTag(p, 1, protowire.BytesType)
	p = protowire.AppendBytes(p, []byte{0xff, 0xfe})
	req = protowire.AppendTag(req, 3, protowire.BytesType)
	req = protowire.AppendBytes(req, p)
	if err := (&ProduceRequest{}).UnmarshalAlias(req); err == nil {
		t.Fatal("invalid UTF-8 topic decoded")
	}
	bad := string([]byte{0xff})
	if _, err := (&ProduceRequest{Partitions: []*ProducePartition{{Topic: bad}}}).MarshalBuffers(); err == nil {
		t.Fatal("invalid UTF-8 topic encoded (ProduceRequest)")
	}
	if _, err := (&FetchResponse{Partitions: []*FetchPartitionResult{{Topic: bad}}}).MarshalBuffers(); err == nil {
		t.Fatal("invalid UTF-8 topic encoded (FetchResponse)")
	}
}

// TestFetchRecordsMore: a partition's RecordsMore is sent inside its
// records field, referenced, so that a client receives exactly what one
// joined buffer would give; encoded apart (proto.Marshal) it decodes as
// protobuf decodes it, and AllRecords joins it.
func TestFetchRecordsMore(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for range 300 {
		m := randomFetch(rng)
		var joined []*FetchPartitionResult
		for _, p := range m.Partitions {
			for range rng.Intn(4) {
				p.RecordsMore = append(p.RecordsMore, randomRecords(rng))
			}
			j := proto.Clone(p).(*FetchPartitionResult)
			j.Records, j.RecordsMore = bytes.Join(append([][]byte{p.Records}, p.RecordsMore...), nil), nil
			if len(j.Records) == 0 {
				j.Records = nil
			}
			joined = append(joined, j)
		}
		want, err := proto.Marshal(&FetchResponse{Partitions: joined})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m.ProtoReflect().GetUnknown()...)
		bufs, err := m.MarshalBuffers()
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
			t.Fatalf("encoded as\n%x\nwant\n%x", got, want)
		}
		for _, p := range m.Partitions {
			for _, part := range append([][]byte{p.Records}, p.RecordsMore...) {
				if len(part) > 0 && !slices.ContainsFunc(bufs, func(b []byte) bool { return len(b) > 0 && &b[0] == &part[0] }) {
					t.Fatal("a records part was copied, not referenced")
				}
			}
		}
		var got FetchResponse
		if err := got.UnmarshalAlias(want); err != nil {
			t.Fatal(err)
		}
		for i, p := range got.Partitions {
			if len(p.RecordsMore) != 0 || !bytes.Equal(p.AllRecords(), joined[i].Records) {
				t.Fatalf("partition %d decoded records %x + %x, want %x", i, p.Records, p.RecordsMore, joined[i].Records)
			}
		}

		apart, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var split, ref FetchResponse
		if err := split.UnmarshalAlias(apart); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(apart, &ref); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&split, &ref) {
			t.Fatalf("parts apart: decoded %v, protobuf %v", &split, &ref)
		}
		for i, p := range split.Partitions {
			if !bytes.Equal(p.AllRecords(), joined[i].Records) {
				t.Fatalf("partition %d: AllRecords %x, want %x", i, p.AllRecords(), joined[i].Records)
			}
		}
	}
}

// A HeldFetchResponse is sent as MarshalBuffers encodes it, its records
// referenced, not copied, and releases its hold exactly once: when gRPC
// has released every buffer (as its transport does, in order, once each is
// written; or all at once when it drops the message), never before. A
// message without bytes releases at once.
func TestHeldFetchResponse(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for range 500 {
		m := randomFetch(rng)
		for _, p := range m.Partitions {
			for range rng.Intn(3) {
				p.RecordsMore = append(p.RecordsMore, randomRecords(rng))
			}
		}
		released := 0
		out, err := HeldFetchResponse{FetchResponse: m, Release: func() { released++ }}.MarshalSlice()
		if err != nil {
			t.Fatal(err)
		}
		bufs, err := m.MarshalBuffers()
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Join(bufs, nil)
		if got := out.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("MarshalSlice\n%x\nMarshalBuffers\n%x", got, want)
		}
		if len(want) == 0 {
			if released != 1 || len(out) != 0 {
				t.Fatalf("an empty message: %d buffers, released %d times, want none and once", len(out), released)
			}
			continue
		}
		for _, p := range m.Partitions {
			for _, part := range append([][]byte{p.Records}, p.RecordsMore...) {
				if len(part) > heldTailBytes && !slices.ContainsFunc(out, func(b mem.Buffer) bool {
					d := b.ReadOnlyData()
					return len(d) > 0 && &d[0] == &part[0]
				}) {
					t.Fatal("a records part was copied, not referenced")
				}
			}
		}
		// The transport's reader holds a reference on every buffer and
		// the send's own is released; then each buffer is released as
		// it is written, or all of them when the stream is reset.
		for _, b := range out {
			b.Ref()
		}
		out.Free()
		reset := rng.Intn(4) == 0
		for i, b := range out {
			if released != 0 {
				t.Fatalf("released with %d of %d buffers still held", len(out)-i, len(out))
			}
			if reset && i == len(out)/2 {
				out[i:].Free()
				break
			}
			b.Free()
		}
		if released != 1 {
			t.Fatalf("released %d times once every buffer was freed, want once", released)
		}
	}
}

func FuzzProduceRequestDecode(f *testing.F) { wirecodectest.FuzzDecode(f, 3, wireTypes[0].Case) }

func FuzzFetchResponseDecode(f *testing.F) { wirecodectest.FuzzDecode(f, 4, wireTypes[1].Case) }
