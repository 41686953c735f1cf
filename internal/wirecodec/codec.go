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

// SliceMarshaler is a message that encodes itself as gRPC buffers, some
// of which it hands over: gRPC frees each once it has written it, and a
// buffer made with mem.NewBuffer then goes back to its pool (a bookie's
// read entries, read into pooled memory: W2 with the pool's release).
type SliceMarshaler interface {
	MarshalSlice() (mem.BufferSlice, error)
}

// Pooled is embedded in a message type that implements AliasUnmarshaler to
// make the codec decode that message from a buffer of BufferPool's
// instead of fresh memory. The buffer belongs to the message (W3) until
// Release gives it back; after that no bytes field of the message may be
// used. It is for a receiver that keeps a message's bytes briefly and
// receives many of them: a bookie's adds, whose payload the journal
// copies before the add is answered. Fresh memory for every received byte
// costs the garbage collector and cold cache lines, not just the copy.
type Pooled struct{ buf *[]byte }

// Release gives the message's buffer back to the pool; it is idempotent.
func (p *Pooled) Release() {
	if p.buf != nil {
		BufferPool.Put(p.buf)
		p.buf = nil
	}
}

// pooledBuffer returns n bytes of a pooled buffer the message now holds.
//
//lint:ignore U1000 called by Unmarshal through pooledMessage, on the types of other packages that embed Pooled
func (p *Pooled) pooledBuffer(n int) []byte {
	p.Release()
	p.buf = BufferPool.Get(n)
	return *p.buf
}

// pooledMessage is a message type that embeds Pooled.
type pooledMessage interface {
	AliasUnmarshaler
	pooledBuffer(n int) []byte
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
	if m, ok := v.(SliceMarshaler); ok {
		return m.MarshalSlice()
	}
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
	if m, ok := v.(pooledMessage); ok {
		// One copy as below, into a pooled buffer that the message
		// holds until its Release.
		b := m.pooledBuffer(data.Len())
		n := 0
		for _, d := range data {
			n += copy(b[n:], d.ReadOnlyData())
		}
		return m.UnmarshalAlias(b)
	}
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
