package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// cleanRun records a run with no violation: two keys on two partitions,
// one fault, group deliveries and commits, and the final read.
func cleanRun(rec *Recorder) {
	var acks []Attempt
	for seq := int64(1); seq <= 5; seq++ {
		a := attemptOf("t", 0, "a", seq, OK, seq-1)
		b := attemptOf("t", 1, "b", seq, OK, seq-1)
		rec.RecordAttempt(a)
		rec.RecordAttempt(b)
		acks = append(acks, a, b)
	}
	rec.RecordAttempt(attemptOf("t", 0, "a", 6, Failed, 0))
	rec.RecordAttempt(attemptOf("t", 1, "b", 6, Unknown, 0))
	for _, a := range acks {
		rec.RecordRead(tail(a, a.Offset))
		rec.RecordRead(finalAcked(a))
		rec.RecordDelivery(Delivery{Group: "g", Member: "m-" + a.Key, Generation: 1,
			Topic: a.Topic, Partition: a.Partition, Offset: a.Offset})
	}
	rec.RecordPoll(Poll{Topic: "t", Partition: 0, Start: at(0), End: at(5), OK: true})
	rec.RecordCommit(Commit{Group: "g", Topic: "t", Offset: 2, Member: "m-a", Start: at(20), End: at(21)})
	rec.RecordCommit(Commit{Group: "g", Topic: "t", Offset: 5, Start: at(30), End: at(31)})
	rec.RecordFault(Fault{Kind: "kill", Target: "broker-0", Start: at(12), End: at(40)})
}

func TestCheckClean(t *testing.T) {
	rec := newRecorderAt(origin)
	cleanRun(rec)
	rep := rec.Check()
	if !rep.OK() {
		var buf bytes.Buffer
		_ = rep.WriteTable(&buf)
		t.Fatalf("clean run is not OK:\n%s", buf.String())
	}
	if rep.Acknowledged != 10 || rep.Attempts != 12 || rep.Failed != 1 || rep.UnknownOutcome != 1 ||
		rep.RecordsRead != 20 || rep.FinalRecords != 10 || rep.Faults["kill"] != 1 {
		t.Fatalf("counts: %+v", rep)
	}
	// Each key's attempts go out one at a time, 5 ms each.
	if rep.MaxUnavailableMs != 5 || len(rep.FaultAvailability) != 1 || rep.FaultAvailability[0].MaxUnavailableMs != 5 {
		t.Fatalf("availability: max %d ms, per fault %+v", rep.MaxUnavailableMs, rep.FaultAvailability)
	}
	if len(rep.Violations) != 0 {
		t.Fatalf("violations: %v", rep.Violations)
	}
}

// TestCheckFindsEveryKind records one violation of each kind on top of a
// clean run, and expects each count to be one.
func TestCheckFindsEveryKind(t *testing.T) {
	rec := newRecorderAt(origin)
	cleanRun(rec)
	lostRecord := attemptOf("t", 0, "a", 7, OK, 5) // never read
	moved := attemptOf("t", 0, "a", 8, OK, 6)      // read at 7, and at 6 first by a tail reader
	twice := attemptOf("t", 1, "b", 7, OK, 5)      // read at 5 and 6: also at a wrong offset
	early := attemptOf("t", 1, "b", 8, OK, 7)      // final read puts seq 9 before it
	later := attemptOf("t", 1, "b", 9, OK, 8)
	failedRecord := attemptOf("t", 0, "a", 9, Failed, 0)
	gone := attemptOf("t", 0, "a", 10, Unknown, 0) // read at 5, which the final read lacks
	for _, a := range []Attempt{lostRecord, moved, twice, early, later, failedRecord, gone} {
		rec.RecordAttempt(a)
	}
	again := attemptOf("t", 0, "z", 1, Unknown, 0)
	again.Value = moved.Value
	rec.RecordAttempt(again) // invalid: a value made twice
	for _, rd := range []Read{
		tail(moved, 6), final(moved, 7), // wrong offset, duplicated
		final(twice, 5), final(twice, 6), // duplicated
		final(later, 7), final(early, 8), // wrong offset twice, reordered
		tail(failedRecord, 8), // phantom
		tail(gone, 5),         // vanished
		{Topic: "t", Partition: 0, Offset: 6, Value: []byte("junk"), Reader: "final", Final: true}, // corrupt, conflict with moved at 6
	} {
		rec.RecordRead(rd)
	}
	rec.RecordDelivery(Delivery{Group: "g", Member: "m-other", Generation: 1, Topic: "t", Partition: 0, Offset: 3})
	rec.RecordCommit(Commit{Group: "g", Topic: "t", Offset: 1, Start: at(50), End: at(51)})

	rep := rec.Check()
	if rep.OK() {
		t.Fatal("OK with violations")
	}
	want := map[string]int{
		"lost": 1, "wrong_offset": 4, "duplicated": 2, "reordered": 1, "conflicts": 1, "corrupt": 1,
		"phantom": 1, "group_overlaps": 1, "commit_regressions": 1, "invalid_history": 1, "vanished": 1,
	}
	got := map[string]int{
		"lost": rep.Lost, "wrong_offset": rep.WrongOffset, "duplicated": rep.Duplicated, "reordered": rep.Reordered,
		"conflicts": rep.Conflicts, "corrupt": rep.Corrupt, "phantom": rep.Phantom,
		"group_overlaps": rep.GroupOverlaps, "commit_regressions": rep.CommitRegressions,
		"invalid_history": rep.InvalidHistory, "vanished": rep.Vanished,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("counts = %v, want %v", got, want)
	}
	for kind, n := range want {
		if len(rep.Violations[kind]) != n {
			t.Errorf("%s: %d examples, want %d", kind, len(rep.Violations[kind]), n)
		}
	}
	if n := len(rep.violationCounts()); n != len(want) {
		t.Errorf("the report has %d kinds of violation, want %d", n, len(want))
	}

	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"verdict", "VIOLATIONS", "kill            1", "lost: 1, examples:", `"a/7" (key "a" seq 7 to t/0`} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, buf.String())
		}
	}
}

// TestReportJSON pins the names of the fields the runner and its readers
// depend on.
func TestReportJSON(t *testing.T) {
	rec := newRecorderAt(origin)
	cleanRun(rec)
	rep := rec.Check()
	rep.Seed, rep.DurationSeconds = 42, 1.5
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"seed": 42.0, "duration_s": 1.5, "faults": map[string]any{"kill": 1.0}, "acknowledged": 10.0,
		"lost": 0.0, "duplicated": 0.0, "reordered": 0.0, "max_unavailable_ms": 5.0,
	} {
		if !reflect.DeepEqual(m[key], want) {
			t.Errorf("%s = %#v, want %#v", key, m[key], want)
		}
	}
}

func TestReportOK(t *testing.T) {
	if rep := (Report{MaxUnavailableMs: 60_000, MaxReadUnavailableMs: 60_000}); !rep.OK() {
		t.Fatal("unavailability failed the run")
	}
	// Every int count but the inventory ones must fail the run.
	inventory := map[string]bool{"Acknowledged": true, "Attempts": true, "Failed": true,
		"UnknownOutcome": true, "RecordsRead": true, "FinalRecords": true}
	typ := reflect.TypeFor[Report]()
	for i := range typ.NumField() {
		field := typ.Field(i)
		if field.Type.Kind() != reflect.Int || inventory[field.Name] {
			continue
		}
		var rep Report
		reflect.ValueOf(&rep).Elem().Field(i).SetInt(1)
		if rep.OK() {
			t.Errorf("OK with %s = 1", field.Name)
		}
	}
}

func TestWriteTable(t *testing.T) {
	rec := newRecorderAt(origin)
	cleanRun(rec)
	rec.RecordFault(Fault{Kind: "pause", Target: "bookie-1", Start: at(0), End: at(1)})
	rep := rec.Check()
	rep.Seed, rep.DurationSeconds = 7, 62.25
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	want := `seed              7
duration          62.2s
faults            2
  kill            1  (worst unavailable while it lasted: produce 5 ms, read 0 ms)
  pause           1  (worst unavailable while it lasted: produce 0 ms, read 5 ms)
attempts          12 (acknowledged 10, failed 1, unknown outcome 1)
records read      20 (final read 10)
lost              0
duplicated        0
reordered         0
other violations  wrong offset 0, conflicts 0, vanished 0, corrupt 0, phantom 0, group overlaps 0, commit regressions 0, invalid history 0
max unavailable   produce 5 ms (t/0 +0.010s..+0.015s); read 5 ms (t/0 +0.000s..+0.005s)
verdict           OK
`
	if buf.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// TestRecorderConcurrent records from many goroutines at once (run with
// -race) and checks nothing was dropped.
func TestRecorderConcurrent(t *testing.T) {
	rec := newRecorderAt(origin)
	const writers, perWriter = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", w)
			for seq := int64(1); seq <= perWriter; seq++ {
				a := attemptOf("t", int32(w), key, seq, OK, seq-1)
				rec.RecordAttempt(a)
				rec.RecordRead(finalAcked(a))
				rec.RecordPoll(Poll{Topic: "t", Partition: int32(w), Start: a.Start, End: a.End, OK: true})
				rec.RecordDelivery(Delivery{Group: "g", Member: key, Generation: 1, Topic: "t", Partition: int32(w), Offset: a.Offset})
				rec.RecordCommit(Commit{Group: "g", Topic: "t", Partition: int32(w), Offset: seq, Start: a.End})
			}
		})
	}
	// Checking while recording goes on sees a prefix (which may lack the
	// final reads of records already acknowledged).
	wg.Go(func() {
		for range 5 {
			if rep := rec.Check(); rep.Acknowledged > writers*perWriter || rep.Duplicated > 0 {
				t.Errorf("partial history: %+v", rep)
			}
		}
	})
	wg.Wait()
	rep := rec.Check()
	if !rep.OK() || rep.Acknowledged != writers*perWriter || rep.FinalRecords != writers*perWriter {
		t.Fatalf("report: %+v", rep)
	}
}

func TestZeroTimesAreNow(t *testing.T) {
	rec := NewRecorder()
	before := time.Since(rec.origin)
	rec.RecordAttempt(Attempt{Topic: "t", Key: "a", Seq: 1, Value: []byte("a/1"), Outcome: OK})
	rec.RecordRead(Read{Topic: "t", Key: []byte("a"), Value: []byte("a/1"), Reader: "final", Final: true})
	rec.RecordCommit(Commit{Group: "g", Topic: "t", Offset: 1})
	rec.RecordFault(Fault{Kind: "kill"})
	after := time.Since(rec.origin)
	h := rec.snapshot()
	for name, ns := range map[string]int64{
		"attempt start": h.attempts[0].start, "attempt end": h.attempts[0].end, "read": h.reads[0].at,
		"commit start": h.commits[0].start, "commit end": h.commits[0].end,
		"fault start": int64(h.faults[0].Start.Sub(rec.origin)),
	} {
		if ns < int64(before) || ns > int64(after) {
			t.Errorf("%s at %v, want within [%v, %v]", name, time.Duration(ns), before, after)
		}
	}
	if rep := rec.Check(); !rep.OK() || rep.MaxUnavailableMs > after.Milliseconds() {
		t.Fatalf("report: %+v", rep)
	}
}
