package ledgers

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

func closedLedger() *ledgerpb.LedgerMetadata {
	return &ledgerpb.LedgerMetadata{Id: 7, State: ledgerpb.LedgerState_CLOSED, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2,
		LastEntryId: 99, Length: 4096, CreatedAtMs: 1_700_000_000_000, Properties: map[string]string{"topic": "t", "partition": "0"},
		Fragments: []*ledgerpb.Fragment{{FirstEntryId: 0, Bookies: []string{"a", "b", "c"}}, {FirstEntryId: 50, Bookies: []string{"a", "d", "c"}}}}
}

func TestNewRow(t *testing.T) {
	r := NewRow(closedLedger(), true)
	if *r.Entries != 100 || *r.LastEntryID != 99 || *r.Length != 4096 || strings.Join(r.Ensemble, ",") != "a,d,c" ||
		len(r.Fragments) != 2 || *r.Fragments[0].LastEntryID != 49 || *r.Fragments[1].LastEntryID != 99 || r.CreatedAt != "2023-11-14T22:13:20Z" {
		t.Fatalf("%+v", r)
	}
	open := NewRow(&ledgerpb.LedgerMetadata{Id: 8, State: ledgerpb.LedgerState_OPEN,
		Fragments: []*ledgerpb.Fragment{{FirstEntryId: 0, Bookies: []string{"a"}}}}, true)
	if open.Entries != nil || open.Fragments[0].LastEntryID != nil {
		t.Fatalf("an open ledger's end is unknown: %+v", open)
	}
	if NewRow(closedLedger(), false).Fragments != nil {
		t.Fatal("fragments without withFragments")
	}
}

func TestPrint(t *testing.T) {
	var out bytes.Buffer
	p := &cli.Printer{W: &out, Format: cli.FormatText}
	if err := PrintDescription(p, NewRow(closedLedger(), true), nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ledger      7\n", "quorums     E=3 Qw=3 Qa=2\n", "last entry  99\n", "length      4.0 KiB (4096 bytes)\n",
		"properties  partition=0\n            topic=t\n", "fragments:\n  FIRST ENTRY  LAST ENTRY  BOOKIES\n  0            49          a,b,c\n  50           99          a,d,c\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("describe lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := PrintDescription(p, NewRow(&ledgerpb.LedgerMetadata{Id: 8, State: ledgerpb.LedgerState_OPEN}, true), errors.New("no bookie")); err != nil ||
		!strings.Contains(out.String(), "last add confirmed  unknown: no bookie\n") {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	out.Reset()
	if err := PrintList(p, []*ledgerpb.LedgerMetadata{closedLedger()}); err != nil ||
		out.String() != "ID  STATE   ENTRIES  SIZE     ENSEMBLE\n7   CLOSED  100      4.0 KiB  a,d,c\n" {
		t.Fatalf("%v: %q", err, out.String())
	}
	out.Reset()
	if err := PrintEntryCheck(p, ledger.EntryCheck{ID: 3, Size: 10, CRC32C: 0xabc, Status: ledger.EntryOK}); err != nil || out.String() != "3\t10\t00000abc\tOK\n" {
		t.Fatalf("%v: %q", err, out.String())
	}
	out.Reset()
	js := &cli.Printer{W: &out, Format: cli.FormatJSON}
	if err := PrintEntryCheck(js, ledger.EntryCheck{ID: 4, Status: ledger.EntryCorrupt, Err: errors.New("crc")}); err != nil ||
		!strings.Contains(out.String(), `"status":"`+string(ledger.EntryCorrupt)+`","error":"crc"`) {
		t.Fatalf("%v: %q", err, out.String())
	}
}

func TestPrintSimpleTest(t *testing.T) {
	r := &ledger.SimpleTestResult{LedgerID: 9, Ensemble: []string{"a", "b", "c"}, E: 3, Qw: 3, Qa: 2, Entries: 1000, EntrySize: 1024,
		Bytes: 1024000, WriteTime: time.Second, ReadTime: 500 * time.Millisecond, Verified: 1000, Closed: true, Deleted: true,
		AddLatency: ledger.LatencySummary{P50: 1234567 * time.Nanosecond, P99: 900 * time.Microsecond, Count: 1000}}
	var out bytes.Buffer
	if err := PrintSimpleTest(&cli.Printer{W: &out, Format: cli.FormatText}, r, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ledger 9 on a,b,c (E=3 Qw=3 Qa=2)\n", "write: 1000 entries of 1024 bytes (1000.0 KiB) in 1s: 1.02 MB/s, 1000 entries/s\n",
		"add latency: p50 1.23ms  p99 900µs", "read:  1000 of 1000 entries verified", "ledger 9 deleted\nOK\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := PrintSimpleTest(&cli.Printer{W: &out, Format: cli.FormatJSON}, r, errors.New("mismatch")); err != nil ||
		!strings.Contains(out.String(), `"ok":false,"error":"mismatch"`) {
		t.Fatalf("%v: %s", err, out.String())
	}
}
