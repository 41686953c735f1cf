package bookiepb

import (
	"bytes"
	"math/rand"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// wireMessage is a message with the hand-written encoding.
type wireMessage interface {
	proto.Message
	MarshalBuffers() ([][]byte, error)
	UnmarshalAlias([]byte) error
}

// wireTypes are the messages of wire.go: a new empty one, and a random one.
var wireTypes = []struct {
	name   string
	empty  func() wireMessage
	random func(*rand.Rand) wireMessage
}{
	{"AddRequest", func() wireMessage { return &AddRequest{} }, func(rng *rand.Rand) wireMessage {
		m := &AddRequest{RequestId: pick(rng), LedgerId: pick(rng), EntryId: pick(rng), Lac: int64(pick(rng)),
			Payload: randomPayload(rng), Recovery: rng.Intn(2) == 0}
		randomUnknown(rng, m)
		return m
	}},
	{"ReadEntryResponse", func() wireMessage { return &ReadEntryResponse{} }, func(rng *rand.Rand) wireMessage {
		m := &ReadEntryResponse{Status: ReadStatus(rng.Intn(4) - 1), LedgerId: pick(rng), EntryId: pick(rng),
			Lac: int64(pick(rng)), Payload: randomPayload(rng), KnownLac: int64(pick(rng))}
		randomUnknown(rng, m)
		return m
	}},
}

func pick(rng *rand.Rand) uint64 {
	switch rng.Intn(5) {
	case 0:
		return 0
	case 1:
		return uint64(rng.Intn(300))
	case 2:
		return rng.Uint64()
	case 3:
		return 1<<64 - 1 // -1 as an int64
	}
	return 1 << 63
}

func randomPayload(rng *rand.Rand) []byte {
	n := rng.Intn(4)
	if n == 0 {
		return nil
	}
	b := make([]byte, rng.Intn(1<<(4*n)))
	rng.Read(b)
	return b
}

func randomUnknown(rng *rand.Rand, m proto.Message) {
	if rng.Intn(3) != 0 {
		return
	}
	var unk []byte
	unk = protowire.AppendTag(unk, 9, protowire.BytesType)
	unk = protowire.AppendBytes(unk, []byte("future"))
	unk = protowire.AppendTag(unk, 10, protowire.Fixed32Type)
	unk = protowire.AppendFixed32(unk, 7)
	m.ProtoReflect().SetUnknown(protoreflect.RawFields(unk))
}

// TestWireFields: wire.go knows every field of its messages (a new field
// fails here until wire.go handles it).
func TestWireFields(t *testing.T) {
	for _, wt := range wireTypes {
		fields := wt.empty().ProtoReflect().Descriptor().Fields()
		var got []protowire.Number
		for i := range fields.Len() {
			got = append(got, fields.Get(i).Number())
		}
		if want := []protowire.Number{1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) {
			t.Errorf("%s fields %v, wire.go handles %v: update wire.go", wt.name, got, want)
		}
	}
}

// TestWireMatchesProto: MarshalBuffers is proto.Marshal byte for byte
// and references the payload, and UnmarshalAlias decodes what proto
// encodes (W1).
func TestWireMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, wt := range wireTypes {
		for i := range 2000 {
			m := wt.random(rng)
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			bufs, err := m.MarshalBuffers()
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
				t.Fatalf("%s %d: %v\nMarshalBuffers %x\nproto.Marshal  %x", wt.name, i, m, got, want)
			}
			if p := bufs[1]; len(p) > 0 && &p[0] != &m.ProtoReflect().Get(m.ProtoReflect().Descriptor().Fields().ByNumber(5)).Bytes()[0] {
				t.Fatalf("%s %d: the payload was copied", wt.name, i)
			}
			got := wt.empty()
			if err := got.UnmarshalAlias(want); err != nil || !proto.Equal(got, m) {
				t.Fatalf("%s %d: UnmarshalAlias = %v, %v; want %v", wt.name, i, got, err, m)
			}
		}
	}
}

// checkSameDecode: UnmarshalAlias accepts and rejects what proto.Unmarshal
// does, with the same result.
func checkSameDecode(t *testing.T, empty func() wireMessage, b []byte) {
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

// TestWireDecodesAsProto: damaged, truncated, reordered and repeated
// encodings decode (or fail) as protobuf's.
func TestWireDecodesAsProto(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, wt := range wireTypes {
		for range 3000 {
			b, _ := proto.Marshal(wt.random(rng))
			switch rng.Intn(4) {
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
				c, _ := proto.Marshal(wt.random(rng))
				b = append(b, c...) // later fields win, as in protobuf
			}
			checkSameDecode(t, wt.empty, b)
		}
	}
}

func FuzzAddRequestDecode(f *testing.F) {
	rng := rand.New(rand.NewSource(3))
	for range 8 {
		b, _ := proto.Marshal(wireTypes[0].random(rng))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSameDecode(t, wireTypes[0].empty, b) })
}

func FuzzReadEntryResponseDecode(f *testing.F) {
	rng := rand.New(rand.NewSource(4))
	for range 8 {
		b, _ := proto.Marshal(wireTypes[1].random(rng))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSameDecode(t, wireTypes[1].empty, b) })
}
