package raftstore

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/strata-log/strata/internal/corruption"
)

// sampleLogs covers every field at its extremes.
func sampleLogs() map[string]*raft.Log {
	return map[string]*raft.Log{
		"minimal": {Index: 1},
		"all fields": {
			Index:      42,
			Term:       7,
			Type:       raft.LogConfiguration,
			Data:       []byte("payload"),
			Extensions: []byte{0x00, 0xff},
			AppendedAt: time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC),
		},
		"max integers": {
			Index:      math.MaxUint64,
			Term:       math.MaxUint64,
			Type:       raft.LogType(math.MaxUint8),
			AppendedAt: time.Unix(0, math.MaxInt64).UTC(),
		},
		"before epoch": {
			Index:      3,
			Term:       1,
			AppendedAt: time.Unix(0, math.MinInt64).UTC(),
		},
		"large data": {
			Index: 9,
			Term:  2,
			Type:  raft.LogCommand,
			Data:  bytes.Repeat([]byte{0xab}, 1<<20),
		},
	}
}

// requireSameLog fails unless got and want hold the same entry. Empty and
// nil byte slices are the same; times compare with Equal.
func requireSameLog(t testing.TB, got, want *raft.Log) {
	t.Helper()
	if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
		!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
		!got.AppendedAt.Equal(want.AppendedAt) {
		t.Fatalf("log mismatch:\n got  %+v\n want %+v", summarise(got), summarise(want))
	}
}

// summarise keeps failure messages short when Data is large.
func summarise(l *raft.Log) raft.Log {
	out := *l
	if len(out.Data) > 32 {
		out.Data = out.Data[:32]
	}
	return out
}

func TestLogRoundTrip(t *testing.T) {
	for name, want := range sampleLogs() {
		t.Run(name, func(t *testing.T) {
			encoded := appendLog(nil, want)
			var got raft.Log
			if err := decodeLog(encoded, &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			requireSameLog(t, &got, want)
			if len(got.Data) == 0 && got.Data != nil {
				t.Errorf("empty Data decoded as %#v, want nil", got.Data)
			}
		})
	}
}

// TestLogEncodingGolden pins the version 1 layout documented in doc.go:
// changing it breaks every store on disk.
func TestLogEncodingGolden(t *testing.T) {
	l := &raft.Log{
		Index:      300,
		Term:       2,
		Type:       raft.LogCommand,
		Data:       []byte("hi"),
		Extensions: []byte{0x07},
		AppendedAt: time.Unix(0, -1),
	}
	const want = "01" + // version
		"ac02" + // index 300, uvarint
		"02" + // term 2
		"00" + // type LogCommand
		"02" + "6869" + // data length 2, "hi"
		"01" + "07" + // extensions length 1, 0x07
		"01" // appended at -1ns, zig-zag varint
	if got := hex.EncodeToString(appendLog(nil, l)); got != want {
		t.Fatalf("encoding = %s, want %s", got, want)
	}
	// The zero time is stored as 0.
	if got := hex.EncodeToString(appendLog(nil, &raft.Log{Index: 1})); got != "01010000000000" {
		t.Fatalf("zero log encoding = %s", got)
	}
}

func TestDecodeLogCorrupt(t *testing.T) {
	valid := appendLog(nil, sampleLogs()["all fields"])
	cases := map[string][]byte{
		"empty":                 nil,
		"version 0":             {0x00, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00},
		"version 2":             {0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00},
		"trailing byte":         append(appendLog(nil, &raft.Log{Index: 1}), 0x00),
		"data length max":       {0x01, 0x01, 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"data length past end":  {0x01, 0x01, 0x01, 0x00, 0x05, 'a', 'b'},
		"index overflows":       {0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"appended-at truncated": {0x01, 0x01, 0x01, 0x00, 0x00, 0x00, 0x80},
	}
	// Every proper prefix of a valid value is truncated.
	for n := range len(valid) {
		cases[fmt.Sprintf("prefix %d", n)] = valid[:n]
	}
	for name, input := range cases {
		t.Run(name, func(t *testing.T) {
			sentinel := raft.Log{Index: 99, Data: []byte("untouched")}
			got := sentinel
			err := decodeLog(input, &got)
			if !errors.Is(err, ErrCorrupt) || !corruption.Is(err) {
				t.Fatalf("decodeLog(%x) = %v, want ErrCorrupt, marked as corruption", input, err)
			}
			requireSameLog(t, &got, &sentinel)
		})
	}
}

// FuzzDecodeLog: decodeLog never panics, fails only with ErrCorrupt, and
// whatever it accepts re-encodes (minimally) to a value that decodes to the
// same entry.
func FuzzDecodeLog(f *testing.F) {
	for _, l := range sampleLogs() {
		if len(l.Data) < 1024 {
			f.Add(appendLog(nil, l))
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0x01})
	f.Add([]byte{0x01, 0x01, 0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, input []byte) {
		var decoded raft.Log
		if err := decodeLog(input, &decoded); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		reencoded := appendLog(nil, &decoded)
		if len(reencoded) > len(input) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(input), len(reencoded))
		}
		var again raft.Log
		if err := decodeLog(reencoded, &again); err != nil {
			t.Fatalf("re-encoded value does not decode: %v", err)
		}
		requireSameLog(t, &again, &decoded)
	})
}

func TestLogKeyOrder(t *testing.T) {
	indexes := []uint64{0, 1, 255, 256, 1 << 32, math.MaxUint64 - 1, math.MaxUint64}
	for i := 1; i < len(indexes); i++ {
		if bytes.Compare(logKey(indexes[i-1]), logKey(indexes[i])) >= 0 {
			t.Errorf("logKey(%d) does not sort before logKey(%d)", indexes[i-1], indexes[i])
		}
	}
	if bytes.Compare(logKey(math.MaxUint64), logKeysEnd) >= 0 {
		t.Error("logKey(MaxUint64) does not sort before logKeysEnd")
	}
	if bytes.Compare(logKeysEnd, stableKey(nil)) > 0 {
		t.Error("log keys and stable keys overlap")
	}
	for _, index := range indexes {
		got, err := parseLogKey(logKey(index))
		if err != nil || got != index {
			t.Errorf("parseLogKey(logKey(%d)) = %d, %v", index, got, err)
		}
	}
}
