package brokerpb

// Hand-written, not generated: the copy-free decoding of the produce
// request and encoding and decoding of the fetch response
// (internal/wirecodec, W1-W3). A field added to one of these messages
// must be added here too; TestWireFields fails until it is.

import (
	"bytes"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/strata-log/strata/internal/wirecodec"
)

// UnmarshalAlias decodes b into x as proto.Unmarshal does, except that
// every partition's Records aliases b, which belongs to x afterwards.
func (x *ProduceRequest) UnmarshalAlias(b []byte) error {
	x.Reset()
	unknown, err := wirecodec.Fields(b, func(f wirecodec.Field) (bool, error) {
		switch {
		case f.Type == protowire.VarintType && f.Num == 1:
			x.Acks = Acks(int32(f.Varint))
		case f.Type == protowire.VarintType && f.Num == 2:
			x.TimeoutMs = int32(f.Varint)
		case f.Type == protowire.BytesType && f.Num == 3:
			p := &ProducePartition{}
			if err := p.unmarshalAlias(f.Bytes); err != nil {
				return false, err
			}
			x.Partitions = append(x.Partitions, p)
		default:
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	setUnknown(x, unknown)
	return nil
}

// MarshalBuffers encodes x as proto.Marshal does, as a list of buffers in
// which every partition's Records is referenced, not copied (it must not
// change until gRPC has sent it: a producer's batches are immutable).
func (x *ProduceRequest) MarshalBuffers() ([][]byte, error) {
	var head []byte
	head = appendVarintField(head, 1, uint64(x.Acks))
	head = appendVarintField(head, 2, uint64(x.TimeoutMs))
	bufs := make([][]byte, 0, 2*len(x.Partitions)+2)
	for _, p := range x.Partitions {
		if !utf8.ValidString(p.Topic) {
			return nil, fmt.Errorf("proto: field strata.broker.v1.ProducePartition.topic contains invalid UTF-8")
		}
		var fields []byte
		if p.Topic != "" {
			fields = protowire.AppendTag(fields, 1, protowire.BytesType)
			fields = protowire.AppendString(fields, p.Topic)
		}
		fields = appendVarintField(fields, 2, uint64(p.Partition))
		head, bufs = appendMessageWithBytes(head, bufs, 3, fields, 3, [][]byte{p.Records}, p.ProtoReflect().GetUnknown())
	}
	return append(bufs, head, x.ProtoReflect().GetUnknown()), nil
}

// appendMessageWithBytes appends to the buffer list bufs (pending is its
// unfinished last buffer) the embedded message field num whose encoding
// is fields, then the bytes field bytesNum holding the parts of data one
// after another (referenced, not copied), then unknown. It returns the
// new unfinished buffer.
func appendMessageWithBytes(pending []byte, bufs [][]byte, num protowire.Number, fields []byte, bytesNum protowire.Number, data [][]byte, unknown []byte) ([]byte, [][]byte) {
	n := 0
	for _, d := range data {
		n += len(d)
	}
	size := len(fields) + len(unknown)
	if n > 0 {
		size += protowire.SizeTag(bytesNum) + protowire.SizeBytes(n)
	}
	pending = protowire.AppendTag(pending, num, protowire.BytesType)
	pending = protowire.AppendVarint(pending, uint64(size))
	pending = append(pending, fields...)
	if n == 0 {
		return append(pending, unknown...), bufs
	}
	pending = protowire.AppendTag(pending, bytesNum, protowire.BytesType)
	pending = protowire.AppendVarint(pending, uint64(n))
	bufs = append(bufs, pending)
	for _, d := range data {
		if len(d) > 0 {
			bufs = append(bufs, d)
		}
	}
	return slices.Clone(unknown), bufs
}

func (x *ProducePartition) unmarshalAlias(b []byte) error {
	unknown, err := wirecodec.Fields(b, func(f wirecodec.Field) (bool, error) {
		var err error
		switch {
		case f.Type == protowire.BytesType && f.Num == 1:
			x.Topic, err = wirecodec.String(f, "strata.broker.v1.ProducePartition.topic")
		case f.Type == protowire.VarintType && f.Num == 2:
			x.Partition = int32(f.Varint)
		case f.Type == protowire.BytesType && f.Num == 3:
			x.Records = nil
			if len(f.Bytes) > 0 {
				x.Records = f.Bytes
			}
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return err
	}
	setUnknown(x, unknown)
	return nil
}

func setUnknown(m protoreflect.ProtoMessage, unknown []byte) {
	if len(unknown) > 0 {
		m.ProtoReflect().SetUnknown(protoreflect.RawFields(unknown))
	}
}

// MarshalBuffers encodes x as proto.Marshal encodes x with every
// partition's RecordsMore joined to its Records, as a list of buffers in
// which Records and RecordsMore are referenced, not copied (they must not
// change until gRPC has sent them). Records are immutable once fetched.
func (x *FetchResponse) MarshalBuffers() ([][]byte, error) {
	var pending []byte
	bufs := make([][]byte, 0, 2*len(x.Partitions)+2)
	for _, p := range x.Partitions {
		fields, err := p.marshalHead()
		if err != nil {
			return nil, err
		}
		data := append([][]byte{p.Records}, p.RecordsMore...)
		pending, bufs = appendMessageWithBytes(pending, bufs, 1, fields, 6, data, p.ProtoReflect().GetUnknown())
	}
	return append(bufs, pending, x.ProtoReflect().GetUnknown()), nil
}

// marshalHead encodes p's fields before its records (1-5).
func (p *FetchPartitionResult) marshalHead() ([]byte, error) {
	if !utf8.ValidString(p.Topic) {
		return nil, fmt.Errorf("proto: field strata.broker.v1.FetchPartitionResult.topic contains invalid UTF-8")
	}
	var b []byte
	if p.Topic != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, p.Topic)
	}
	b = appendVarintField(b, 2, uint64(p.Partition))
	if p.Error != nil {
		e, err := proto.MarshalOptions{Deterministic: true}.Marshal(p.Error)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	b = appendVarintField(b, 4, uint64(p.HighWatermark))
	return appendVarintField(b, 5, uint64(p.LogStartOffset)), nil
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
// every partition's Records aliases b, which belongs to x afterwards.
func (x *FetchResponse) UnmarshalAlias(b []byte) error {
	x.Reset()
	unknown, err := wirecodec.Fields(b, func(f wirecodec.Field) (bool, error) {
		if f.Type != protowire.BytesType || f.Num != 1 {
			return false, nil
		}
		p := &FetchPartitionResult{}
		if err := p.unmarshalAlias(f.Bytes); err != nil {
			return false, err
		}
		x.Partitions = append(x.Partitions, p)
		return true, nil
	})
	if err != nil {
		return err
	}
	setUnknown(x, unknown)
	return nil
}

func (p *FetchPartitionResult) unmarshalAlias(b []byte) error {
	unknown, err := wirecodec.Fields(b, func(f wirecodec.Field) (bool, error) {
		var err error
		switch {
		case f.Type == protowire.BytesType && f.Num == 1:
			p.Topic, err = wirecodec.String(f, "strata.broker.v1.FetchPartitionResult.topic")
		case f.Type == protowire.VarintType && f.Num == 2:
			p.Partition = int32(f.Varint)
		case f.Type == protowire.BytesType && f.Num == 3:
			// A message field given twice is merged, as protobuf does.
			if p.Error == nil {
				p.Error = &PartitionError{}
			}
			err = proto.UnmarshalOptions{Merge: true}.Unmarshal(f.Bytes, p.Error)
		case f.Type == protowire.VarintType && f.Num == 4:
			p.HighWatermark = int64(f.Varint)
		case f.Type == protowire.VarintType && f.Num == 5:
			p.LogStartOffset = int64(f.Varint)
		case f.Type == protowire.BytesType && f.Num == 6:
			p.Records = nil
			if len(f.Bytes) > 0 {
				p.Records = f.Bytes
			}
		case f.Type == protowire.BytesType && f.Num == 7:
			p.RecordsMore = append(p.RecordsMore, f.Bytes)
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return err
	}
	setUnknown(p, unknown)
	return nil
}

// RecordsBytes is the size of the partition's data: Records and
// RecordsMore.
func (p *FetchPartitionResult) RecordsBytes() int {
	n := len(p.GetRecords())
	for _, b := range p.GetRecordsMore() {
		n += len(b)
	}
	return n
}

// AllRecords is the partition's data: Records followed by RecordsMore. It
// is Records itself unless RecordsMore is set, which a client sees only
// from a sender that encoded them apart (proto.Marshal); then it is a new
// slice.
func (p *FetchPartitionResult) AllRecords() []byte {
	if len(p.GetRecordsMore()) == 0 {
		return p.GetRecords()
	}
	return bytes.Join(append([][]byte{p.Records}, p.RecordsMore...), nil)
}

// HeldFetchResponse is a FetchResponse whose bytes are held from a budget
// until gRPC has written them (wirecodec.SliceMarshaler): its records are
// sent as MarshalBuffers refers to them, and its last bytes in a buffer of
// their own (a copy of at most heldTailBytes) whose release by gRPC calls
// Release. gRPC writes a message's buffers in order and releases each once
// written, or all of them when it drops the message (a reset stream, a
// failed send), so that release comes after the last byte was written, or
// with the drop. Release runs at most once; a connection that dies with
// the message queued releases nothing, which the sender must cover (the
// broker releases a connection's holds when it ends). Nothing may change
// the response after it is sent.
type HeldFetchResponse struct {
	*FetchResponse
	Release func()
}

// heldTailBytes is the most of a message's end copied into its last
// buffer; heldTailCap is that buffer's capacity: above gRPC's pooling
// threshold, so that mem.NewBuffer makes it a counted buffer whose
// release reaches its pool.
const (
	heldTailBytes = 64
	heldTailCap   = 4 << 10
)

// MarshalSlice encodes the response as MarshalBuffers does. A message
// without bytes, or one that fails to encode, is released at once.
func (h HeldFetchResponse) MarshalSlice() (mem.BufferSlice, error) {
	parts, err := h.MarshalBuffers()
	if err != nil {
		h.Release()
		return nil, err
	}
	out := make(mem.BufferSlice, 0, len(parts)+1)
	for _, p := range parts {
		if len(p) > 0 {
			out = append(out, mem.SliceBuffer(p))
		}
	}
	if len(out) == 0 {
		h.Release()
		return out, nil
	}
	last := out[len(out)-1].ReadOnlyData()
	k := min(len(last), heldTailBytes)
	tail := make([]byte, k, max(k, heldTailCap))
	copy(tail, last[len(last)-k:])
	if out = out[:len(out)-1]; k < len(last) {
		out = append(out, mem.SliceBuffer(last[:len(last)-k]))
	}
	return append(out, mem.NewBuffer(&tail, releaseOnPut(h.Release))), nil
}

// releaseOnPut is the pool of a HeldFetchResponse's last buffer: gRPC
// puts the buffer back once its last reference is released.
type releaseOnPut func()

func (r releaseOnPut) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (r releaseOnPut) Put(*[]byte) { r() }
