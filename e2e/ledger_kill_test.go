package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgergrpc"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// The ledger protocol against real processes: a bookie killed with -9
// under `strata ledger simpletest` (with and without a spare bookie), a
// writer that dies without closing its ledger, and a writer that goes on
// appending while another client recovers its ledger.

// killSimpletestEntries makes the simpletest's write phase last a few
// seconds on a 2-vCPU machine, so the kill lands in the middle of it.
const killSimpletestEntries = 60_000

// startLedgerBookies starts n bookies b1..bn registered with meta.
func startLedgerBookies(t *testing.T, meta *proctest.MetadCluster, n int) []*proctest.BookieNode {
	t.Helper()
	var nodes []*proctest.BookieNode
	for i := 1; i <= n; i++ {
		nodes = append(nodes, proctest.StartBookie(t, bins["bookie"], meta, fmt.Sprintf("b%d", i)))
	}
	return nodes
}

// realLedgerEnv is a ledger.Env over the real clients: metad for metadata
// and the bookie registry, gRPC to the bookies. closeEnv closes both
// clients (the test's cleanup does it too; it may be called twice).
func realLedgerEnv(t *testing.T, meta *proctest.MetadCluster) (env ledger.Env, closeEnv func()) {
	t.Helper()
	cl, err := metaclient.New(metaclient.Config{Endpoints: meta.Endpoints(), RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bookies := ledgergrpc.New(ledgergrpc.Options{})
	closeEnv = func() {
		bookies.Close()
		cl.Close()
	}
	t.Cleanup(closeEnv)
	return ledger.Env{Meta: ledgermetad.NewStore(cl), Bookies: bookies, Registry: ledgermetad.NewRegistry(cl)}, closeEnv
}

// simpletestRun is `strata ledger simpletest` running as a child process.
type simpletestRun struct {
	cmd     *exec.Cmd
	started time.Time
	stdout  bytes.Buffer
	// writing receives the first progress line of the write phase that
	// is not the last one: entries are flowing and more are to come.
	writing chan string
	// stderr is complete once stderrDone is closed.
	stderr     strings.Builder
	stderrDone chan struct{}
}

var writeProgress = regexp.MustCompile(`^write: (\d+)/(\d+) entries`)

// startSimpletest starts `strata ledger simpletest args...` against meta.
func startSimpletest(t *testing.T, meta *proctest.MetadCluster, args ...string) *simpletestRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel) // kills the child if the test ends first
	r := &simpletestRun{writing: make(chan string, 1), stderrDone: make(chan struct{})}
	r.cmd = exec.CommandContext(ctx, bins["strata"], append([]string{"ledger", "simpletest"}, args...)...)
	r.cmd.Env = append(r.cmd.Environ(), "STRATA_METAD="+strings.Join(meta.Endpoints(), ","))
	r.cmd.Stdout = &r.stdout
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.started = time.Now()
	go func() {
		defer close(r.stderrDone)
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			r.stderr.WriteString(line + "\n")
			if m := writeProgress.FindStringSubmatch(line); m != nil && !signalled && m[1] != m[2] {
				signalled = true
				r.writing <- line
			}
		}
	}()
	return r
}

// waitWriting waits until the write phase reports progress (about a second
// into it) and returns the progress line.
func (r *simpletestRun) waitWriting(t *testing.T) string {
	t.Helper()
	select {
	case line := <-r.writing:
		return line
	case <-r.stderrDone:
		out, errOut, code := r.wait(t)
		t.Fatalf("simpletest ended (exit %d) before its write phase reported progress; raise the entries\nstdout:\n%s\nstderr:\n%s",
			code, out, errOut)
	case <-time.After(30 * time.Second):
		t.Fatal("simpletest: no write progress within 30s")
	}
	return ""
}

// wait waits for the child to exit and returns stdout, stderr, exit code.
func (r *simpletestRun) wait(t *testing.T) (string, string, int) {
	t.Helper()
	<-r.stderrDone // Wait must not run before the pipe is drained
	err := r.cmd.Wait()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("simpletest: %v", err)
	}
	return r.stdout.String(), r.stderr.String(), code
}

// bookieAt returns the node listening at addr.
func bookieAt(t *testing.T, nodes []*proctest.BookieNode, addr string) *proctest.BookieNode {
	t.Helper()
	for _, n := range nodes {
		if n.Listen == addr {
			return n
		}
	}
	t.Fatalf("no bookie listens at %s", addr)
	return nil
}

// TestLedgerSimpletestThroughBookieKill3: with three bookies and E=3 every
// bookie is in the ensemble and none is spare. kill -9 of one of them in
// the middle of the write phase must not fail the simpletest: the writer
// goes on with two copies (Qa=2), and the reader fails over to them.
func TestLedgerSimpletestThroughBookieKill3(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	nodes := startLedgerBookies(t, meta, 3)

	n := strconv.Itoa(killSimpletestEntries)
	run := startSimpletest(t, meta, "--entries", n, "--entry-size", "1024")
	progress := run.waitWriting(t)
	victim := nodes[1]
	victim.Kill()
	t.Logf("killed bookie %s (%s) %v after the start, at %q", victim.ID, victim.Listen,
		time.Since(run.started).Round(time.Millisecond), progress)

	out, errOut, code := run.wait(t)
	t.Logf("simpletest took %v:\n%s", time.Since(run.started).Round(time.Millisecond), out)
	if code != 0 || !strings.Contains(out, n+" of "+n+" entries verified") || !strings.HasSuffix(out, "OK\n") {
		t.Fatalf("simpletest through a kill -9: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "write: "+n+"/"+n) {
		t.Fatalf("the write phase did not report completion:\n%s", errOut)
	}
}

// TestLedgerSimpletestThroughBookieKill4: with a fourth bookie spare, the
// writer replaces the killed member: the kept ledger's metadata has a
// second fragment, on the spare instead of the killed bookie, and every
// entry is verified.
func TestLedgerSimpletestThroughBookieKill4(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	nodes := startLedgerBookies(t, meta, 4)
	store := ledgermetad.NewStore(newMetaClient(t, meta))

	run := startSimpletest(t, meta, "--entries", strconv.Itoa(killSimpletestEntries), "--entry-size", "1024",
		"--keep", "--output", "json")
	progress := run.waitWriting(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mds, err := ledger.ListAll(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if len(mds) != 1 || mds[0].GetState() != ledgerpb.LedgerState_OPEN {
		t.Fatalf("want the simpletest's one OPEN ledger, have %v", mds)
	}
	ensemble := mds[0].GetFragments()[0].GetBookies()
	victim := bookieAt(t, nodes, ensemble[1])
	var spare *proctest.BookieNode
	for _, node := range nodes {
		if !slices.Contains(ensemble, node.Listen) {
			spare = node
		}
	}
	victim.Kill()
	t.Logf("ledger %d on %v: killed bookie %s (%s) %v after the start, at %q", mds[0].GetId(), ensemble, victim.ID,
		victim.Listen, time.Since(run.started).Round(time.Millisecond), progress)

	out, errOut, code := run.wait(t)
	t.Logf("simpletest took %v:\n%s", time.Since(run.started).Round(time.Millisecond), out)
	var res struct {
		LedgerID uint64  `json:"ledger_id"`
		Verified int     `json:"verified"`
		OK       bool    `json:"ok"`
		Closed   bool    `json:"closed"`
		WriteMBs float64 `json:"write_mb_per_second"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || !res.OK || !res.Closed ||
		res.Verified != killSimpletestEntries || res.LedgerID != mds[0].GetId() {
		t.Fatalf("simpletest through a kill -9: exit %d, %+v, %v\nstdout:\n%s\nstderr:\n%s", code, res, err, out, errOut)
	}

	descOut, descErr, code := strata(t, []string{"STRATA_METAD=" + strings.Join(meta.Endpoints(), ",")},
		"ledger", "describe", strconv.FormatUint(res.LedgerID, 10), "--output", "json")
	var desc struct {
		State       string `json:"state"`
		LastEntryID int64  `json:"last_entry_id"`
		Fragments   []struct {
			FirstEntryID int64    `json:"first_entry_id"`
			LastEntryID  int64    `json:"last_entry_id"`
			Bookies      []string `json:"bookies"`
		} `json:"fragments"`
	}
	if err := json.Unmarshal([]byte(descOut), &desc); err != nil || code != 0 {
		t.Fatalf("describe: exit %d, %v\n%s%s", code, err, descOut, descErr)
	}
	t.Logf("describe:\n%s", descOut)
	if desc.State != "CLOSED" || desc.LastEntryID != killSimpletestEntries-1 || len(desc.Fragments) != 2 {
		t.Fatalf("want CLOSED at entry %d with two fragments, have %+v", killSimpletestEntries-1, desc)
	}
	first, second := desc.Fragments[0], desc.Fragments[1]
	want := slices.Clone(ensemble)
	want[1] = spare.Listen
	if !slices.Equal(first.Bookies, ensemble) || !slices.Equal(second.Bookies, want) ||
		second.FirstEntryID <= 0 || second.FirstEntryID != first.LastEntryID+1 || second.FirstEntryID >= killSimpletestEntries {
		t.Fatalf("fragments %+v: want %v, then from an entry in the middle %v (spare %s replacing %s)",
			desc.Fragments, ensemble, want, spare.Listen, victim.Listen)
	}
	// The spare really took the new fragment's entries over.
	c := dialBookie(t, spare.Listen)
	for _, e := range []int64{second.FirstEntryID, killSimpletestEntries - 1} {
		resp, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: res.LedgerID, EntryId: uint64(e)})
		if err != nil || resp.GetStatus() != bookiepb.ReadStatus_READ_OK || len(resp.GetPayload()) != 1024+ledger.DigestSize {
			t.Fatalf("entry %d on the spare bookie %s: %v, %v", e, spare.Listen, resp.GetStatus(), err)
		}
	}
}

// zombiePayload is entry id's payload in the writer-death tests: its id,
// then pseudo-random bytes, 16..4111 bytes long, so lengths add up to a
// number that catches an entry counted twice or missed.
func zombiePayload(id int64) []byte {
	rng := rand.New(rand.NewPCG(uint64(id), 0x5eed))
	p := make([]byte, 16+rng.IntN(4096))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	binary.BigEndian.PutUint64(p, uint64(id))
	return p
}

// ackLog records what a writer acknowledged and how it failed.
type ackLog struct {
	mu       sync.Mutex
	acked    int     // entries acknowledged (dense: 0..acked-1)
	outOfSeq []int64 // acknowledgements out of order: a bug
	err      error   // first error from an append or a callback
}

func (a *ackLog) callback(id int64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err != nil:
		if a.err == nil {
			a.err = err
		}
	case id != int64(a.acked):
		a.outOfSeq = append(a.outOfSeq, id)
	default:
		a.acked++
	}
}

func (a *ackLog) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
	}
}

func (a *ackLog) state() (acked int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked, a.err
}

func (a *ackLog) outOfOrder() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.outOfSeq)
}

// checkClosedLedger checks that md is CLOSED with entries 0..last exactly
// those appended (zombiePayload), its length their sum, and that a reader
// serves exactly them.
func checkClosedLedger(ctx context.Context, t *testing.T, env ledger.Env, md *ledgerpb.LedgerMetadata) {
	t.Helper()
	last := md.GetLastEntryId()
	var length int64
	for id := range last + 1 {
		length += int64(len(zombiePayload(id)))
	}
	if md.GetState() != ledgerpb.LedgerState_CLOSED || md.GetLength() != length {
		t.Fatalf("recovered metadata %v: want CLOSED with length %d", md, length)
	}
	r, err := ledger.OpenReader(ctx, env, md.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if lac, err := r.LastAddConfirmed(ctx); err != nil || lac != last {
		t.Fatalf("reader: last add confirmed %d, %v; want %d", lac, err, last)
	}
	next := int64(0)
	err = r.ReadRange(ctx, 0, last, func(e ledger.Entry) error {
		if e.ID != next {
			return fmt.Errorf("read entry %d, want %d", e.ID, next)
		}
		if !bytes.Equal(e.Payload, zombiePayload(e.ID)) {
			return fmt.Errorf("entry %d: %d bytes read differ from the %d appended", e.ID, len(e.Payload), len(zombiePayload(e.ID)))
		}
		next++
		return nil
	})
	if err != nil || next != last+1 {
		t.Fatalf("reading 0..%d: %d entries, %v", last, next, err)
	}
	if _, err := r.ReadEntry(ctx, last+1); !errors.Is(err, ledger.ErrBeyondLAC) {
		t.Fatalf("reading entry %d past the end: %v, want ErrBeyondLAC", last+1, err)
	}
}

// TestLedgerRecoveryAfterWriterDeath: a writer dies (its connections
// close) with entries in flight and without closing its ledger. Recovery
// from another client closes the ledger with every acknowledged entry in
// it, byte for byte, and a second recovery returns the same metadata.
func TestLedgerRecoveryAfterWriterDeath(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	startLedgerBookies(t, meta, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	writerEnv, killWriter := realLedgerEnv(t, meta)
	w, err := ledger.Create(ctx, writerEnv, ledger.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Stop the dead writer's background retries; its ledger is
		// recovered, so Close can only fail.
		done, stop := context.WithCancel(context.Background())
		stop()
		_ = w.Close(done)
	})
	// Everything is appended at once (about 6 MB, within the writer's
	// window), and the writer dies as soon as entry 999 is acknowledged
	// (acknowledgements go on arriving while its connections close), so
	// whatever is unacknowledged at its death is in flight.
	const entries = 3000
	var log ackLog
	thousand := make(chan struct{})
	for id := range int64(entries) {
		cb := log.callback
		if id == 999 {
			cb = func(id int64, err error) {
				log.callback(id, err)
				close(thousand)
			}
		}
		if err := w.Append(ctx, zombiePayload(id), cb); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-thousand:
	case <-ctx.Done():
		t.Fatal("entry 999 not acknowledged in time")
	}
	killWriter()
	ackedAtDeath, _ := log.state()

	env, _ := realLedgerEnv(t, meta)
	start := time.Now()
	md, err := ledger.Recover(ctx, env, w.ID())
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	acked, _ := log.state()
	t.Logf("writer died with %d of %d entries acknowledged (%d by now); recovery took %v and closed the ledger at entry %d",
		ackedAtDeath, entries, acked, time.Since(start).Round(time.Millisecond), md.GetLastEntryId())
	if disorder := log.outOfOrder(); disorder != nil {
		t.Fatalf("acknowledgements out of order: %v", disorder)
	}
	if md.GetLastEntryId() < int64(acked)-1 {
		t.Fatalf("recovery closed the ledger at entry %d; entries up to %d were acknowledged", md.GetLastEntryId(), acked-1)
	}
	checkClosedLedger(ctx, t, env, md)

	again, err := ledger.Recover(ctx, env, w.ID())
	if err != nil || !proto.Equal(again, md) {
		t.Fatalf("second recovery: %v, %v; want %v", again, err, md)
	}
}

// TestLedgerFencedZombieWriter: writer A goes on appending while another
// client recovers its ledger. Once the recovery has fenced the bookies,
// A's appends fail with ErrFenced, nothing A was told is acknowledged lies
// beyond the recovered last entry, and readers see exactly 0..last.
func TestLedgerFencedZombieWriter(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	startLedgerBookies(t, meta, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	envA, _ := realLedgerEnv(t, meta)
	a, err := ledger.Create(ctx, envA, ledger.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var log ackLog
	stop := make(chan struct{})
	var callbacks sync.WaitGroup
	appenderDone := make(chan struct{})
	go func() { // A: pipelined appends, at most 64 unacknowledged
		defer close(appenderDone)
		window := make(chan struct{}, 64)
		for id := int64(0); ; id++ {
			select {
			case window <- struct{}{}:
			case <-stop:
				return
			}
			callbacks.Add(1)
			err := a.Append(ctx, zombiePayload(id), func(got int64, err error) {
				defer callbacks.Done()
				log.callback(got, err)
				<-window
			})
			if err != nil {
				callbacks.Done()
				log.fail(fmt.Errorf("append entry %d: %w", id, err))
				return
			}
		}
	}()
	testwait.UntilNil(t, 30*time.Second, "500 entries acknowledged", func() error {
		if acked, err := log.state(); acked < 500 || err != nil {
			return fmt.Errorf("%d acknowledged, %v", acked, err)
		}
		return nil
	})

	envB, _ := realLedgerEnv(t, meta)
	ackedBefore, _ := log.state()
	start := time.Now()
	md, err := ledger.Recover(ctx, envB, a.ID())
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	took := time.Since(start)
	ackedAfter, _ := log.state()
	testwait.UntilNil(t, 10*time.Second, "writer A fenced", func() error {
		if _, err := log.state(); err == nil {
			return errors.New("writer A still appending")
		}
		return nil
	})
	close(stop)
	<-appenderDone
	callbacks.Wait()
	acked, aErr := log.state()
	t.Logf("recovery took %v, closed at entry %d; A had %d acknowledged before it, %d when it returned, %d in the end; A's error: %v",
		took.Round(time.Millisecond), md.GetLastEntryId(), ackedBefore, ackedAfter, acked, aErr)

	if !errors.Is(aErr, ledger.ErrFenced) {
		t.Fatalf("writer A failed with %v, want ErrFenced", aErr)
	}
	if disorder := log.outOfOrder(); disorder != nil {
		t.Fatalf("acknowledgements out of order: %v", disorder)
	}
	if last := md.GetLastEntryId(); int64(acked)-1 > last || int64(ackedBefore)-1 > last {
		t.Fatalf("A was told entries up to %d are acknowledged; recovery closed the ledger at %d", acked-1, last)
	}
	if err := a.Append(ctx, []byte("late"), nil); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("append after fencing: %v, want ErrFenced", err)
	}
	if err := a.Close(ctx); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("close of the fenced writer: %v, want ErrFenced", err)
	}
	envC, _ := realLedgerEnv(t, meta)
	checkClosedLedger(ctx, t, envC, md)
	if got, _, err := envC.Meta.Get(ctx, a.ID()); err != nil || !proto.Equal(got, md) {
		t.Fatalf("metadata after the fenced writer's close: %v, %v; want %v", got, err, md)
	}
}
