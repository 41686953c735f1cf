package topic

import (
	"bytes"
	"strings"
	"testing"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/proto/brokerpb"
)

// TestDescribeOffsetsColumn: describe's per-partition count is an offset
// span (END - START), labelled so, and a compacted topic says that it
// holds fewer records than that (a RECORDS column over-counted
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
			topic := &Description{Name: "t", Count: 1, Configs: []Config{{Name: "cleanup.policy", Value: tc.policy}},
				Partitions: []Partition{{Partition: 0, OwnerID: "k1", OwnerAddress: "127.0.0.1:1", OwnerEpoch: 2,
					LogStartOffset: 10, HighWatermark: 110, Live: true, Bytes: 4096, CleanedOffset: tc.cleaned}}}
			var out bytes.Buffer
			if err := printText(&out, topic); err != nil {
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

func TestPrintList(t *testing.T) {
	topics := []*brokerpb.TopicSummary{{Name: "zeta", Partitions: 1}, {Name: "__consumer_offsets", Partitions: 50, Internal: true}, {Name: "alpha", Partitions: 3}}
	var out bytes.Buffer
	if err := PrintList(&cli.Printer{W: &out, Format: cli.FormatText}, topics); err != nil {
		t.Fatal(err)
	}
	if want := "NAME                           PARTITIONS\n__consumer_offsets (internal)  50\nalpha                          3\nzeta                           1\n"; out.String() != want {
		t.Fatalf("%q\nwant %q", out.String(), want)
	}
	out.Reset()
	if err := PrintList(&cli.Printer{W: &out, Format: cli.FormatJSON}, []*brokerpb.TopicSummary{{Name: "alpha", Partitions: 3}}); err != nil || out.String() != `[{"name":"alpha","partitions":3}]`+"\n" {
		t.Fatalf("%v %q", err, out.String())
	}
}

func TestNewSorts(t *testing.T) {
	d := New(&brokerpb.TopicDescription{Name: "t", PartitionCount: 2,
		Configs:    []*brokerpb.ConfigEntry{{Name: "retention.ms", Value: "1"}, {Name: "cleanup.policy", Value: "delete", IsDefault: true}},
		Partitions: []*brokerpb.PartitionDescription{{Partition: 1}, {Partition: 0, Ledgers: []*brokerpb.LedgerDescription{{LedgerId: 7}}}}})
	if d.Configs[0].Name != "cleanup.policy" || !d.Configs[0].Default || d.Partitions[0].Partition != 0 || d.Partitions[0].Ledgers[0].LedgerID != 7 ||
		d.Partitions[1].Ledgers == nil {
		t.Fatalf("%+v", d)
	}
	var out bytes.Buffer
	if err := PrintConfigs(&cli.Printer{W: &out, Format: cli.FormatText}, d); err != nil {
		t.Fatal(err)
	}
	if want := "  NAME            VALUE   SOURCE\n  cleanup.policy  delete  default\n  retention.ms    1       topic\n"; out.String() != want {
		t.Fatalf("%q", out.String())
	}
}
