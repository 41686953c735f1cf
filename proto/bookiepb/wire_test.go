package bookiepb

import (
	"math/rand"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/wirecodec/wirecodectest"
)

// wireMessage is a message of wire.go: encoded and decoded by hand.
type wireMessage interface {
	wirecodectest.Aliased
	MarshalBuffers() ([][]byte, error)
}

// wireTypes are the messages of wire.go: a new empty one, a random one,
// and its payload.
var wireTypes = []struct {
	name    string
	empty   func() wirecodectest.Aliased
	random  func(*rand.Rand) wireMessage
	payload func(wireMessage) []byte
}{
	{"AddRequest", func() wirecodectest.Aliased { return &AddRequest{} }, func(rng *rand.Rand) wireMessage {
		m := &AddRequest{RequestId: pick(rng), LedgerId: pick(rng), EntryId: pick(rng), Lac: int64(pick(rng)),
			Payload: randomPayload(rng), Recovery: rng.Intn(2) == 0}
		wirecodectest.RandomUnknown(rng, m)
		return m
	}, func(m wireMessage) []byte { return m.(*AddRequest).Payload }},
	{"ReadEntryResponse", func() wirecodectest.Aliased { return &ReadEntryResponse{} }, func(rng *rand.Rand) wireMessage {
		m := &ReadEntryResponse{Status: ReadStatus(rng.Intn(4) - 1), LedgerId: pick(rng), EntryId: pick(rng),
			Lac: int64(pick(rng)), Payload: randomPayload(rng), KnownLac: int64(pick(rng))}
		wirecodectest.RandomUnknown(rng, m)
		return m
	}, func(m wireMessage) []byte { return m.(*ReadEntryResponse).Payload }},
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

// TestWireFields: wire.go knows every field of its messages (a new field
// fails here until wire.go handles it).
func TestWireFields(t *testing.T) {
	for _, wt := range wireTypes {
		if got, want := wirecodectest.Fields(wt.empty()), []protowire.Number{1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) {
			t.Errorf("%s fields %v, wire.go handles %v: update wire.go", wt.name, got, want)
		}
	}
}

// TestWire: MarshalBuffers is proto.Marshal byte for byte and references
// the payload; UnmarshalAlias decodes what proto encodes into a payload
// aliasing its input, and accepts and refuses damaged, truncated and
// concatenated encodings as protobuf does (W1, W3).
func TestWire(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, wt := range wireTypes {
		aliased := func(got wirecodectest.Aliased, in []byte) bool {
			p := wt.payload(got.(wireMessage))
			return len(p) == 0 || wirecodectest.Within(in, p)
		}
		for range 3000 {
			m := wt.random(rng)
			wirecodectest.CheckMarshal(t, m, wt.payload(m))
			wirecodectest.CheckRoundTrip(t, m, wt.empty, aliased)
			b, _ := proto.Marshal(m)
			b = wirecodectest.Damage(rng, b, func() []byte {
				c, _ := proto.Marshal(wt.random(rng))
				return c
			})
			wirecodectest.CheckSameDecode(t, wt.empty, b)
		}
	}
}

func fuzzDecode(f *testing.F, i int) {
	rng := rand.New(rand.NewSource(int64(3 + i)))
	for range 8 {
		b, _ := proto.Marshal(wireTypes[i].random(rng))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { wirecodectest.CheckSameDecode(t, wireTypes[i].empty, b) })
}

func FuzzAddRequestDecode(f *testing.F) { fuzzDecode(f, 0) }

func FuzzReadEntryResponseDecode(f *testing.F) { fuzzDecode(f, 1) }
