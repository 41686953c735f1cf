package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/strata-log/strata/internal/testtool"
	"github.com/strata-log/strata/internal/testwait"
)

// kcatMember is a `kcat -G` process: librdkafka's balanced consumer,
// auto-committing what it has printed.
type kcatMember struct {
	name        string
	cmd         *exec.Cmd
	out, errOut lockedBuffer
	done        chan struct{}
}

// startKcatMember starts kcat in group mode, printing "partition offset
// value" per record, unbuffered (a kill -9 loses nothing it printed), and
// logging the group protocol (-d cgrp) on stderr. Its session is 3 s, it
// heartbeats every second and auto-commits every 5 s (librdkafka's
// default: kcat's -X auto.commit.interval.ms sets the legacy topic
// property of that name, not the consumer's). The test's cleanup kills
// it.
func startKcatMember(t *testing.T, kcat string, addrs []string, group, topic, name string) *kcatMember {
	t.Helper()
	m := &kcatMember{name: name, done: make(chan struct{})}
	m.cmd = exec.Command(kcat, "-b", strings.Join(addrs, ","), "-G", group, "-d", "cgrp", "-u", "-f", "%p %o %s\n",
		"-X", "client.id="+name, "-X", "auto.offset.reset=earliest", "-X", "enable.partition.eof=false",
		"-X", "session.timeout.ms=3000", "-X", "heartbeat.interval.ms=1000", topic)
	m.cmd.Stdout, m.cmd.Stderr = &m.out, &m.errOut
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = m.cmd.Wait()
		close(m.done)
	}()
	t.Cleanup(func() {
		m.kill(t)
		if t.Failed() {
			t.Logf("---- %s stderr (last 4 KiB) ----\n%s", name, tail4k(m.errOut.String()))
		}
	})
	return m
}

func tail4k(s string) string { return s[max(len(s)-4096, 0):] }

// kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (m *kcatMember) kill(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	testwait.Recv(t, 10*time.Second, m.name+" to exit", m.done)
}

// printed returns, per partition, the offsets the process printed, in
// the order printed.
func (m *kcatMember) printed(t *testing.T) map[int32][]int64 {
	t.Helper()
	out := map[int32][]int64{}
	// Whole lines only: kcat may be writing the last one (or was killed
	// while writing it).
	text := m.out.String()
	text = text[:strings.LastIndexByte(text, '\n')+1]
	for _, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("%s printed %q", m.name, line)
		}
		p, perr := strconv.ParseInt(f[0], 10, 32)
		o, oerr := strconv.ParseInt(f[1], 10, 64)
		if perr != nil || oerr != nil {
			t.Fatalf("%s printed %q", m.name, line)
		}
		out[int32(p)] = append(out[int32(p)], o)
	}
	return out
}

// TestKafkaGroupsKcatTakeover: two `kcat -G` processes share a
// 4-partition topic while records keep coming; one is killed with kill -9.
// Once its session expires the survivor takes over its partitions from
// their committed offsets (read over Kafka until its session expired):
// every record produced is printed, the survivor starts each taken-over
// partition exactly at its commit (not at 0), and a record is printed
// twice only at or after the commit that stood when the kill happened.
func TestKafkaGroupsKcatTakeover(t *testing.T) {
	skipShort(t)
	kcat := testtool.Kcat(t)
	const group, topic = "kcat-group", "kcat-takeover"
	_, addrs, adm := startGroupCluster(t, 1, topic, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	a := startKcatMember(t, kcat, addrs, group, topic, "kcat-a")
	b := startKcatMember(t, kcat, addrs, group, topic, "kcat-b")
	owned := waitKafkaGroupStable(t, ctx, adm, group, topic, "two kcat members, two partitions each", func(owned map[string][]int32) bool {
		return len(owned) == 2 && len(owned["kcat-a"]) == 2 && len(owned["kcat-b"]) == 2
	})
	t.Logf("assignment %v", owned)
	// A steady stream of records until the survivor has taken over.
	stopStream := startGroupStream(t, ctx, newGroupProducer(t, addrs, topic, 4, "k"))

	killPastCommit(t, ctx, adm, a, group, topic, owned["kcat-a"])
	killed := time.Now()
	atKill, err := groupCommitted(ctx, adm, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	frozen := commitsUntilExpiry(t, ctx, adm, group, topic, "kcat-a")
	t.Logf("kcat-a killed; commits right after %v, once its session expired %v (%s later)", atKill, frozen, time.Since(killed).Round(time.Millisecond))

	waitKafkaGroupStable(t, ctx, adm, group, topic, "kcat-b to own all 4 partitions", func(owned map[string][]int32) bool {
		return len(owned) == 1 && len(owned["kcat-b"]) == 4
	})
	testwait.UntilNil(t, 30*time.Second, "kcat-b to read on the partitions it took over", func() error {
		for _, part := range owned["kcat-a"] {
			if len(b.printed(t)[part]) == 0 {
				return fmt.Errorf("kcat-b printed nothing of partition %d yet", part)
			}
		}
		return nil
	})
	stopStream()
	ends, err := groupEnds(ctx, adm, topic)
	if err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 30*time.Second, "every record printed", func() error {
		printed := b.printed(t)
		for part, end := range ends {
			if last := lastOf(printed[part]); last != end-1 {
				return fmt.Errorf("partition %d: kcat-b printed up to %d, end %d", part, last, end)
			}
		}
		return nil
	})
	checkKcatTakeover(t, a.printed(t), b.printed(t), ends, owned["kcat-a"], atKill, frozen)
}

// killPastCommit kills m once the group has commits on each of parts and
// m has printed 50 records past them: those are read again after the
// kill.
func killPastCommit(t *testing.T, ctx context.Context, adm *kadm.Client, m *kcatMember, group, topic string, parts []int32) {
	t.Helper()
	var committed map[int32]int64
	testwait.UntilNil(t, 30*time.Second, m.name+" to commit on its partitions", func() error {
		var err error
		if committed, err = groupCommitted(ctx, adm, group, topic); err != nil {
			return err
		}
		for _, part := range parts {
			if committed[part] == 0 {
				return fmt.Errorf("committed %v", committed)
			}
		}
		return nil
	})
	testwait.UntilNil(t, 30*time.Second, m.name+" to read 50 records past its commit", func() error {
		printed := m.printed(t)
		for _, part := range parts {
			if last := lastOf(printed[part]); last < committed[part]+50 {
				return fmt.Errorf("partition %d: printed up to %d, committed %d", part, last, committed[part])
			}
		}
		return nil
	})
	m.kill(t)
}

// commitsUntilExpiry reads a group's commits of topic again and again
// while dead (killed) is still a member, and returns the last read: a
// read between two descriptions that both list dead, so the survivor had
// not been given dead's partitions and cannot have committed them. Its
// session lasts seconds after the kill, so the dead member's last commits
// have long been applied by then.
func commitsUntilExpiry(t *testing.T, ctx context.Context, adm *kadm.Client, group, topic, dead string) map[int32]int64 {
	t.Helper()
	var last map[int32]int64
	isMember := func() (bool, error) {
		d, err := describeKafkaGroup(ctx, adm, group)
		if err != nil {
			return false, err
		}
		_, ok := memberPartitions(d, topic)[dead]
		return ok, nil
	}
	testwait.UntilNil(t, 30*time.Second, dead+"'s session to expire", func() error {
		if ok, err := isMember(); err != nil || !ok {
			return err // nil once dead is gone
		}
		commits, err := groupCommitted(ctx, adm, group, topic)
		if err != nil {
			return err
		}
		if ok, err := isMember(); err == nil && ok {
			last = commits
		}
		return fmt.Errorf("%s still a member", dead)
	})
	if last == nil {
		t.Fatalf("no read of the commits while %s was still a member", dead)
	}
	return last
}

func lastOf(offsets []int64) int64 {
	if len(offsets) == 0 {
		return -1
	}
	return offsets[len(offsets)-1]
}

// checkKcatTakeover checks what the two kcat processes printed: a was
// killed owning deadParts; frozen are the commits the survivor b resumed
// from, atKill those read right after the kill.
func checkKcatTakeover(t *testing.T, a, b map[int32][]int64, ends map[int32]int64, deadParts []int32, atKill, frozen map[int32]int64) {
	t.Helper()
	reread := 0
	for part, end := range ends {
		seen := map[int64]int{}
		for _, o := range a[part] {
			seen[o]++
		}
		for _, o := range b[part] {
			seen[o]++
		}
		for o := range end {
			if seen[o] == 0 {
				t.Errorf("partition %d: offset %d never printed (end %d)", part, o, end)
			}
		}
		// A record is read again only after the commit in force when the
		// kill happened: the survivor resumes from commits, never earlier.
		floor := atKill[part]
		if slices.Contains(deadParts, part) {
			floor = frozen[part]
		}
		for o, n := range seen {
			if n > 1 && o < floor {
				t.Errorf("partition %d: offset %d printed %d times, below the commit %d", part, o, n, floor)
			}
			if n > 1 {
				reread++
			}
		}
		if !slices.Contains(deadParts, part) {
			continue
		}
		if frozen[part] <= 0 {
			t.Errorf("partition %d: commit %d when the survivor took over, want > 0", part, frozen[part])
		}
		if len(b[part]) == 0 || b[part][0] != frozen[part] {
			t.Errorf("partition %d: the survivor started at %d, want the commit %d", part, lastOf(b[part][:min(1, len(b[part]))]), frozen[part])
		}
		if last := lastOf(a[part]); last+1 < frozen[part] {
			t.Errorf("partition %d: the killed member printed up to %d but the commit is %d", part, last, frozen[part])
		}
		survivor := map[int64]bool{}
		for _, o := range b[part] {
			survivor[o] = true
		}
		for _, o := range a[part] {
			if o >= frozen[part] && !survivor[o] {
				t.Errorf("partition %d: offset %d, read by the killed member after its last commit %d, not read by the survivor", part, o, frozen[part])
			}
		}
	}
	t.Logf("%d records printed twice (at least once: read by the killed member after its last commit)", reread)
}

// confluentGroupRun is what testdata/kafka_groups_confluent.py prints.
type confluentGroupRun struct {
	Read []struct {
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Value     string `json:"value"`
	} `json:"read"`
	Committed []struct {
		Partition int32 `json:"partition"`
		Offset    int64 `json:"offset"`
	} `json:"committed"`
}

// runConfluentGroupConsumer runs the script: a group member with manual
// commits that reads count records, commits them synchronously (when
// commit) and closes.
func runConfluentGroupConsumer(t *testing.T, python string, addrs []string, group, topic string, count int, commit bool) (read map[int32][]int64, committed map[int32]int64) {
	t.Helper()
	mode := "none"
	if commit {
		mode = "commit"
	}
	cmd := exec.Command(python, filepath.Join("testdata", "kafka_groups_confluent.py"), strings.Join(addrs, ","), group, topic, strconv.Itoa(count), mode)
	var errOut lockedBuffer
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kafka_groups_confluent.py: %v\nstdout: %s\nstderr: %s", err, out, errOut.String())
	}
	var run confluentGroupRun
	if err := json.Unmarshal(out, &run); err != nil {
		t.Fatalf("kafka_groups_confluent.py printed %q: %v", out, err)
	}
	read, committed = map[int32][]int64{}, map[int32]int64{}
	for _, r := range run.Read {
		read[r.Partition] = append(read[r.Partition], r.Offset)
	}
	for _, c := range run.Committed {
		committed[c.Partition] = c.Offset
	}
	return read, committed
}

// TestKafkaGroupsConfluentManualCommit: a confluent-kafka-python consumer
// with enable.auto.commit=false reads part of a 3-partition topic,
// commits with commit(asynchronous=False) and closes; the broker holds
// exactly those commits, and the next consumer of the group resumes at
// them: together the two read every record exactly once.
func TestKafkaGroupsConfluentManualCommit(t *testing.T) {
	skipShort(t)
	python := testtool.ConfluentKafkaPython(t)
	const group, topic, total, first = "py-group", "py-manual", 120, 50
	_, addrs, adm := startGroupCluster(t, 1, topic, 3)
	newGroupProducer(t, addrs, topic, 3, "py").mustProduce(t, total)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	read1, reported := runConfluentGroupConsumer(t, python, addrs, group, topic, first, true)
	committed, err := groupCommitted(ctx, adm, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	for part, offs := range read1 {
		for i, o := range offs {
			if o != int64(i) {
				t.Fatalf("first consumer, partition %d: offsets %v, want 0, 1, ...", part, offs)
			}
		}
		if want := int64(len(offs)); committed[part] != want || reported[part] != want {
			t.Errorf("partition %d: read %d records, the broker holds commit %d, commit() reported %d", part, want, committed[part], reported[part])
		}
	}
	if len(committed) != len(read1) {
		t.Errorf("commits %v for partitions read %v", committed, read1)
	}
	t.Logf("first consumer read %d records, committed %v", first, committed)

	read2, _ := runConfluentGroupConsumer(t, python, addrs, group, topic, total-first, false)
	for part := range int32(3) {
		all := append(slices.Clone(read1[part]), read2[part]...)
		for i, o := range all {
			if o != int64(i) {
				t.Fatalf("partition %d: first consumer read %v, second %v; want each offset once, the second from the commit %d",
					part, read1[part], read2[part], committed[part])
			}
		}
		if len(all) != total/3 {
			t.Errorf("partition %d: %d records read in all, want %d", part, len(all), total/3)
		}
	}
}
