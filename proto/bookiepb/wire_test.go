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

// TestAddRequestWireFields: the hand-written encoding knows every field
// of AddRequest (a new field fails here until wire.go handles it).
func TestAddRequestWireFields(t *testing.T) {
	fields := (&AddRequest{}).ProtoReflect().Descriptor().Fields()
	var got []protowire.Number
	for i := range fields.Len() {
		got = append(got, fields.Get(i).Number())
	}
	if want := []protowire.Number{1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("AddRequest fields %v, wire.go handles %v: update wire.go", got, want)
	}
}

func randomAdd(rng *rand.Rand) *AddRequest {
	m := &AddRequest{}
	pick := func() uint64 {
		switch rng.Intn(4) {
		case 0:
			return 0
		case 1:
			return uint64(rng.Intn(300))
		case 2:
			return rng.Uint64()
		}
		return 1 << 63
	}
	m.RequestId, m.LedgerId, m.EntryId = pick(), pick(), pick()
	m.Lac = int64(pick())
	if rng.Intn(5) == 0 {
		m.Lac = -1
	}
	if n := rng.Intn(4); n > 0 {
		m.Payload = make([]byte, rng.Intn(1<<(4*n)))
		rng.Read(m.Payload)
	}
	m.Recovery = rng.Intn(2) == 0
	if rng.Intn(3) == 0 {
		var unk []byte
		unk = protowire.AppendTag(unk, 9, protowire.BytesType)
		unk = protowire.AppendBytes(unk, []byte("future"))
		unk = protowire.AppendTag(unk, 10, protowire.Fixed32Type)
		unk = protowire.AppendFixed32(unk, 7)
		m.ProtoReflect().SetUnknown(protoreflect.RawFields(unk))
	}
	return m
}

// TestAddRequestWireMatchesProto: MarshalBuffers is proto.Marshal byte
// for byte, and UnmarshalAlias decodes what proto encodes (W1).
func TestAddRequestWireMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := range 2000 {
		m := randomAdd(rng)
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
		if len(m.Payload) > 0 && &bufs[1][0] != &m.Payload[0] {
			t.Fatalf("%d: the payload was copied", i)
		}
		got := &AddRequest{}
		if err := got.UnmarshalAlias(want); err != nil || !proto.Equal(got, m) {
			t.Fatalf("%d: UnmarshalAlias = %v, %v; want %v", i, got, err, m)
		}
	}
}

// checkSameDecode: UnmarshalAlias accepts and rejects what proto.Unmarshal
// does, with the same result.
func checkSameDecode(t *testing.T, b []byte) {
	want := &AddRequest{}
	wantErr := proto.Unmarshal(b, want)
	got := &AddRequest{}
	gotErr := got.UnmarshalAlias(bytes.Clone(b))
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%x: UnmarshalAlias error %v, proto.Unmarshal error %v", b, gotErr, wantErr)
	}
	if wantErr == nil && !proto.Equal(got, want) {
		t.Fatalf("%x: UnmarshalAlias %v, proto.Unmarshal %v", b, got, want)
	}
}

// TestAddRequestDecodesAsProto: damaged, truncated, reordered and
// repeated encodings decode (or fail) as protobuf's.
func TestAddRequestDecodesAsProto(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for range 3000 {
		b, _ := proto.Marshal(randomAdd(rng))
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
			c, _ := proto.Marshal(randomAdd(rng))
			b = append(b, c...) // later fields win, as in protobuf
		}
		checkSameDecode(t, b)
	}
}

func FuzzAddRequestDecode(f *testing.F) {
	rng := rand.New(rand.NewSource(3))
	for range 8 {
		b, _ := proto.Marshal(randomAdd(rng))
		f.Add(b)
	}
	f.Fuzz(checkSameDecode)
}
