// Package wirecodectest checks hand-written encodings (internal/wirecodec
// W1) against protobuf's: the helpers the tests of proto/bookiepb and
// proto/brokerpb share.
package wirecodectest

import (
	"bytes"
	"math/rand"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Aliased is a message with a hand-written decoder.
type Aliased interface {
	proto.Message
	UnmarshalAlias([]byte) error
}

// Buffered is a message with a hand-written encoder.
type Buffered interface {
	proto.Message
	MarshalBuffers() ([][]byte, error)
}

// CheckSameDecode fails t unless empty().UnmarshalAlias accepts and
// refuses b as proto.Unmarshal does, with an equal result.
func CheckSameDecode(t testing.TB, empty func() Aliased, b []byte) {
	t.Helper()
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

// CheckMarshal fails t unless m.MarshalBuffers is proto.Marshal byte for
// byte and one of its buffers is each non-empty payload itself.
func CheckMarshal(t testing.TB, m Buffered, payloads ...[]byte) {
	t.Helper()
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	bufs, err := m.MarshalBuffers()
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
		t.Fatalf("%v\nMarshalBuffers %x\nproto.Marshal  %x", m, got, want)
	}
	for i, p := range payloads {
		if len(p) > 0 && !referenced(bufs, p) {
			t.Fatalf("%v: payload %d was copied", m, i)
		}
	}
}

func referenced(bufs [][]byte, data []byte) bool {
	for _, b := range bufs {
		if len(b) > 0 && &b[0] == &data[0] {
			return true
		}
	}
	return false
}

// CheckRoundTrip fails t unless empty().UnmarshalAlias decodes m's
// protobuf encoding to a message equal to m, whose bytes fields alias
// the input (check reports whether a decoded payload lies in the input).
func CheckRoundTrip(t testing.TB, m proto.Message, empty func() Aliased, aliased func(got Aliased, in []byte) bool) {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := empty()
	if err := got.UnmarshalAlias(b); err != nil || !proto.Equal(got, m) {
		t.Fatalf("UnmarshalAlias = %v, %v; want %v", got, err, m)
	}
	if aliased != nil && !aliased(got, b) {
		t.Fatalf("%v: decoded bytes were copied", got)
	}
}

// Within reports whether sub starts inside b.
func Within(b, sub []byte) bool {
	for i := range b {
		if &b[i] == &sub[0] {
			return true
		}
	}
	return false
}

// Damage returns b as it is, truncated, with up to three bytes changed,
// or followed by another encoding (from next): what a decoder must
// handle as protobuf does. It may modify b.
func Damage(rng *rand.Rand, b []byte, next func() []byte) []byte {
	switch rng.Intn(4) {
	case 0:
		if len(b) > 0 {
			return b[:rng.Intn(len(b))]
		}
	case 1:
		for range 1 + rng.Intn(3) {
			if len(b) > 0 {
				b[rng.Intn(len(b))] = byte(rng.Intn(256))
			}
		}
	case 2:
		return append(b, next()...) // later fields win, as in protobuf
	}
	return b
}

// RandomUnknown gives m, one time in three, unknown fields of several
// wire types (fields 12 and 13, unused by Strata's messages).
func RandomUnknown(rng *rand.Rand, m proto.Message) {
	if rng.Intn(3) != 0 {
		return
	}
	var unk []byte
	unk = protowire.AppendTag(unk, 12, protowire.VarintType)
	unk = protowire.AppendVarint(unk, rng.Uint64())
	unk = protowire.AppendTag(unk, 13, protowire.Fixed64Type)
	unk = protowire.AppendFixed64(unk, 7)
	if rng.Intn(2) == 0 {
		unk = protowire.AppendTag(unk, 14, protowire.BytesType)
		unk = protowire.AppendBytes(unk, []byte("future"))
	}
	m.ProtoReflect().SetUnknown(protoreflect.RawFields(unk))
}

// Fields lists the field numbers of m's descriptor, for the tests that
// fail when a message gains a field its hand-written encoding ignores.
func Fields(m proto.Message) []protowire.Number {
	fields := m.ProtoReflect().Descriptor().Fields()
	var out []protowire.Number
	for i := range fields.Len() {
		out = append(out, fields.Get(i).Number())
	}
	return out
}

// Case is one message type of a hand-written encoding under test.
type Case struct {
	Empty  func() Aliased
	Random func(*rand.Rand) Buffered
	// Payloads lists m's bytes fields that must be referenced when sent
	// and aliased when received.
	Payloads func(m proto.Message) [][]byte
}

// CheckRandom runs rounds random messages of c through CheckMarshal,
// CheckRoundTrip (payloads aliased) and CheckSameDecode of a damaged
// encoding.
func CheckRandom(t testing.TB, rng *rand.Rand, rounds int, c Case) {
	t.Helper()
	aliased := func(got Aliased, in []byte) bool {
		for _, p := range c.Payloads(got) {
			if len(p) > 0 && !Within(in, p) {
				return false
			}
		}
		return true
	}
	for range rounds {
		m := c.Random(rng)
		CheckMarshal(t, m, c.Payloads(m)...)
		CheckRoundTrip(t, m, c.Empty, aliased)
		b, _ := proto.Marshal(m)
		b = Damage(rng, b, func() []byte {
			other, _ := proto.Marshal(c.Random(rng))
			return other
		})
		CheckSameDecode(t, c.Empty, b)
	}
}

// FuzzDecode seeds f with eight random encodings of c and checks that
// every input decodes as protobuf decodes it.
func FuzzDecode(f *testing.F, seed int64, c Case) {
	rng := rand.New(rand.NewSource(seed))
	for range 8 {
		b, _ := proto.Marshal(c.Random(rng))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { CheckSameDecode(t, c.Empty, b) })
}
