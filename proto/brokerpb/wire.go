package brokerpb

// Hand-written, not generated: the copy-free decoding of the produce
// request (internal/wirecodec, W1, W3). A field added to ProduceRequest
// or ProducePartition must be added here too; TestProduceRequestWireFields
// fails until it is.

import (
	"google.golang.org/protobuf/encoding/protowire"
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
