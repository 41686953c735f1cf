package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParseOffset(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		in   string
		want OffsetSpec
	}{
		{"earliest", OffsetSpec{Kind: OffsetEarliest}},
		{"beginning", OffsetSpec{Kind: OffsetEarliest}},
		{"latest", OffsetSpec{Kind: OffsetLatest}},
		{" END ", OffsetSpec{Kind: OffsetLatest}},
		{"0", OffsetSpec{Kind: OffsetAbsolute, N: 0}},
		{"1234", OffsetSpec{Kind: OffsetAbsolute, N: 1234}},
		{"-10", OffsetSpec{Kind: OffsetFromEnd, N: 10}},
		{"@1699999999000", OffsetSpec{Kind: OffsetTimestamp, Time: time.UnixMilli(1_699_999_999_000)}},
		{"@-1h", OffsetSpec{Kind: OffsetTimestamp, Time: now.Add(-time.Hour)}},
		{"@-90s", OffsetSpec{Kind: OffsetTimestamp, Time: now.Add(-90 * time.Second)}},
	} {
		got, err := ParseOffset(tc.in, now)
		if err != nil {
			t.Errorf("ParseOffset(%q): %v", tc.in, err)
			continue
		}
		if got.Kind != tc.want.Kind || got.N != tc.want.N || !got.Time.Equal(tc.want.Time) {
			t.Errorf("ParseOffset(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, wantErr string }{
		{"", "empty"},
		{"first", "want earliest, latest"},
		{"-0", `bad count "0"`},
		{"-x", `bad count "x"`},
		{"--5", `bad count "-5"`},
		{"1.5", "want earliest"},
		{"@", "bad timestamp"},
		{"@abc", "bad timestamp"},
		{"@-", "bad duration"},
		{"@-1", "bad duration"}, // a duration needs a unit
		{"@--1h", "bad duration"},
		{"@-1x", "bad duration"},
	} {
		_, err := ParseOffset(tc.in, now)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseOffset(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestRecordFormat(t *testing.T) {
	r := &ConsumedRecord{Topic: "orders", Partition: 2, Offset: 41, TimestampMs: 1700000000123,
		Key: []byte("k1"), Value: []byte("hello"),
		Headers: []RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("x y")}}}
	null := &ConsumedRecord{Topic: "t", Partition: 0, Offset: 7}
	for _, tc := range []struct {
		format string
		rec    *ConsumedRecord
		want   string
	}{
		{DefaultRecordFormat, r, "hello\n"},
		{`%k=%v (p%p@%o)\n`, r, "k1=hello (p2@41)\n"},
		{`%t[%p] %T %h\t%K/%S`, r, "orders[2] 1700000000123 a=1,b=x y\t2/5"},
		{`100%% %v\\`, r, `100% hello\`},
		{`%k|%v|%h|%K|%S\r\n`, null, "|||-1|-1\r\n"},
		{`plain`, r, "plain"},
	} {
		f, err := ParseRecordFormat(tc.format)
		if err != nil {
			t.Errorf("ParseRecordFormat(%q): %v", tc.format, err)
			continue
		}
		if got := string(f.Append(nil, tc.rec)); got != tc.want {
			t.Errorf("format %q = %q, want %q", tc.format, got, tc.want)
		}
	}
	for _, tc := range []struct{ format, wantErr string }{
		{"", "empty"},
		{"%v%", "lone %"},
		{"%x", "unknown code %x"},
		{`\`, `lone \`},
		{`%v\q`, `unknown escape \q`},
	} {
		_, err := ParseRecordFormat(tc.format)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseRecordFormat(%q) error %v, want one containing %q", tc.format, err, tc.wantErr)
		}
	}
}

func TestJSONRecord(t *testing.T) {
	r := &ConsumedRecord{Topic: "t", Partition: 1, Offset: 5, TimestampMs: 9, Key: nil, Value: []byte{0xff, 0x00},
		Headers: []RecordHeader{{Key: "h", Value: []byte("v")}}}
	b, err := json.Marshal(NewJSONRecord(r))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"topic":"t","partition":1,"offset":5,"timestamp":9,"key":null,"value":"/wA=","value_base64":true,` +
		`"headers":[{"key":"h","value":"v"}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}
