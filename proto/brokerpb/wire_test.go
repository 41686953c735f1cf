package brokerpb

import (
	"math/rand"
	"slices"
	"testing"

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
		{&FetchPartitionResult{}, []protowire.Number{1, 2, 3, 4, 5, 6}},
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

func FuzzProduceRequestDecode(f *testing.F) { wirecodectest.FuzzDecode(f, 3, wireTypes[0].Case) }

func FuzzFetchResponseDecode(f *testing.F) { wirecodectest.FuzzDecode(f, 4, wireTypes[1].Case) }
