package bookiepb

import (
	"bytes"
	"math/rand"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/wirecodec/wirecodectest"
)

// wireTypes are the messages of wire.go.
var wireTypes = []struct {
	name   string
	fields []protowire.Number // the fields wire.go handles
	wirecodectest.Case
}{
	{"AddRequest", []protowire.Number{1, 2, 3, 4, 5, 6, 7}, wirecodectest.Case{
		Empty: func() wirecodectest.Aliased { return &AddRequest{} },
		Random: func(rng *rand.Rand) wirecodectest.Buffered {
			m := &AddRequest{RequestId: pick(rng), LedgerId: pick(rng), EntryId: pick(rng), Lac: int64(pick(rng)),
				Payload: randomPayload(rng), Recovery: rng.Intn(2) == 0}
			wirecodectest.RandomUnknown(rng, m)
			return m
		},
		Payloads: func(m proto.Message) [][]byte { return [][]byte{m.(*AddRequest).Payload} },
	}},
	{"ReadEntryResponse", []protowire.Number{1, 2, 3, 4, 5, 6}, wirecodectest.Case{
		Empty: func() wirecodectest.Aliased { return &ReadEntryResponse{} },
		Random: func(rng *rand.Rand) wirecodectest.Buffered {
			m := &ReadEntryResponse{Status: ReadStatus(rng.Intn(4) - 1), LedgerId: pick(rng), EntryId: pick(rng),
				Lac: int64(pick(rng)), Payload: randomPayload(rng), KnownLac: int64(pick(rng))}
			wirecodectest.RandomUnknown(rng, m)
			return m
		},
		Payloads: func(m proto.Message) [][]byte { return [][]byte{m.(*ReadEntryResponse).Payload} },
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

// TestWireFields: wire.go knows every field of its messages (a new field
// fails here until wire.go handles it).
func TestWireFields(t *testing.T) {
	for _, wt := range wireTypes {
		if got, want := wirecodectest.Fields(wt.Empty()), wt.fields; !slices.Equal(got, want) {
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
		t.Run(wt.name, func(t *testing.T) { wirecodectest.CheckRandom(t, rng, 3000, wt.Case) })
	}
}

func FuzzAddRequestDecode(f *testing.F) { wirecodectest.FuzzDecode(f, 3, wireTypes[0].Case) }

func FuzzReadEntryResponseDecode(f *testing.F) { wirecodectest.FuzzDecode(f, 4, wireTypes[1].Case) }

// An AddRequest's PayloadTail is sent inside its payload field: the
// encoding is proto.Marshal's of the request with the two joined, and it
// references both parts. Decoded, that is one Payload; a request encoded
// by protobuf with the fields apart decodes into both, and Entry joins
// them, so a bookie stores the same entry either way.
func TestAddRequestPayloadTail(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for range 200 {
		payload, tail := randomPayload(rng), randomPayload(rng)
		m := &AddRequest{RequestId: pick(rng), LedgerId: pick(rng), EntryId: pick(rng), Lac: int64(pick(rng)),
			Payload: payload, PayloadTail: tail, Recovery: rng.Intn(2) == 0}
		entry := append(append([]byte{}, payload...), tail...)
		joined := &AddRequest{RequestId: m.RequestId, LedgerId: m.LedgerId, EntryId: m.EntryId, Lac: m.Lac,
			Payload: entry, Recovery: m.Recovery}
		bufs, err := m.MarshalBuffers()
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(joined)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(bufs, nil); !bytes.Equal(got, want) {
			t.Fatalf("payload %d + tail %d bytes: encoded as\n%x\nwant\n%x", len(payload), len(tail), got, want)
		}
		for _, part := range [][]byte{payload, tail} {
			if len(part) > 0 && !slices.ContainsFunc(bufs, func(b []byte) bool { return len(b) > 0 && &b[0] == &part[0] }) {
				t.Fatal("a payload part was copied, not referenced")
			}
		}
		var got AddRequest
		if err := got.UnmarshalAlias(want); err != nil {
			t.Fatal(err)
		}
		if len(got.PayloadTail) != 0 || !bytes.Equal(got.Entry(), entry) {
			t.Fatalf("decoded payload %x, tail %x; want payload %x", got.Payload, got.PayloadTail, entry)
		}

		apart, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var split, ref AddRequest
		if err := split.UnmarshalAlias(apart); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(apart, &ref); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&split, &ref) {
			t.Fatalf("fields apart: decoded %v, protobuf %v", &split, &ref)
		}
		if !bytes.Equal(split.Entry(), entry) {
			t.Fatalf("fields apart: entry %x, want %x", split.Entry(), entry)
		}
	}
}

// countingPool counts what a HeldEntry gives back.
type countingPool struct{ got []*[]byte }

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(b *[]byte)     { p.got = append(p.got, b) }

// A HeldEntry is encoded as proto.Marshal encodes its response, with the
// payload referenced, not copied; once gRPC frees the encoding, Held goes
// back to the pool, once, and not before.
func TestHeldEntry(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for range 300 {
		held := make([]byte, 64+rng.Intn(4096))
		rng.Read(held)
		from := rng.Intn(32)
		m := &ReadEntryResponse{Status: ReadStatus(rng.Intn(4) - 1), LedgerId: pick(rng), EntryId: pick(rng),
			Lac: int64(pick(rng)), Payload: held[from : from+rng.Intn(len(held)-from)], KnownLac: int64(pick(rng))}
		wirecodectest.RandomUnknown(rng, m)
		pool := &countingPool{}
		out, err := HeldEntry{ReadEntryResponse: m, Held: &held, Pool: pool}.MarshalSlice()
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("%v\nMarshalSlice  %x\nproto.Marshal %x", m, got, want)
		}
		referenced := false
		for _, b := range out {
			if d := b.ReadOnlyData(); len(d) > 0 && len(m.Payload) > 0 && &d[0] == &m.Payload[0] {
				referenced = true
			}
		}
		if len(m.Payload) > 0 && !referenced {
			t.Fatal("the payload was copied, not referenced")
		}
		if len(pool.got) != 0 {
			t.Fatal("Held went back before the encoding was freed")
		}
		out.Free()
		// gRPC does not pool a buffer of at most 1 KiB of capacity: that
		// one is left to the collector.
		if len(m.Payload) > 0 && cap(m.Payload) > 1<<10 && (len(pool.got) != 1 || pool.got[0] != &held) {
			t.Fatalf("payload of %d bytes: given back %d buffers, want Held once", len(m.Payload), len(pool.got))
		}
		if len(pool.got) > 1 {
			t.Fatalf("Held given back %d times", len(pool.got))
		}
	}
}
