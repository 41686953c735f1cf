package cli

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// RecordHeader is one header of a consumed record.
type RecordHeader struct {
	Key   string
	Value []byte
}

// ConsumedRecord is what the consume output formats read: the fields of
// a client record, without depending on the client package.
type ConsumedRecord struct {
	Topic       string
	Partition   int32
	Offset      int64
	TimestampMs int64
	Key         []byte // nil: no key
	Value       []byte // nil: tombstone
	Headers     []RecordHeader
}

// RecordFormat is a parsed consume -f format string (kcat's codes):
//
//	%t topic        %p partition      %o offset       %T timestamp (Unix ms)
//	%k key          %v value          %h headers (name=value,name=value)
//	%K key length   %S value length (-1 for a null key or value)
//	%%  a percent sign; escapes \n \r \t \\
//
// A null key or value prints as nothing.
type RecordFormat struct {
	parts []formatPart
}

type formatPart struct {
	literal string
	code    byte // 0 for a literal
}

// DefaultRecordFormat is consume's default: the value and a newline.
const DefaultRecordFormat = `%v\n`

const formatCodes = "%t %p %o %T %k %v %h %K %S %%"

// ParseRecordFormat parses a format string; unknown codes and escapes are
// errors.
func ParseRecordFormat(s string) (*RecordFormat, error) {
	f := &RecordFormat{}
	var lit []byte
	flush := func() {
		if len(lit) > 0 {
			f.parts = append(f.parts, formatPart{literal: string(lit)})
			lit = nil
		}
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			if i+1 == len(s) {
				return nil, fmt.Errorf("format %q: lone %% at the end (write %%%% for a percent sign)", s)
			}
			i++
			switch code := s[i]; code {
			case '%':
				lit = append(lit, '%')
			case 't', 'p', 'o', 'T', 'k', 'v', 'h', 'K', 'S':
				flush()
				f.parts = append(f.parts, formatPart{code: code})
			default:
				return nil, fmt.Errorf("format %q: unknown code %%%c; known: %s", s, code, formatCodes)
			}
		case '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf(`format %q: lone \ at the end (write \\ for a backslash)`, s)
			}
			i++
			switch e := s[i]; e {
			case 'n':
				lit = append(lit, '\n')
			case 'r':
				lit = append(lit, '\r')
			case 't':
				lit = append(lit, '\t')
			case '\\':
				lit = append(lit, '\\')
			default:
				return nil, fmt.Errorf(`format %q: unknown escape \%c; known: \n \r \t \\`, s, e)
			}
		default:
			lit = append(lit, c)
		}
	}
	flush()
	if len(f.parts) == 0 {
		return nil, errors.New("format is empty")
	}
	return f, nil
}

// Append appends r formatted to dst.
func (f *RecordFormat) Append(dst []byte, r *ConsumedRecord) []byte {
	for _, p := range f.parts {
		switch p.code {
		case 0:
			dst = append(dst, p.literal...)
		case 't':
			dst = append(dst, r.Topic...)
		case 'p':
			dst = strconv.AppendInt(dst, int64(r.Partition), 10)
		case 'o':
			dst = strconv.AppendInt(dst, r.Offset, 10)
		case 'T':
			dst = strconv.AppendInt(dst, r.TimestampMs, 10)
		case 'k':
			dst = append(dst, r.Key...)
		case 'v':
			dst = append(dst, r.Value...)
		case 'K':
			dst = appendLen(dst, r.Key)
		case 'S':
			dst = appendLen(dst, r.Value)
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, h.Key...)
				dst = append(dst, '=')
				dst = append(dst, h.Value...)
			}
		}
	}
	return dst
}

func appendLen(dst, b []byte) []byte {
	if b == nil {
		return append(dst, "-1"...)
	}
	return strconv.AppendInt(dst, int64(len(b)), 10)
}

// JSONRecord is the --output json form of a consumed record. Keys, values
// and header values are strings when they are valid UTF-8; otherwise they
// are base64 in the *_base64 field instead. A null key or value is null.
type JSONRecord struct {
	Topic       string       `json:"topic"`
	Partition   int32        `json:"partition"`
	Offset      int64        `json:"offset"`
	Timestamp   int64        `json:"timestamp"`
	Key         *string      `json:"key"`
	KeyBase64   bool         `json:"key_base64,omitempty"`
	Value       *string      `json:"value"`
	ValueBase64 bool         `json:"value_base64,omitempty"`
	Headers     []JSONHeader `json:"headers"`
}

// JSONHeader is a header in a JSONRecord.
type JSONHeader struct {
	Key         string  `json:"key"`
	Value       *string `json:"value"`
	ValueBase64 bool    `json:"value_base64,omitempty"`
}

// NewJSONRecord converts r.
func NewJSONRecord(r *ConsumedRecord) JSONRecord {
	out := JSONRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.TimestampMs,
		Headers: []JSONHeader{}}
	out.Key, out.KeyBase64 = jsonBytes(r.Key)
	out.Value, out.ValueBase64 = jsonBytes(r.Value)
	for _, h := range r.Headers {
		jh := JSONHeader{Key: h.Key}
		jh.Value, jh.ValueBase64 = jsonBytes(h.Value)
		out.Headers = append(out.Headers, jh)
	}
	return out
}

// jsonBytes renders b as a string (UTF-8) or base64 (true), nil as null.
func jsonBytes(b []byte) (*string, bool) {
	if b == nil {
		return nil, false
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, false
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s, true
}
