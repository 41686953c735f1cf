package bookiepb

// Hand-written, not generated: the copy-free encoding of the add path's
// request (internal/wirecodec, W1-W3). A field added to AddRequest must
// be added here too; TestAddRequestWireFields fails until it is.

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/strata-log/strata/internal/wirecodec"
)

// MarshalBuffers encodes x as proto.Marshal does, in three buffers: the
// fields before the payload, the payload itself (not a copy: it must not
// change until gRPC has sent it), and the fields after it.
func (x *AddRequest) MarshalBuffers() ([][]byte, error) {
	// Four varint fields and the payload's tag and length, tags of one
	// byte each.
	head := make([]byte, 0, 4*(1+protowire.SizeVarint(math.MaxUint64))+1+protowire.SizeVarint(uint64(len(x.Payload))))
	head = appendVarintField(head, 1, x.RequestId)
	head = appendVarintField(head, 2, x.LedgerId)
	head = appendVarintField(head, 3, x.EntryId)
	head = appendVarintField(head, 4, uint64(x.Lac))
	if len(x.Payload) > 0 {
		head = protowire.AppendTag(head, 5, protowire.BytesType)
		head = protowire.AppendVarint(head, uint64(len(x.Payload)))
	}
	var tail []byte
	if x.Recovery {
		tail = appendVarintField(tail, 6, 1)
	}
	tail = append(tail, x.ProtoReflect().GetUnknown()...)
	return [][]byte{head, x.Payload, tail}, nil
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

// UnmarshalAlias decodes b into x as proto.Unmarshal does, except that
// Payload aliases b, which belongs to x afterwards.
func (x *AddRequest) UnmarshalAlias(b []byte) error {
	x.Reset()
	unknown, err := wirecodec.Fields(b, func(f wirecodec.Field) (bool, error) {
		switch {
		case f.Type == protowire.VarintType && f.Num == 1:
			x.RequestId = f.Varint
		case f.Type == protowire.VarintType && f.Num == 2:
			x.LedgerId = f.Varint
		case f.Type == protowire.VarintType && f.Num == 3:
			x.EntryId = f.Varint
		case f.Type == protowire.VarintType && f.Num == 4:
			x.Lac = int64(f.Varint)
		case f.Type == protowire.BytesType && f.Num == 5:
			x.Payload = nilIfEmpty(f.Bytes)
		case f.Type == protowire.VarintType && f.Num == 6:
			x.Recovery = protowire.DecodeBool(f.Varint)
		default:
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		x.ProtoReflect().SetUnknown(protoreflect.RawFields(unknown))
	}
	return nil
}

// nilIfEmpty is protobuf's decoding of an empty proto3 bytes field.
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
