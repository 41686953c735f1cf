package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/vfs/faultfs"
)

// Disk faults injected into running bookies through vfs/faultfs's control
// file (docs/bookie.md, "Fault injection for tests"): what a writer and a
// reader of the ledger protocol see, and that nothing acknowledged is lost.

// faultyBookie is a bookie started with STRATA_DISK_FAULTS naming its own
// control file.
type faultyBookie struct {
	*proctest.BookieNode
	control string
}

// startFaultyBookie starts bookie id with a control file (healthy at
// first) and waits until it is registered.
func startFaultyBookie(t *testing.T, meta *proctest.MetadCluster, id string, extra ...string) *faultyBookie {
	t.Helper()
	b := &faultyBookie{
		BookieNode: &proctest.BookieNode{ID: id, Listen: proctest.FreeAddr(t), AdminAddr: proctest.FreeAddr(t),
			DataDir: filepath.Join(t.TempDir(), "bookie-"+id)},
		control: filepath.Join(t.TempDir(), id+".faults"),
	}
	b.Process = proctest.StartEnv(t, "bookie-"+id, bins["bookie"], []string{faultfs.EnvVar + "=" + b.control},
		b.Args(meta, extra...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// setFaults writes the control file (atomically) and waits until the
// bookie logs that the faults are in force, or exits (as a write fault
// makes it do).
func (b *faultyBookie) setFaults(t *testing.T, lines ...string) {
	t.Helper()
	content := strings.Join(lines, "\n")
	want, err := faultfs.Parse(content)
	if err != nil {
		t.Fatal(err)
	}
	changes := func() []string {
		out, _ := os.ReadFile(b.LogPath)
		var found []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "disk faults changed") {
				found = append(found, line)
			}
		}
		return found
	}
	before := len(changes())
	tmp := b.control + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, b.control); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 10*time.Second, fmt.Sprintf("bookie %s: faults %q in force", b.ID, want), func() error {
		found := changes()
		if len(found) > before && strings.Contains(found[len(found)-1], want.String()) {
			return nil
		}
		if !b.Running() {
			return errors.New("the bookie exited before logging the change")
		}
		return fmt.Errorf("changes logged: %q", found)
	})
}

// appendLoad appends to a ledger writer from one goroutine with up to
// window entries in flight, recording every acknowledged entry.
type appendLoad struct {
	w      *ledger.Writer
	window chan struct{}
	stop   chan struct{}
	done   chan struct{}
	halted sync.Once

	mu struct {
		sync.Mutex
		acked     map[int64][]byte
		latencies []time.Duration // append to acknowledgement, by entry id
		errs      []error
	}
}

func startAppendLoad(t *testing.T, w *ledger.Writer, window, size int) *appendLoad {
	t.Helper()
	l := &appendLoad{w: w, window: make(chan struct{}, window), stop: make(chan struct{}), done: make(chan struct{})}
	l.mu.acked = map[int64][]byte{}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case l.window <- struct{}{}:
			case <-l.stop:
				return
			}
			payload := bytes.Repeat([]byte{byte(i)}, size)
			copy(payload, fmt.Sprintf("entry %d;", i))
			start := time.Now()
			err := w.Append(context.Background(), payload, func(id int64, err error) {
				took := time.Since(start)
				l.mu.Lock()
				if err != nil {
					l.mu.errs = append(l.mu.errs, fmt.Errorf("entry %d: %w", id, err))
				} else {
					l.mu.acked[id] = payload
					l.mu.latencies = append(l.mu.latencies, took)
				}
				l.mu.Unlock()
				<-l.window
			})
			if err != nil {
				l.mu.Lock()
				l.mu.errs = append(l.mu.errs, fmt.Errorf("append %d: %w", i, err))
				l.mu.Unlock()
				<-l.window
				return
			}
		}
	}()
	t.Cleanup(func() { l.halt() })
	return l
}

func (l *appendLoad) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.acked)
}

// waitMore waits until n more entries than now are acknowledged, failing at
// once on an append error.
func (l *appendLoad) waitMore(t *testing.T, n int, what string) {
	t.Helper()
	target := l.acked() + n
	var failed error
	testwait.UntilNil(t, 60*time.Second, what, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.mu.errs) > 0 {
			failed = errors.Join(l.mu.errs...)
			return nil
		}
		if len(l.mu.acked) < target {
			return fmt.Errorf("%d of %d acknowledged", len(l.mu.acked), target)
		}
		return nil
	})
	if failed != nil {
		t.Fatalf("%s: the writer failed: %v", what, failed)
	}
}

// halt stops appending and waits (once, at most 30s) for the entries in
// flight to be answered.
func (l *appendLoad) halt() {
	l.halted.Do(func() {
		close(l.stop)
		<-l.done
		deadline := time.After(30 * time.Second)
		for range cap(l.window) {
			select {
			case l.window <- struct{}{}:
			case <-deadline:
				return
			}
		}
	})
}

// finish stops the load, checks that no append failed, and returns what was
// acknowledged and each entry's latency.
func (l *appendLoad) finish(t *testing.T) (map[int64][]byte, []time.Duration) {
	t.Helper()
	l.halt()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.mu.errs) > 0 {
		t.Fatalf("the writer failed: %v", errors.Join(l.mu.errs...))
	}
	return l.mu.acked, l.mu.latencies
}

// checkLedgerHolds reads the closed ledger back through the ledger reader
// and compares every acknowledged entry.
func checkLedgerHolds(t *testing.T, env ledger.Env, id uint64, acked map[int64][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := ledger.OpenReader(ctx, env, id)
	if err != nil {
		t.Fatal(err)
	}
	last := r.Metadata().LastEntryId
	if want := int64(len(acked)) - 1; last < want {
		t.Fatalf("ledger %d closed at entry %d; %d entries were acknowledged", id, last, len(acked))
	}
	n := 0
	if err := r.ReadRange(ctx, 0, last, func(e ledger.Entry) error {
		if want, ok := acked[e.ID]; ok {
			if !bytes.Equal(e.Payload, want) {
				return fmt.Errorf("entry %d: read %d bytes that differ from the acknowledged ones", e.ID, len(e.Payload))
			}
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != len(acked) {
		t.Fatalf("read back %d of %d acknowledged entries", n, len(acked))
	}
}

// byAddress finds the bookie listening at addr.
func byAddress(t *testing.T, nodes []*faultyBookie, addr string) *faultyBookie {
	t.Helper()
	for _, n := range nodes {
		if n.Listen == addr {
			return n
		}
	}
	t.Fatalf("no bookie at %s", addr)
	return nil
}

// lastEnsemble is the writer's current ensemble (its last fragment).
func lastEnsemble(w *ledger.Writer) []string {
	md := w.Metadata()
	return md.Fragments[len(md.Fragments)-1].Bookies
}

// TestBookieWriteFaultsStopIt: a bookie whose disk fails a journal write
// (write-eio) or fdatasync (sync-eio) acknowledges nothing more and exits
// (code 70, "fatal storage error"), without retrying the sync; a writer
// appending to it at the time replaces it by an ensemble change and goes
// on, and every acknowledged entry reads back. Restarted on a healthy
// disk, the bookie replays its journal and serves again.
func TestBookieWriteFaultsStopIt(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	var nodes []*faultyBookie
	for i := 1; i <= 5; i++ {
		nodes = append(nodes, startFaultyBookie(t, meta, fmt.Sprintf("b%d", i)))
	}
	env, _ := realLedgerEnv(t, meta)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := ledger.Create(ctx, env, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	load := startAppendLoad(t, w, 32, 1024)
	load.waitMore(t, 300, "entries before any fault")

	var victims []*faultyBookie
	for _, fault := range []string{"write-eio", "sync-eio"} {
		var victim *faultyBookie
		for _, addr := range lastEnsemble(w) {
			if b := byAddress(t, nodes, addr); !slices.Contains(victims, b) {
				victim = b
				break
			}
		}
		victims = append(victims, victim)
		changesBefore := w.Stats().EnsembleChanges
		victim.setFaults(t, fault)
		testwait.Until(t, 30*time.Second, fmt.Sprintf("bookie %s exits under %s", victim.ID, fault), func() bool {
			return !victim.Running()
		})
		logged(t, victim.ID+" reports the fatal error", []string{victim.LogPath}, "fatal storage error: stopping")
		if code := victim.ExitCode(); code != 70 {
			t.Fatalf("bookie %s exited with code %d under %s, want 70", victim.ID, code, fault)
		}
		load.waitMore(t, 300, "entries after "+fault)
		testwait.UntilNil(t, 30*time.Second, "an ensemble change replaced "+victim.ID, func() error {
			if ens := lastEnsemble(w); slices.Contains(ens, victim.Listen) || w.Stats().EnsembleChanges <= changesBefore {
				return fmt.Errorf("ensemble %v, %d changes", ens, w.Stats().EnsembleChanges)
			}
			return nil
		})
		t.Logf("%s: bookie %s exited; ensemble now %v", fault, victim.ID, lastEnsemble(w))
	}
	acked, _ := load.finish(t)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries acknowledged, ledger closed at %d, %d ensemble changes", len(acked), w.Metadata().LastEntryId, w.Stats().EnsembleChanges)
	checkLedgerHolds(t, env, w.ID(), acked)

	// Healthy again: the bookies replay their journals and serve what
	// they held (the first fragment's entries are on them).
	for _, v := range victims {
		v.setFaultsFile(t, "")
		v.Restart(t)
		if err := v.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		c := dialBookie(t, v.Listen)
		if _, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: w.ID(), EntryId: 0}); err != nil {
			t.Fatalf("bookie %s after a restart: entry 0: %v", v.ID, err)
		}
	}
}

// setFaultsFile writes the control file without waiting for a running
// bookie to pick it up (before a restart).
func (b *faultyBookie) setFaultsFile(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(b.control, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBookieReadEIO: a bookie whose disk fails reads answers each read
// with UNAVAILABLE / DISK_ERROR (retryable: try another copy), counts it
// in strata_bookie_read_errors_total and logs it; the ledger reader reads
// every entry from the other copies; once the disk reads again, so does
// the bookie.
func TestBookieReadEIO(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	var nodes []*faultyBookie
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, startFaultyBookie(t, meta, fmt.Sprintf("b%d", i)))
	}
	env, _ := realLedgerEnv(t, meta)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := ledger.Create(ctx, env, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	load := startAppendLoad(t, w, 16, 4096)
	load.waitMore(t, 300, "entries written")
	acked, _ := load.finish(t)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	sick := nodes[0]
	sick.setFaults(t, "read-eio")
	c := dialBookie(t, sick.Listen)
	_, err = c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: w.ID(), EntryId: 0})
	if status.Code(err) != codes.Unavailable || rpcerror.Reason(err) != rpcerror.ReasonDiskError || !rpcerror.Retryable(err) {
		t.Fatalf("read from a bookie whose disk fails reads: %v, want UNAVAILABLE DISK_ERROR retryable", err)
	}
	checkLedgerHolds(t, env, w.ID(), acked) // streams, falling back to single reads
	r, err := ledger.OpenReader(ctx, env, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := r.Read(ctx, 0, int64(len(acked))-1) // single reads, a third of them asking the sick bookie first
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !bytes.Equal(e.Payload, acked[e.ID]) {
			t.Fatalf("entry %d differs", e.ID)
		}
	}
	failed, err := metricValue("http://"+sick.AdminAddr+"/metrics", "strata_bookie_read_errors_total")
	if err != nil || failed < 2 {
		t.Fatalf("strata_bookie_read_errors_total = %v, %v; want the failed reads counted", failed, err)
	}
	logged(t, "the failed reads logged", []string{sick.LogPath}, "reading an entry failed: disk I/O error")
	t.Logf("reads the disk failed on %s: %v; every entry read from the other copies", sick.ID, failed)

	sick.setFaults(t, "")
	if _, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: w.ID(), EntryId: 0}); err != nil {
		t.Fatalf("read once the disk reads again: %v", err)
	}
}

// TestBookieSyncStall: one bookie's fdatasync stalls for seconds. Its adds
// wait; the writer acknowledges from the other two (Qa = 2), so appends go
// on at about their usual latency, and nothing is lost. After the add
// timeout (5s) the writer counts the stalled bookie failed and, with no
// spare among three bookies, writes on to two copies (counted
// under-replicated) and takes it back every second. The test logs the
// latencies before and during the stall.
func TestBookieSyncStall(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	var nodes []*faultyBookie
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, startFaultyBookie(t, meta, fmt.Sprintf("b%d", i)))
	}
	env, _ := realLedgerEnv(t, meta)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := ledger.Create(ctx, env, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	load := startAppendLoad(t, w, 32, 1024)
	load.waitMore(t, 500, "entries before the stall")
	before := load.acked()

	slow := nodes[0]
	slow.setFaults(t, "sync-stall 3s")
	load.waitMore(t, 1000, "entries during the stall")
	during := load.acked()
	// Keep the stall on until the slow bookie has been through three of
	// them (its journal logs each slow group), so that its queue builds
	// up as it would on a sick disk.
	testwait.Until(t, 60*time.Second, "three stalled syncs on "+slow.ID, func() bool {
		out, _ := os.ReadFile(slow.LogPath)
		return strings.Count(string(out), "slow journal group") >= 3
	})
	load.waitMore(t, 100, "entries late in the stall")
	slow.setFaults(t, "")
	load.waitMore(t, 300, "entries after the stall")
	acked, latencies := load.finish(t)
	stats := w.Stats()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkLedgerHolds(t, env, w.ID(), acked)
	t.Logf("append latency before the stall: %s", latencySummary(latencies[:before]))
	t.Logf("append latency in the stall's first %d entries: %s", during-before, latencySummary(latencies[before:during]))
	t.Logf("append latency over the whole run: %s; ensemble changes %d, under-replicated entries %d",
		latencySummary(latencies), stats.EnsembleChanges, stats.UnderReplicatedEntries)
	// No acknowledgement waited for the stalled bookie: each would have
	// taken the stall's 3 seconds at least.
	if worst := slices.Max(latencies[before:]); worst >= 3*time.Second {
		t.Fatalf("an append took %v during the stall: it waited for the stalled bookie", worst)
	}
}

// latencySummary is p50, p99 and max of ds.
func latencySummary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no entries"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return fmt.Sprintf("%d entries, p50 %v, p99 %v, max %v", len(s), at(0.5).Round(time.Microsecond),
		at(0.99).Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
}
