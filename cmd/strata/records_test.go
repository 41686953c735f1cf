package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-log/strata/cmd/strata/internal/bench"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/recordbatch"
)

// strataRun runs the strata command line in-process against broker.
func strataRun(t *testing.T, broker, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(args, "--broker", broker))
	_, err := root.ExecuteC()
	if msg := cli.Message(err); msg != "" {
		errOut.WriteString("strata: " + msg + "\n")
	}
	return out.String(), errOut.String(), cli.ExitCode(err)
}

// TestProduceConsume runs the quick start's record commands against a
// fake broker: keyed records land on their key's partition, consume -e
// prints them with a format and exits, JSON output and tombstones.
func TestProduceConsume(t *testing.T) {
	fb := startTestBroker(t)
	must := func(stdin string, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := strataRun(t, fb.addr, stdin, args...)
		if code != 0 {
			t.Fatalf("strata %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out, errOut
	}
	if out, _ := must("", "topic", "create", "orders", "-p", "3", "-c", "cleanup.policy=compact"); out != "created topic orders with 3 partitions\n" {
		t.Fatalf("create: %q", out)
	}
	_, errOut := must("k1:hello\nk2:world\nk1:again", "produce", "orders", "-K:", "-H", "src=test")
	if errOut != "produced 3 records to orders (acks=quorum)\n" {
		t.Fatalf("produce: %q", errOut)
	}
	out, _ := must("", "consume", "orders", "-e", "-f", `%k=%v (p%p@%o) %h\n`)
	p1, p2 := recordbatch.PartitionForKey([]byte("k1"), 3), recordbatch.PartitionForKey([]byte("k2"), 3)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var k1 []string
	for _, l := range lines {
		if strings.HasPrefix(l, "k1=") {
			k1 = append(k1, l)
		}
	}
	if len(lines) != 3 || !strings.Contains(out, "k2=world (p"+itoa(p2)+"@0) src=test\n") ||
		len(k1) != 2 || k1[0] != "k1=hello (p"+itoa(p1)+"@0) src=test" || k1[1] != "k1=again (p"+itoa(p1)+"@1) src=test" {
		t.Fatalf("consume:\n%s", out)
	}

	// A tombstone with -Z, read back as JSON from the end of its partition.
	must("k1:\n", "produce", "orders", "-K:", "-Z", "--acks", "all", "--compression", "zstd")
	out, _ = must("", "consume", "orders", "-p", itoa(p1), "-o", "-1", "-e", "--output", "json")
	var rec cli.JSONRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if rec.Key == nil || *rec.Key != "k1" || rec.Value != nil || rec.Offset != 2 || rec.Partition != p1 {
		t.Fatalf("tombstone read back as %s", out)
	}
	// -n stops after COUNT records; -o latest -e exits at once.
	if out, _ = must("", "consume", "orders", "-n", "2", "-f", `%v,`); strings.Count(out, ",") != 2 {
		t.Fatalf("-n 2: %q", out)
	}
	if out, _ = must("", "consume", "orders", "-o", "latest", "-e"); out != "" {
		t.Fatalf("-o latest -e: %q", out)
	}
	out, _ = must("", "topic", "describe", "orders")
	t.Logf("describe:\n%s", out)
	if !regexp.MustCompile(`cleanup\.policy +compact +topic`).MatchString(out) ||
		!regexp.MustCompile(`\sretention\.ms +604800000 +default`).MatchString(out) ||
		!strings.Contains(out, "  "+itoa(p1)+"          k1 ("+fb.addr+")  1      0      3    3") ||
		!strings.Contains(out, "OFFSETS is END - START, not a record count") {
		t.Fatalf("describe:\n%s", out)
	}
	if out, _ = must("", "topic", "list", "--output", "json"); out != `[{"name":"orders","partitions":3}]`+"\n" {
		t.Fatalf("list: %q", out)
	}
	if _, errOut, code := strataRun(t, fb.addr, "", "consume", "orders", "-p", "3"); code != 2 || !strings.Contains(errOut, "partitions 0 to 2") {
		t.Fatalf("-p 3: %d %q", code, errOut)
	}
}

// TestBenchFake runs each benchmark briefly against the fake broker.
func TestBenchFake(t *testing.T) {
	fb := startTestBroker(t)
	for _, mode := range []string{"produce", "e2e", "consume"} {
		out, errOut, code := strataRun(t, fb.addr, "", "bench", mode, "--duration", "1500ms", "--rate", "400",
			"--partitions", "4", "--record-size", "100", "--output", "json")
		if code != 0 {
			t.Fatalf("bench %s: exit %d\n%s%s", mode, code, out, errOut)
		}
		var s bench.Summary
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("bench %s: %v: %q", mode, err, out)
		}
		t.Logf("bench %s: %s", mode, out)
		if s.Records < 400 || s.Errors != 0 || s.Partitions != 4 {
			t.Fatalf("bench %s: %+v\n%s", mode, s, errOut)
		}
		if mode != "consume" && (len(s.Latency) == 0 || s.Latency[0].Count != uint64(s.Records) || s.Latency[0].P99 <= 0) {
			t.Fatalf("bench %s latency: %+v", mode, s.Latency)
		}
		if mode == "e2e" && (len(s.Latency) != 3 || s.Latency[2].Count != uint64(s.Records)) {
			t.Fatalf("bench e2e latency: %+v", s.Latency)
		}
		if !strings.Contains(errOut, "records/s") && mode != "consume" {
			t.Fatalf("bench %s: no progress lines on stderr: %q", mode, errOut)
		}
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
