package wirecodec

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field is one field of a wire-encoded message: its number and wire type
// and, for the varint and bytes types, its value (Bytes aliases the
// message).
type Field struct {
	Num    protowire.Number
	Type   protowire.Type
	Varint uint64
	Bytes  []byte
}

// Fields calls known for every field of the wire-encoded message b, in
// order. known reports false for a field it does not take (an unknown
// number, or a known number with another wire type: protobuf keeps such
// a field as unknown too); those fields' raw bytes are returned, in
// order, for the message's unknown fields. known's error stops the walk.
func Fields(b []byte, known func(Field) (bool, error)) (unknown []byte, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, wireError(protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return nil, fmt.Errorf("%w: field number %d out of range", errWire, num)
		}
		f := Field{Num: num, Type: typ}
		var m int
		switch typ {
		case protowire.VarintType:
			f.Varint, m = protowire.ConsumeVarint(b[n:])
		case protowire.BytesType:
			f.Bytes, m = protowire.ConsumeBytes(b[n:])
		default:
			m = protowire.ConsumeFieldValue(num, typ, b[n:])
		}
		if m < 0 {
			return nil, wireError(protowire.ParseError(m))
		}
		take := typ == protowire.VarintType || typ == protowire.BytesType
		if take {
			if take, err = known(f); err != nil {
				return nil, err
			}
		}
		if !take {
			// The tag re-encoded, as protobuf keeps it.
			unknown = protowire.AppendTag(unknown, num, typ)
			unknown = append(unknown, b[n:n+m]...)
		}
		b = b[n+m:]
	}
	return unknown, nil
}

// String returns a proto3 string field's value; like protobuf it refuses
// one that is not valid UTF-8.
func String(f Field, name string) (string, error) {
	if !utf8.Valid(f.Bytes) {
		return "", fmt.Errorf("proto: field %s contains invalid UTF-8", name)
	}
	return string(f.Bytes), nil
}

// errWire is what a malformed message's error wraps.
var errWire = errors.New("proto: cannot parse invalid wire-format data")

func wireError(err error) error { return fmt.Errorf("%w: %v", errWire, err) }
