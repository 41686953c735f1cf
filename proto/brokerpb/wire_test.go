package brokerpb

import (
	"bytes"
	"math/rand"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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
		fields := c.m.ProtoReflect().Descriptor().Fields()
		var got []protowire.Number
		for i := range fields.Len() {
			got = append(got, fields.Get(i).Number())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%T fields %v, wire.go handles %v: update wire.go", c.m, got, c.want)
		}
	}
}

func randomUnknown(rng *rand.Rand, m proto.Message) {
	if rng.Intn(3) != 0 {
		return
	}
	var unk []byte
	unk = protowire.AppendTag(unk, 12, protowire.VarintType)
	unk = protowire.AppendVarint(unk, rng.Uint64())
	unk = protowire.AppendTag(unk, 13, protowire.Fixed64Type)
	unk = protowire.AppendFixed64(unk, 7)
	m.ProtoReflect().SetUnknown(protoreflect.RawFields(unk))
}

func randomProduce(rng *rand.Rand) *ProduceRequest {
	m := &ProduceRequest{Acks: Acks(rng.Intn(4) - 1), TimeoutMs: int32(rng.Intn(3) * rng.Intn(100000))}
	if rng.Intn(4) == 0 {
		m.TimeoutMs = -1
	}
	for range rng.Intn(4) {
		p := &ProducePartition{Topic: []string{"", "orders", "ünïcode"}[rng.Intn(3)], Partition: int32(rng.Intn(3) - 1)}
		if n := rng.Intn(3); n > 0 {
			p.Records = make([]byte, rng.Intn(1<<(6*n)))
			rng.Read(p.Records)
		}
		randomUnknown(rng, p)
		m.Partitions = append(m.Partitions, p)
	}
	randomUnknown(rng, m)
	return m
}

// TestProduceRequestDecodesAsProto: UnmarshalAlias decodes (or refuses)
// what proto.Unmarshal does, on encodings, damaged ones, truncated ones
// and concatenations (W1), and Records alias the input (W3).
func TestProduceRequestDecodesAsProto(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := range 3000 {
		m := randomProduce(rng)
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		bufs, err := m.MarshalBuffers()
		if err != nil {
			t.Fatal(err)
		}
		if enc, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(m); !bytes.Equal(bytes.Join(bufs, nil), enc) {
			t.Fatalf("%d: %v\nMarshalBuffers %x\nproto.Marshal  %x", i, m, bytes.Join(bufs, nil), enc)
		}
		for j, p := range m.Partitions {
			if len(p.Records) > 0 && !referenced(bufs, p.Records) {
				t.Fatalf("%d: partition %d's records were copied", i, j)
			}
		}
		if i%2 == 0 {
			got := &ProduceRequest{}
			if err := got.UnmarshalAlias(b); err != nil || !proto.Equal(got, m) {
				t.Fatalf("%d: UnmarshalAlias = %v, %v; want %v", i, got, err, m)
			}
			for _, p := range got.Partitions {
				if len(p.Records) > 0 && !aliases(b, p.Records) {
					t.Fatalf("%d: records copied", i)
				}
			}
			continue
		}
		switch rng.Intn(3) {
		case 0:
			if len(b) > 0 {
				b = b[:rng.Intn(len(b))]
			}
		case 1:
			for range 1 + rng.Intn(3) {
				if len(b) > 0 {
					b[rng.Intn(len(b))] = byte(rng.Intn(256))
				}
			}
		case 2:
			c, _ := proto.Marshal(randomProduce(rng))
			b = append(b, c...)
		}
		checkSameDecode(t, b)
	}
	// A topic that is not UTF-8 is refused, as protobuf refuses it.
	var p, req []byte
	p = protowire.AppendTag(p, 1, protowire.BytesType)
	p = protowire.AppendBytes(p, []byte{0xff, 0xfe})
	req = protowire.AppendTag(req, 3, protowire.BytesType)
	req = protowire.AppendBytes(req, p)
	checkSameDecode(t, req)
	if err := (&ProduceRequest{}).UnmarshalAlias(req); err == nil {
		t.Fatal("invalid UTF-8 topic accepted")
	}
}

// referenced reports whether one of bufs is data itself.
func referenced(bufs [][]byte, data []byte) bool {
	for _, b := range bufs {
		if len(b) > 0 && &b[0] == &data[0] {
			return true
		}
	}
	return false
}

// aliases reports whether sub starts within b.
func aliases(b, sub []byte) bool {
	for i := range b {
		if &b[i] == &sub[0] {
			return true
		}
	}
	return false
}

func checkSameDecode(t *testing.T, b []byte) {
	checkSameDecodeOf(t, func() aliasMessage { return &ProduceRequest{} }, b)
}

type aliasMessage interface {
	proto.Message
	UnmarshalAlias([]byte) error
}

func checkSameDecodeOf(t *testing.T, empty func() aliasMessage, b []byte) {
	want := empty()
	wantErr := proto.Unmarshal(b, want)
	got := empty()
	gotErr := got.UnmarshalAlias(bytes.Clone(b))
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%x: UnmarshalAlias error %v, proto.Unmarshal error %v", b, gotErr, wantErr)
	}
	if wantErr == nil && !proto.Equal(got, want) {
		t.Fatalf("%x: UnmarshalAlias %v, proto.Unmarshal %v", b, got, want)
	}
}

func FuzzProduceRequestDecode(f *testing.F) {
	rng := rand.New(rand.NewSource(3))
	for range 8 {
		b, _ := proto.Marshal(randomProduce(rng))
		f.Add(b)
	}
	f.Fuzz(checkSameDecode)
}

func randomFetch(rng *rand.Rand) *FetchResponse {
	m := &FetchResponse{}
	for range rng.Intn(4) {
		p := &FetchPartitionResult{Topic: []string{"", "orders", "ünïcode"}[rng.Intn(3)], Partition: int32(rng.Intn(3) - 1),
			HighWatermark: int64(rng.Intn(3)-1) * rng.Int63(), LogStartOffset: int64(rng.Intn(2)) * rng.Int63()}
		if rng.Intn(3) == 0 {
			p.Error = &PartitionError{Code: int32(rng.Intn(5)), Message: "not the owner"}
		}
		if n := rng.Intn(3); n > 0 {
			p.Records = make([]byte, rng.Intn(1<<(6*n)))
			rng.Read(p.Records)
		}
		randomUnknown(rng, p)
		m.Partitions = append(m.Partitions, p)
	}
	randomUnknown(rng, m)
	return m
}

// TestFetchResponseWire: MarshalBuffers is proto.Marshal byte for byte
// and references every partition's records; UnmarshalAlias decodes (or
// refuses) what proto.Unmarshal does, on encodings and on damaged,
// truncated and concatenated ones (W1).
func TestFetchResponseWire(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	empty := func() aliasMessage { return &FetchResponse{} }
	for i := range 3000 {
		m := randomFetch(rng)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		bufs, err := m.MarshalBuffers()
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
			t.Fatalf("%d: %v\nMarshalBuffers %x\nproto.Marshal  %x", i, m, got, want)
		}
		for j, p := range m.Partitions {
			if len(p.Records) > 0 && !referenced(bufs, p.Records) {
				t.Fatalf("%d: partition %d's records were copied", i, j)
			}
		}
		got := &FetchResponse{}
		if err := got.UnmarshalAlias(want); err != nil || !proto.Equal(got, m) {
			t.Fatalf("%d: UnmarshalAlias = %v, %v; want %v", i, got, err, m)
		}
		switch rng.Intn(3) {
		case 0:
			if len(want) > 0 {
				want = want[:rng.Intn(len(want))]
			}
		case 1:
			for range 1 + rng.Intn(3) {
				if len(want) > 0 {
					want[rng.Intn(len(want))] = byte(rng.Intn(256))
				}
			}
		case 2:
			c, _ := proto.Marshal(randomFetch(rng))
			want = append(want, c...)
		}
		checkSameDecodeOf(t, empty, want)
	}
	bad := &FetchResponse{Partitions: []*FetchPartitionResult{{Topic: string([]byte{0xff})}}}
	if _, err := bad.MarshalBuffers(); err == nil {
		t.Fatal("invalid UTF-8 topic marshalled")
	}
}

func FuzzFetchResponseDecode(f *testing.F) {
	rng := rand.New(rand.NewSource(6))
	for range 8 {
		b, _ := proto.Marshal(randomFetch(rng))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSameDecodeOf(t, func() aliasMessage { return &FetchResponse{} }, b) })
}
