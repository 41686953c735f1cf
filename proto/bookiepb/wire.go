package bookiepb

// Hand-written, not generated: the copy-free encodings of the messages
// that carry entries, AddRequest and ReadEntryResponse
// (internal/wirecodec, W1-W3). Both are flat: varint fields 1-4, the
// payload as field 5 and a varint field 6; AddRequest also has
// payload_tail, field 7, which MarshalBuffers sends inside field 5. A
// field added to either must be added here too; TestWireFields fails
// until it is.

import (
	"encoding/binary"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/strata-log/strata/internal/wirecodec"
)

// MarshalBuffers encodes x as proto.Marshal encodes x with PayloadTail
// appended to Payload (the entry, as Entry returns it), in four buffers:
// the fields before the payload, Payload and PayloadTail themselves (not
// copies: they must not change until gRPC has sent them), and the fields
// after them. The bookie receives the entry whole, with no copy on the
// writer's side to join its two parts.
func (x *AddRequest) MarshalBuffers() ([][]byte, error) {
	return marshalFlat(flat{x.RequestId, x.LedgerId, x.EntryId, uint64(x.Lac), boolVarint(x.Recovery)}, x, x.Payload, x.PayloadTail), nil
}

// UnmarshalAlias decodes b into x as proto.Unmarshal does, except that
// Payload and PayloadTail alias b, which belongs to x afterwards.
func (x *AddRequest) UnmarshalAlias(b []byte) error {
	x.Reset()
	f, payload, tail, err := unmarshalFlat(b, x, 7)
	x.RequestId, x.LedgerId, x.EntryId, x.Lac, x.Recovery = f[0], f[1], f[2], int64(f[3]), protowire.DecodeBool(f[4])
	x.Payload, x.PayloadTail = payload, tail
	return err
}

// Entry is the entry x adds: Payload followed by PayloadTail. It is
// Payload itself unless PayloadTail is set, which a bookie sees only from
// a sender that encodes the two fields apart (proto.Marshal); the copy-free
// encoding sends them joined.
func (x *AddRequest) Entry() []byte {
	if len(x.GetPayloadTail()) == 0 {
		return x.GetPayload()
	}
	return append(x.Payload[:len(x.Payload):len(x.Payload)], x.PayloadTail...)
}

// MarshalBuffers encodes x as AddRequest.MarshalBuffers does.
func (x *ReadEntryResponse) MarshalBuffers() ([][]byte, error) {
	return marshalFlat(flat{uint64(x.Status), x.LedgerId, x.EntryId, uint64(x.Lac), uint64(x.KnownLac)}, x, x.Payload), nil
}

// HeldEntry is a ReadEntryResponse whose Payload aliases Held, a buffer
// of Pool, sent (wirecodec.SliceMarshaler) so that gRPC gives Held back to
// Pool once it has written the payload: a bookie reads entries into
// pooled memory. Nothing may use Payload after it is sent.
type HeldEntry struct {
	*ReadEntryResponse
	Held *[]byte
	Pool mem.BufferPool
}

// MarshalSlice encodes the response as MarshalBuffers does, its payload
// in a buffer whose release gives Held back.
func (h HeldEntry) MarshalSlice() (mem.BufferSlice, error) {
	parts, _ := h.MarshalBuffers() // never fails
	out := make(mem.BufferSlice, 0, len(parts))
	for i, p := range parts {
		switch {
		case len(p) == 0:
		case i == 1 && h.Held != nil: // the payload (marshalFlat: the fields before it, it, the fields after it)
			out = append(out, mem.NewBuffer(&p, giveBack(h)))
		default:
			out = append(out, mem.SliceBuffer(p))
		}
	}
	return out, nil
}

// giveBack is the pool of a HeldEntry's payload buffer: gRPC's release
// of the payload gives Held back to Pool.
type giveBack HeldEntry

func (g giveBack) Get(n int) *[]byte { return g.Pool.Get(n) }
func (g giveBack) Put(*[]byte)       { g.Pool.Put(g.Held) }

// UnmarshalAlias decodes b into x as AddRequest.UnmarshalAlias does.
func (x *ReadEntryResponse) UnmarshalAlias(b []byte) error {
	x.Reset()
	f, payload, _, err := unmarshalFlat(b, x, 0)
	x.Status, x.LedgerId, x.EntryId, x.Lac, x.KnownLac = ReadStatus(int32(f[0])), f[1], f[2], int64(f[3]), int64(f[4])
	x.Payload = payload
	return err
}

// flat holds the varint fields 1-4 and 6 of a flat message, as protobuf
// encodes them (an enum or int32 as its sign-extended int64, an int64 as
// its two's complement, a bool as 0 or 1).
type flat [5]uint64

// flatNum is the field number of each entry of flat; the payload is 5.
var flatNum = [5]protowire.Number{1, 2, 3, 4, 6}

func boolVarint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// marshalFlat encodes a flat message whose payload field holds the
// concatenation of payload's parts (an AddRequest's two, a
// ReadEntryResponse's one), each referenced, not copied.
func marshalFlat(f flat, m protoreflect.ProtoMessage, payload ...[]byte) [][]byte {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	// One allocation for the list and the bytes of the fields around the
	// payload: a writer sends one of these per add to each bookie.
	fp := new(flatParts)
	head := fp.head[:0]
	for i := range 4 {
		head = appendVarintField(head, flatNum[i], f[i])
	}
	if n > 0 {
		head = protowire.AppendTag(head, 5, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(n))
	}
	tail := appendVarintField(fp.tail[:0], flatNum[4], f[4])
	tail = append(tail, m.ProtoReflect().GetUnknown()...)
	parts := append(fp.parts[:0], head)
	parts = append(parts, payload...)
	return append(parts, tail)
}

// flatParts is marshalFlat's result: the list of parts, and room for the
// fields before and after the payload (four varint fields and the
// payload's tag and length; one varint field). Unknown fields, if the
// message has any, are appended to the tail beyond its room.
type flatParts struct {
	parts [4][]byte
	head  [4*(1+binary.MaxVarintLen64) + 1 + binary.MaxVarintLen64]byte
	tail  [1 + binary.MaxVarintLen64]byte
}

// appendVarintField appends field num with value v, unless v is zero
// (proto3 does not encode zero values).
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// unmarshalFlat decodes a flat message: its varint fields, its payload
// and, when tailNum is not 0, the bytes field tailNum (both aliasing b;
// nil when empty, as protobuf decodes them) and, into m, its unknown
// fields. Later occurrences of a field win, as in protobuf.
func unmarshalFlat(b []byte, m protoreflect.ProtoMessage, tailNum protowire.Number) (f flat, payload, tail []byte, err error) {
	unknown, err := wirecodec.Fields(b, func(fl wirecodec.Field) (bool, error) {
		if fl.Num == 5 || (tailNum != 0 && fl.Num == tailNum) {
			if fl.Type != protowire.BytesType {
				return false, nil
			}
			if fl.Num == 5 {
				payload = fl.Bytes
			} else {
				tail = fl.Bytes
			}
			return true, nil
		}
		for i, num := range flatNum {
			if fl.Num == num && fl.Type == protowire.VarintType {
				f[i] = fl.Varint
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return flat{}, nil, nil, err
	}
	if len(payload) == 0 {
		payload = nil
	}
	if len(tail) == 0 {
		tail = nil
	}
	if len(unknown) > 0 {
		m.ProtoReflect().SetUnknown(protoreflect.RawFields(unknown))
	}
	return f, payload, tail, nil
}
