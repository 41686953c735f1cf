package wirecodec

import (
	"bytes"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// AliasUnmarshaler is a message that decodes itself from b, aliasing b
// in its bytes fields (W1, W3). b belongs to the message afterwards.
type AliasUnmarshaler interface {
	UnmarshalAlias(b []byte) error
}

// BuffersMarshaler is a message that encodes itself as a list of
// buffers, some of which are its own payloads, not copies (W1, W2).
type BuffersMarshaler interface {
	MarshalBuffers() ([][]byte, error)
}

// codec is protobuf with the shortcuts above. Its name is gRPC's proto
// codec's, so registering it replaces that codec for every connection
// of the process, both ends alike.
type codec struct {
	proto encoding.CodecV2 // gRPC's own, for every other message
}

func init() {
	// Importing gRPC's proto codec runs its init, and its registration,
	// before this one: this one wins.
	encoding.RegisterCodecV2(codec{proto: encoding.GetCodecV2(protocodec.Name)})
}

func (codec) Name() string { return protocodec.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(BuffersMarshaler)
	if !ok {
		return c.proto.Marshal(v)
	}
	bufs, err := m.MarshalBuffers()
	if err != nil {
		return nil, err
	}
	out := make(mem.BufferSlice, 0, len(bufs))
	for _, b := range bufs {
		if len(b) > 0 {
			out = append(out, mem.SliceBuffer(b))
		}
	}
	return out, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(AliasUnmarshaler)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	// One copy, into memory of the message's own (W3): data's buffers go
	// back to gRPC's pool when this returns. bytes.Join does not zero the
	// memory it then fills, as BufferSlice.Materialize's make would.
	parts := make([][]byte, len(data))
	for i, b := range data {
		parts[i] = b.ReadOnlyData()
	}
	return m.UnmarshalAlias(bytes.Join(parts, nil))
}
