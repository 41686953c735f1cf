package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestDescribeOffsetsColumn: describe's per-partition count is an offset
// span (END - START), labelled so, and a compacted topic says that it
// holds fewer records than that (issue 11: RECORDS over-counted
// compacted topics).
func TestDescribeOffsetsColumn(t *testing.T) {
	const note = "not a record count"
	for _, tc := range []struct {
		name     string
		policy   string
		cleaned  int64
		wantNote bool
	}{
		{"delete", "delete", 0, false},
		{"compact", "compact", 0, true},
		{"compact,delete", "compact,delete", 0, true},
		{"compacted, then switched to delete", "delete", 40, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := &topicJSON{Name: "t", Count: 1, Configs: []configJSON{{Name: "cleanup.policy", Value: tc.policy}},
				Partitions: []partitionJSON{{Partition: 0, OwnerID: "k1", OwnerAddress: "127.0.0.1:1", OwnerEpoch: 2,
					LogStartOffset: 10, HighWatermark: 110, Live: true, Bytes: 4096, CleanedOffset: tc.cleaned}}}
			var out bytes.Buffer
			if err := printTopic(&out, topic); err != nil {
				t.Fatal(err)
			}
			s := out.String()
			if strings.Contains(s, "RECORDS") || !strings.Contains(s, "  START  END  OFFSETS  BYTES") ||
				!strings.Contains(s, "  10     110  100      4.0 KiB") {
				t.Fatalf("describe:\n%s", s)
			}
			if got := strings.Contains(s, note); got != tc.wantNote {
				t.Fatalf("note %q printed: %t, want %t:\n%s", note, got, tc.wantNote, s)
			}
		})
	}
}
