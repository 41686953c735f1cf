package tier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/scrub"
	"github.com/strata-log/strata/tiering/segfile"
)

func TestStatusRows(t *testing.T) {
	now := time.UnixMilli(1_700_000_100_000)
	descs := []*brokerpb.TopicDescription{
		{Name: "orders", Partitions: []*brokerpb.PartitionDescription{
			{Partition: 1, LogStartOffset: 0, TieredEndOffset: 100, TieredSegments: 2, TieredBytes: 2048, Bytes: 4096,
				Ledgers: []*brokerpb.LedgerDescription{
					{LedgerId: 1, FirstOffset: 50, LastOffset: 99, Bytes: 1000, MaxTimestampMs: 1_700_000_000_000, Closed: true}, // tiered
					{LedgerId: 2, FirstOffset: 100, LastOffset: 149, Bytes: 1500, MaxTimestampMs: 1_700_000_040_000, Closed: true},
					{LedgerId: 3, FirstOffset: 150, LastOffset: 159, Bytes: 300, MaxTimestampMs: 1_700_000_090_000, Closed: true},
					{LedgerId: 4, FirstOffset: 160, LastOffset: 170, Bytes: 99, Closed: false}, // open: not yet uploadable
				}},
			{Partition: 0, LogStartOffset: -1},
		}},
		{Name: "compacted", Configs: []*brokerpb.ConfigEntry{{Name: "remote.storage.enable", Value: "false"}},
			Partitions: []*brokerpb.PartitionDescription{{Partition: 0}}},
	}
	rows := StatusRows(descs, now)
	if len(rows) != 3 || rows[0].Topic != "compacted" || rows[1].Partition != 0 || rows[2].Partition != 1 {
		t.Fatalf("not sorted: %+v", rows)
	}
	if r := rows[2]; !r.Tiering || r.LagLedgers != 2 || r.LagBytes != 1800 || r.LagMs != 60_000 || r.BookieLedgers != 4 {
		t.Fatalf("upload lag: %+v", r)
	}
	if rows[0].Tiering || rows[0].LagLedgers != 0 {
		t.Fatalf("remote.storage.enable=false: %+v", rows[0])
	}
	var out bytes.Buffer
	if err := PrintStatus(&cli.Printer{W: &out, Format: cli.FormatText}, rows); err != nil {
		t.Fatal(err)
	}
	want := "TOPIC      PARTITION  START  TIERED END  OBJECTS  STORE    BOOKIES  LEDGERS  LAG                   LAG AGE\n" +
		"compacted  0          0      -           0        0 B      0 B      0        off                   -\n" +
		"orders     0          -      -           0        0 B      0 B      0        0                     -\n" +
		"orders     1          0      100         2        2.0 KiB  4.0 KiB  4        1.8 KiB in 2 ledgers  1m0s\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	if err := PrintStatus(&cli.Printer{W: &out, Format: cli.FormatJSON}, rows[:1]); err != nil || !strings.HasPrefix(out.String(), `{"partitions":[{"topic":"compacted"`) {
		t.Fatalf("JSON: %v %s", err, out.String())
	}
}

// fakeLister serves PartitionLogs by key.
type fakeLister map[string]*brokerpb.PartitionLog

func (f fakeLister) List(_ context.Context, prefix string, _ ...metaclient.ReadOption) ([]*metadpb.KeyValue, int64, error) {
	var kvs []*metadpb.KeyValue
	for k, pl := range f {
		if strings.HasPrefix(k, prefix) {
			v, err := proto.Marshal(pl)
			if err != nil {
				return nil, 0, err
			}
			kvs = append(kvs, &metadpb.KeyValue{Key: k, Value: v})
		}
	}
	return kvs, 1, nil
}

func TestSegmentsAndScrub(t *testing.T) {
	seg := &brokerpb.TieredSegment{ObjectKey: "orders/0/0.seg", BaseOffset: 0, LastOffset: 9, SizeBytes: 100}
	metad := fakeLister{"/strata/partitions/orders/0": {Tiered: []*brokerpb.TieredSegment{seg}}}
	ctx := context.Background()
	segs, err := Segments(ctx, metad, "orders")
	if err != nil || len(segs) != 1 || segs[0].Topic != "orders" || segs[0].Partition != 0 || segs[0].Tiered.GetObjectKey() != seg.ObjectKey {
		t.Fatalf("%+v %v", segs, err)
	}
	if _, err := Segments(ctx, metad, "nope"); err == nil || !strings.Contains(err.Error(), "topic nope: no partition in metad") {
		t.Fatalf("unknown topic: %v", err)
	}
	// The object is not in the (empty) store: damaged, exit 2.
	var out, stderr bytes.Buffer
	err = Scrub(ctx, memstore.New(memstore.Options{}), segs, &cli.Printer{W: &out, Format: cli.FormatJSON}, ScrubOptions{Parallel: 1, Stderr: &stderr})
	if cli.ExitCode(err) != cli.ExitUsage {
		t.Fatalf("a missing object: exit %d (%v), want 2", cli.ExitCode(err), err)
	}
	var rep ScrubJSON
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Damaged != 1 || rep.Problems[0].Kind != string(scrub.KindMissing) {
		t.Fatalf("JSON %v: %s", err, out.String())
	}
	if !strings.Contains(stderr.String(), "scrub: checked 1 of 1 objects (100 B) in ") || !strings.HasSuffix(stderr.String(), ": 1 problem (1 missing)\n") {
		t.Fatalf("summary: %q", stderr.String())
	}
	// Nothing to check: fine.
	stderr.Reset()
	if err := Scrub(ctx, memstore.New(memstore.Options{}), nil, &cli.Printer{W: &out, Format: cli.FormatText}, ScrubOptions{Parallel: 1, Stderr: &stderr}); err != nil ||
		!strings.HasSuffix(stderr.String(), "no problems\n") {
		t.Fatalf("%v %q", err, stderr.String())
	}
}

func TestPlural(t *testing.T) {
	if plural(1, "ledger") != "1 ledger" || plural(0, "ledger") != "0 ledgers" || plural(3, "problem") != "3 problems" {
		t.Fatal("plural")
	}
}

type getterFunc func(key string) (*metadpb.KeyValue, error)

func (f getterFunc) Get(_ context.Context, key string, _ ...metaclient.ReadOption) (*metadpb.KeyValue, error) {
	return f(key)
}

// Listed asks metad for the segment's partition now: its object listed,
// not listed, or the partition gone (its topic deleted).
func TestListed(t *testing.T) {
	pl, err := proto.Marshal(&brokerpb.PartitionLog{Tiered: []*brokerpb.TieredSegment{{ObjectKey: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	listed := Listed(getterFunc(func(key string) (*metadpb.KeyValue, error) {
		if key != brokerpb.PartitionPrefix+"orders/3" {
			return nil, metaclient.ErrNotFound
		}
		return &metadpb.KeyValue{Key: key, Value: pl}, nil
	}))
	for _, tc := range []struct {
		topic string
		key   string
		want  bool
	}{{"orders", "a", true}, {"orders", "b", false}, {"deleted", "a", false}} {
		got, err := listed(context.Background(), scrub.Segment{Topic: tc.topic, Partition: 3, Tiered: &brokerpb.TieredSegment{ObjectKey: tc.key}})
		if err != nil || got != tc.want {
			t.Errorf("%s/3 %s: listed %v, %v; want %v", tc.topic, tc.key, got, err, tc.want)
		}
	}
}

// TierKey reads the key from metad: none when no broker made one, an
// error naming the key when metad refuses (a role that may not read it),
// and a value that is not a key is an error.
func TestTierKey(t *testing.T) {
	ctx := context.Background()
	secret := bytes.Repeat([]byte{4}, segfile.KeySize)
	want, err := segfile.NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	denied := errors.New("permission denied")
	for _, tc := range []struct {
		name    string
		value   []byte
		err     error
		wantErr string
		wantKey *segfile.Key
	}{
		{"stored", secret, nil, "", want},
		{"none", nil, metaclient.ErrNotFound, "", nil},
		{"refused", nil, denied, brokerpb.TierSegmentMACKey, nil},
		{"not a key", []byte("short"), nil, brokerpb.TierSegmentMACKey, nil},
	} {
		got, err := TierKey(ctx, getterFunc(func(key string) (*metadpb.KeyValue, error) {
			if key != brokerpb.TierSegmentMACKey {
				t.Fatalf("read %s", key)
			}
			return &metadpb.KeyValue{Key: key, Value: tc.value}, tc.err
		}))
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantKey != nil && (got == nil || got.ID() != tc.wantKey.ID()), tc.wantKey == nil && got != nil:
			t.Errorf("%s: key %v, want %v", tc.name, got, tc.wantKey)
		}
	}
}

// Objects written before authentication are listed, but a scrub that
// finds nothing else exits 0.
func TestScrubUnauthenticatedOnlyExitsZero(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		Records: []recordbatch.Record{{TimestampMs: 1, Value: []byte("v")}}})
	if err != nil {
		t.Fatal(err)
	}
	var obj bytes.Buffer
	w, err := segfile.NewWriter(&obj, segfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(b); err != nil {
		t.Fatal(err)
	}
	sum, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "orders/0/old.seg", bytes.NewReader(obj.Bytes()), sum.Size, nil); err != nil {
		t.Fatal(err)
	}
	segs := []scrub.Segment{{Topic: "orders", Tiered: &brokerpb.TieredSegment{ObjectKey: "orders/0/old.seg", LastOffset: sum.LastOffset,
		SizeBytes: sum.Size, IndexPos: sum.IndexPos, DataBytes: sum.DataBytes, Records: sum.Records, MaxTimestampMs: sum.MaxTimestampMs}}}
	var out, stderr bytes.Buffer
	err = Scrub(ctx, st, segs, &cli.Printer{W: &out, Format: cli.FormatText}, ScrubOptions{Parallel: 1, Stderr: &stderr})
	if err != nil || !strings.Contains(out.String(), "orders/0/old.seg: unauthenticated: written before authentication") ||
		!strings.HasSuffix(stderr.String(), "1 problem (1 unauthenticated)\n") {
		t.Fatalf("exit %d (%v)\nstdout %q\nstderr %q", cli.ExitCode(err), err, out.String(), stderr.String())
	}
}
