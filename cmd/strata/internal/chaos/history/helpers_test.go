package history

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// origin is the start of every test history.
var origin = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at returns origin plus ms milliseconds.
func at(ms int64) time.Time { return origin.Add(time.Duration(ms) * time.Millisecond) }

// attemptOf returns an attempt of key on topic/partition with value
// "key/seq" (on t/0) or "topic/partition/key/seq", starting at seq*10 ms and
// taking 5 ms.
func attemptOf(topic string, partition int32, key string, seq int64, outcome Outcome, offset int64) Attempt {
	value := fmt.Appendf(nil, "%s/%d", key, seq)
	if topic != "t" || partition != 0 {
		value = fmt.Appendf(nil, "%s/%d/%s", topic, partition, value)
	}
	return Attempt{
		Topic: topic, Partition: partition, Key: key, Seq: seq,
		Value: value,
		Start: at(seq * 10), End: at(seq*10 + 5),
		Outcome: outcome, Offset: offset,
	}
}

// acked returns an acknowledged attempt of key on topic "t", partition 0.
func acked(key string, seq, offset int64) Attempt { return attemptOf("t", 0, key, seq, OK, offset) }

// failed returns a Failed attempt of key on topic "t", partition 0.
func failed(key string, seq int64) Attempt { return attemptOf("t", 0, key, seq, Failed, 0) }

// unknown returns an Unknown-outcome attempt of key on topic "t", partition 0.
func unknown(key string, seq int64) Attempt { return attemptOf("t", 0, key, seq, Unknown, 0) }

// readOf returns a read by reader of a's record at offset, in a's place.
func readOf(reader string, a Attempt, offset int64) Read {
	return Read{
		Topic: a.Topic, Partition: a.Partition, Offset: offset,
		Key: []byte(a.Key), Value: a.Value, Reader: reader, Time: a.End,
		Final: reader == "final",
	}
}

// final returns a final read of a's record at offset.
func final(a Attempt, offset int64) Read { return readOf("final", a, offset) }

// tail returns a tail reader's read of a's record at offset.
func tail(a Attempt, offset int64) Read { return readOf("tail", a, offset) }

// finalAcked returns the final read of an acknowledged attempt at its offset.
func finalAcked(a Attempt) Read { return final(a, a.Offset) }

// checkCase is a table test case of one check: a history and how many
// violations it holds.
type checkCase struct {
	name      string
	compacted []string
	attempts  []Attempt
	reads     []Read
	want      int
}

func (c checkCase) recorder() *Recorder {
	rec := newRecorderAt(origin)
	for _, topic := range c.compacted {
		rec.MarkCompacted(topic)
	}
	for _, a := range c.attempts {
		rec.RecordAttempt(a)
	}
	for _, rd := range c.reads {
		rec.RecordRead(rd)
	}
	return rec
}

// runCheckCases runs check over each case's history and compares the
// count; every violation found must come with an example.
func runCheckCases(t *testing.T, check func(*history) finding, cases []checkCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := check(c.recorder().snapshot())
			if f.count != c.want {
				t.Fatalf("count = %d, want %d; examples:\n%s", f.count, c.want, strings.Join(f.examples, "\n"))
			}
			if want := min(c.want, maxExamples); len(f.examples) != want {
				t.Fatalf("%d examples, want %d", len(f.examples), want)
			}
		})
	}
}
