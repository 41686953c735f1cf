package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/proto/brokerpb"
)

// fakeMetadata answers Metadata with md or err.
type fakeMetadata struct {
	md  *brokerpb.MetadataResponse
	err error
}

func (f fakeMetadata) Metadata(context.Context, ...string) (*brokerpb.MetadataResponse, error) {
	return f.md, f.err
}

func metadata(topic string, owners ...string) *brokerpb.MetadataResponse {
	t := &brokerpb.TopicMetadata{Name: topic}
	for i, o := range owners {
		t.Partitions = append(t.Partitions, &brokerpb.PartitionMetadata{Partition: int32(i), OwnerAddress: o})
	}
	return &brokerpb.MetadataResponse{Topics: []*brokerpb.TopicMetadata{t}}
}

func TestPartitionCount(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		md      *brokerpb.MetadataResponse
		want    int32
		wantErr string
	}{
		{"three", metadata("t", "a", "b", ""), 3, ""},
		{"none", metadata("t"), 0, "topic t has no partitions"},
		{"other topic", metadata("u", "a"), 0, "unknown topic"},
		{"topic error", &brokerpb.MetadataResponse{Topics: []*brokerpb.TopicMetadata{{Name: "t", Error: &brokerpb.PartitionError{Message: "gone"}}}}, 0, "topic t: gone"},
	} {
		n, err := PartitionCount(ctx, fakeMetadata{md: tc.md}, "t")
		if n != tc.want || (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: %d, %v; want %d, %q", tc.name, n, err, tc.want, tc.wantErr)
		}
	}
	if _, err := PartitionCount(ctx, fakeMetadata{md: metadata("u")}, "t"); !errors.Is(err, client.ErrUnknownTopic) {
		t.Errorf("unknown topic: %v, want client.ErrUnknownTopic", err)
	}
}

func TestAllOwned(t *testing.T) {
	if !AllOwned(metadata("t", "a", "b"), "t") {
		t.Error("every partition owned: not reported so")
	}
	if AllOwned(metadata("t", "a", ""), "t") || AllOwned(metadata("t"), "t") || AllOwned(metadata("u", "a"), "t") {
		t.Error("an unowned partition, no partitions or another topic: reported owned")
	}
	// WaitOwned gives up after wait.
	start := time.Now()
	if WaitOwned(context.Background(), fakeMetadata{md: metadata("t", "")}, "t", 50*time.Millisecond) {
		t.Error("WaitOwned: true for an unowned partition")
	}
	if time.Since(start) > 5*time.Second {
		t.Error("WaitOwned overran its wait")
	}
	if !WaitOwned(context.Background(), fakeMetadata{md: metadata("t", "a")}, "t", time.Second) {
		t.Error("WaitOwned: false for an owned topic")
	}
}

func TestTopicPartitions(t *testing.T) {
	src := fakeMetadata{md: metadata("t", "a", "b", "c")}
	all, err := topicPartitions(context.Background(), src, "t", -1)
	if err != nil || len(all) != 3 || all[2].Partition != 2 {
		t.Fatalf("every partition: %v, %v", all, err)
	}
	one, err := topicPartitions(context.Background(), src, "t", 1)
	if err != nil || len(one) != 1 || one[0].Partition != 1 {
		t.Fatalf("-p 1: %v, %v", one, err)
	}
	_, err = topicPartitions(context.Background(), src, "t", 3)
	if cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "-p 3: topic t has partitions 0 to 2") {
		t.Fatalf("-p 3: %v (exit %d)", err, cli.ExitCode(err))
	}
}

func TestClientOffset(t *testing.T) {
	now := time.Unix(1700000000, 0)
	for in, want := range map[string]client.Offset{
		"earliest":       client.OffsetEarliest(),
		"latest":         client.OffsetLatest(),
		"7":              client.OffsetAt(7),
		"-5":             client.OffsetFromEnd(5),
		"@1700000000000": client.OffsetAtTime(time.UnixMilli(1700000000000)),
	} {
		spec, err := cli.ParseOffset(in, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := ClientOffset(spec); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", in, got, want)
		}
	}
}

func TestAtEnd(t *testing.T) {
	tp0, tp1 := client.TopicPartition{Topic: "t", Partition: 0}, client.TopicPartition{Topic: "t", Partition: 1}
	tps := []client.TopicPartition{tp0, tp1}
	ends := map[client.TopicPartition]int64{tp0: 10, tp1: 0}
	end := func(tp client.TopicPartition) int64 { return ends[tp] }
	pos := func(m map[client.TopicPartition]int64) func(client.TopicPartition) (int64, bool) {
		return func(tp client.TopicPartition) (int64, bool) { v, ok := m[tp]; return v, ok }
	}
	if atEnd(tps, pos(map[client.TopicPartition]int64{tp0: 10}), end, nil) {
		t.Error("a partition without a position that is not empty: at end")
	}
	if !atEnd(tps, pos(map[client.TopicPartition]int64{tp0: 10}), end, map[client.TopicPartition]bool{tp1: true}) {
		t.Error("an empty partition without a position kept consume from its end")
	}
	if atEnd(tps, pos(map[client.TopicPartition]int64{tp0: 9, tp1: 0}), end, nil) {
		t.Error("a partition behind its end: at end")
	}
	owned := []client.TopicPartition{tp0}
	hw := pos(map[client.TopicPartition]int64{tp0: 10})
	if groupAtEnd(nil, hw, hw) {
		t.Error("a member owning nothing is at its end")
	}
	if !groupAtEnd(owned, pos(map[client.TopicPartition]int64{tp0: 10}), hw) || groupAtEnd(owned, pos(nil), hw) {
		t.Error("groupAtEnd")
	}
}

func TestPrintedPositions(t *testing.T) {
	p := newPrintedPositions()
	tp0, tp1 := client.TopicPartition{Topic: "t", Partition: 0}, client.TopicPartition{Topic: "t", Partition: 1}
	p.printed(&client.Record{Topic: "t", Partition: 0, Offset: 4})
	p.printed(&client.Record{Topic: "t", Partition: 1, Offset: 9})
	// S2: the commit position is the last printed offset + 1.
	if got := p.snapshot([]client.TopicPartition{tp0}); len(got) != 1 || got[tp0] != 5 {
		t.Fatalf("snapshot: %v", got)
	}
	if got := p.take([]client.TopicPartition{tp1}); got[tp1] != 10 {
		t.Fatalf("take: %v", got)
	}
	if got := p.snapshot([]client.TopicPartition{tp0, tp1}); len(got) != 1 {
		t.Fatalf("take did not forget: %v", got)
	}
}

// fakeSource returns batches, then blocks until ctx ends.
type fakeSource struct {
	batches [][]*client.Record
	polls   int
	end     bool
	blocked chan struct{} // closed when Poll blocks, if set
}

func (s *fakeSource) Poll(ctx context.Context) ([]*client.Record, error) {
	s.polls++
	if len(s.batches) == 0 {
		s.end = true
		if s.blocked != nil {
			close(s.blocked)
			s.blocked = nil
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	b := s.batches[0]
	s.batches = s.batches[1:]
	return b, nil
}

func (s *fakeSource) AtEnd() bool { return s.end }

func records(n int) []*client.Record {
	var out []*client.Record
	for i := range n {
		out = append(out, &client.Record{Topic: "t", Partition: 0, Offset: int64(i), Key: []byte("k"), Value: []byte(fmt.Sprint("v", i)),
			Timestamp: time.UnixMilli(1700000000000), Headers: []client.Header{{Key: "h", Value: []byte("x")}}})
	}
	return out
}

func TestLoop(t *testing.T) {
	format, err := cli.ParseRecordFormat(`%k=%v@%o %h\n`)
	if err != nil {
		t.Fatal(err)
	}
	recs := records(3)
	t.Run("count", func(t *testing.T) {
		var out bytes.Buffer
		var printed []int64
		l := Loop{Count: 2, Printed: func(r *client.Record) { printed = append(printed, r.Offset) }}
		if err := l.Run(context.Background(), &fakeSource{batches: [][]*client.Record{recs}}, NewRecordWriter(&out, format)); err != nil {
			t.Fatal(err)
		}
		if out.String() != "k=v0@0 h=x\nk=v1@1 h=x\n" || len(printed) != 2 {
			t.Fatalf("%q, printed %v", out.String(), printed)
		}
	})
	t.Run("exit at end, JSON", func(t *testing.T) {
		var out bytes.Buffer
		l := Loop{ExitAtEnd: true, PollTimeout: 10 * time.Millisecond}
		src := &fakeSource{batches: [][]*client.Record{recs[:1], recs[1:]}}
		if err := l.Run(context.Background(), src, NewRecordWriter(&out, nil)); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 3 || lines[0] != `{"topic":"t","partition":0,"offset":0,"timestamp":1700000000000,"key":"k","value":"v0","headers":[{"key":"h","value":"x"}]}` {
			t.Fatalf("%q", out.String())
		}
	})
	t.Run("interrupted is a clean stop", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var out bytes.Buffer
		l := Loop{BeforePoll: func(context.Context) {}}
		blocked := make(chan struct{})
		src := &fakeSource{batches: [][]*client.Record{recs}, blocked: blocked}
		go func() {
			<-blocked // the loop waits in Poll
			cancel()
		}()
		if err := l.Run(ctx, src, NewRecordWriter(&out, format)); err != nil {
			t.Fatalf("Ctrl-C: %v, want nil (S1)", err)
		}
		if strings.Count(out.String(), "\n") != 3 {
			t.Fatalf("the batch before Ctrl-C was not flushed (S3): %q", out.String())
		}
	})
	t.Run("poll error", func(t *testing.T) {
		boom := errors.New("boom")
		err := Loop{}.Run(context.Background(), errSource{boom}, NewRecordWriter(io.Discard, format))
		if !errors.Is(err, boom) {
			t.Fatalf("%v, want %v", err, boom)
		}
	})
}

type errSource struct{ err error }

func (s errSource) Poll(context.Context) ([]*client.Record, error) { return nil, s.err }
func (errSource) AtEnd() bool                                      { return false }

// fakeProducer acknowledges every record (or fails those whose value is
// "fail") from a goroutine of its own, as the client does.
type fakeProducer struct {
	mu       sync.Mutex
	records  []*client.Record
	wg       sync.WaitGroup
	closeErr error
	refuse   error // Produce's own error
}

func (p *fakeProducer) Produce(_ context.Context, r *client.Record, cb func(*client.Record, error)) error {
	if p.refuse != nil {
		return p.refuse
	}
	p.mu.Lock()
	p.records = append(p.records, r)
	p.mu.Unlock()
	p.wg.Go(func() {
		if string(r.Value) == "fail" {
			cb(r, errors.New("refused"))
			return
		}
		cb(r, nil)
	})
	return nil
}

func (p *fakeProducer) Close(context.Context) error {
	p.wg.Wait()
	return p.closeErr
}

func TestProduce(t *testing.T) {
	o := ProduceOptions{Topic: "t", Partition: -1, Split: cli.LineSplitter{KeySeparator: []byte(":")},
		Headers: []client.Header{{Key: "h", Value: []byte("v")}}}
	t.Run("all acknowledged", func(t *testing.T) {
		p := &fakeProducer{}
		res := Produce(context.Background(), strings.NewReader("k1:a\nb\n"), p, o)
		if res.Acked != 2 || res.Failed != 0 || res.Err() != nil {
			t.Fatalf("%+v", res)
		}
		if string(p.records[0].Key) != "k1" || string(p.records[0].Value) != "a" || p.records[1].Key != nil ||
			p.records[1].Partition != -1 || p.records[1].Offset != -1 || p.records[1].Headers[0].Key != "h" {
			t.Fatalf("records: %+v %+v", p.records[0], p.records[1])
		}
	})
	t.Run("one fails", func(t *testing.T) {
		res := Produce(context.Background(), strings.NewReader("a\nfail\nc\n"), &fakeProducer{}, o)
		if res.Acked != 2 || res.Failed != 1 || res.Err() == nil || res.Err().Error() != "1 records failed; first error: refused" {
			t.Fatalf("%+v: %v", res, res.Err())
		}
	})
	t.Run("flush fails", func(t *testing.T) {
		res := Produce(context.Background(), strings.NewReader("a\n"), &fakeProducer{closeErr: errors.New("late")}, o)
		if res.Failed != 1 || !strings.Contains(res.Err().Error(), "flush: late") {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("closed producer stops reading", func(t *testing.T) {
		res := Produce(context.Background(), strings.NewReader("a\nb\nc\n"), &fakeProducer{refuse: client.ErrClosed}, o)
		if res.Failed != 1 {
			t.Fatalf("%+v: want one failure, then a stop", res)
		}
	})
	t.Run("read error", func(t *testing.T) {
		res := Produce(context.Background(), io.MultiReader(strings.NewReader("a\n"), errReader{}), &fakeProducer{}, o)
		if res.Acked != 1 || res.Err() == nil || !strings.Contains(res.Err().Error(), "reading stdin: disk") {
			t.Fatalf("%+v: %v", res, res.Err())
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			_, _ = pw.Write([]byte("a\n"))
			cancel()
		}()
		res := Produce(ctx, pr, &fakeProducer{}, o)
		if !res.Interrupted || res.Err() == nil || res.Err().Error() != "interrupted" {
			t.Fatalf("%+v: %v", res, res.Err())
		}
		pw.Close() // ends the reader goroutine blocked in Read
	})
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk") }
