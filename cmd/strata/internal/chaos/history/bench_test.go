package history

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// benchHistory records a run of n acknowledged attempts over 64 keys on 16
// partitions, each record read by a tail reader, a group member and the
// final read, with one poll, delivery and commit per attempt.
func benchHistory(n int) *Recorder {
	rec := newRecorderAt(origin)
	offsets := make([]int64, 16)
	var key, value []byte
	for i := range n {
		k := i % 64
		part := int32(k % 16)
		seq := int64(i/64 + 1)
		key = strconv.AppendInt(append(key[:0], 'k'), int64(k), 10)
		value = strconv.AppendInt(append(append(value[:0], key...), '/'), seq, 10)
		start := origin.Add(time.Duration(i) * time.Microsecond)
		a := Attempt{Topic: "bench", Partition: part, Key: string(key), Seq: seq, Value: value,
			Start: start, End: start.Add(2 * time.Millisecond), Outcome: OK, Offset: offsets[part]}
		offsets[part]++
		rec.RecordAttempt(a)
		for _, reader := range []string{"tail", "g/m1", "final"} {
			rec.RecordRead(Read{Topic: a.Topic, Partition: part, Offset: a.Offset, Key: key, Value: value,
				Reader: reader, Time: a.End, Final: reader == "final"})
		}
		rec.RecordPoll(Poll{Topic: a.Topic, Partition: part, Start: start, End: a.End, OK: true})
		rec.RecordDelivery(Delivery{Group: "g", Member: "m1", Generation: 1, Topic: a.Topic, Partition: part, Offset: a.Offset})
		rec.RecordCommit(Commit{Group: "g", Topic: a.Topic, Partition: part, Offset: a.Offset, Start: a.End})
	}
	return rec
}

func BenchmarkRecordAttempt(b *testing.B) {
	rec := NewRecorder()
	now := time.Now()
	value := make([]byte, 0, 32)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		value = strconv.AppendInt(append(value[:0], "key-17/"...), int64(i), 10)
		rec.RecordAttempt(Attempt{Topic: "bench", Partition: 3, Key: "key-17", Seq: int64(i), Value: value,
			Start: now, End: now, Outcome: OK, Offset: int64(i)})
	}
}

func BenchmarkCheck(b *testing.B) {
	const attempts = 100_000
	rec := benchHistory(attempts)
	b.ReportAllocs()
	for b.Loop() {
		if rep := rec.Check(); !rep.OK() {
			b.Fatalf("not OK: %v", rep.Violations)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/attempts, "ns/attempt")
}

// TestMemory reports what a large history costs to keep and to check. It
// is slow, so it runs only when asked: STRATA_HISTORY_MEMORY=attempts.
func TestMemory(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("STRATA_HISTORY_MEMORY"))
	if n == 0 {
		t.Skip("set STRATA_HISTORY_MEMORY to a number of attempts")
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	rec := benchHistory(n)
	kept := heap() - before
	start := time.Now()
	rep := rec.Check()
	took := time.Since(start)
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fmt.Printf("%d attempts, %d reads: %d MB kept (%d bytes per attempt with its 3 reads, poll, commit), check took %v, peak heap %d MB, OK %v\n",
		n, rep.RecordsRead, kept>>20, kept/uint64(n), took, m.HeapSys>>20, rep.OK())
	runtime.KeepAlive(rec)
}
