package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad/kv"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/metadpb"
)

// Hostile requests sent straight to the bookie and metad gRPC APIs
// (docs/security.md): each test sends the bad request to real processes
// and checks that the defence holds.

// sendAdd sends one add on its own stream and returns the bookie's answer.
func sendAdd(ctx context.Context, c bookiepb.BookieClient, req *bookiepb.AddRequest) (*bookiepb.AddResponse, error) {
	stream, err := c.AddEntries(ctx)
	if err != nil {
		return nil, err
	}
	defer stream.CloseSend()
	if err := stream.Send(req); err != nil {
		return nil, err
	}
	return stream.Recv()
}

// TestHostileOverwriteClosedLedger (C2 in ledger/storage/doc.go): an add that would replace
// an entry of a closed ledger with other bytes, sent to every bookie,
// flagged as a recovery add or not, is refused with ADD_ENTRY_CONFLICT and
// counted; a recovery re-add of the same bytes still succeeds; readers, and
// a bookie restarted after kill -9 (whose replay meets the refused record
// again), still serve the original.
func TestHostileOverwriteClosedLedger(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	nodes := startLedgerBookies(t, meta, 3)
	env, _ := realLedgerEnv(t, meta)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	const entries = 20
	id, data, stored := writeGCLedger(ctx, t, env, entries) // CLOSED, 3/3/2: on every bookie
	evil := []byte("EVIL-INJECTED")
	for _, n := range nodes {
		c := dialBookie(t, n.Listen)
		for _, recovery := range []bool{true, false} {
			resp, err := sendAdd(ctx, c, &bookiepb.AddRequest{RequestId: 1, LedgerId: id, EntryId: 0, Lac: -1,
				Payload: evil, Recovery: recovery})
			if err != nil || resp.Status != bookiepb.AddStatus_ADD_ENTRY_CONFLICT {
				t.Fatalf("bookie %s: overwrite (recovery=%v): %v, %v; want %s", n.ID, recovery, resp, err,
					bookiepb.AddStatus_ADD_ENTRY_CONFLICT)
			}
			t.Logf("bookie %s: overwrite (recovery=%v) refused: %s", n.ID, recovery, resp.Message)
		}
		resp, err := sendAdd(ctx, c, &bookiepb.AddRequest{RequestId: 1, LedgerId: id, EntryId: 0, Lac: -1,
			Payload: stored[0], Recovery: true})
		if err != nil || resp.Status != bookiepb.AddStatus_ADD_OK {
			t.Fatalf("bookie %s: recovery re-add of the same bytes: %v, %v", n.ID, resp, err)
		}
		if err := checkCopy(ctx, c, id, stored); err != nil {
			t.Fatalf("bookie %s after the overwrites: %v", n.ID, err)
		}
		if v, err := metricValue("http://"+n.AdminAddr+"/metrics", "strata_bookie_entry_overwrites_refused_total"); err != nil || v != 2 {
			t.Fatalf("bookie %s: strata_bookie_entry_overwrites_refused_total %v, %v; want 2", n.ID, v, err)
		}
	}
	r, err := ledger.OpenReader(ctx, env, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, entries-1)
	if err != nil || len(got) != entries {
		t.Fatalf("reader: %d entries, %v", len(got), err)
	}
	for i, e := range got {
		if !bytes.Equal(e.Payload, data[i]) {
			t.Fatalf("reader: entry %d is not what was written", i)
		}
	}
	// The refused records are in the journal after the originals: replay
	// must refuse them again.
	victim := nodes[0]
	victim.Kill()
	victim.Restart(t)
	if err := victim.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := checkCopy(ctx, dialBookie(t, victim.Listen), id, stored); err != nil {
		t.Fatalf("bookie %s after kill -9 and replay: %v", victim.ID, err)
	}
	checkPeakRSS(t, nodeRSSBoundMiB, append(bookieProcs(nodes), metadProcs(meta)...)...)
}

// TestHostileInflatedLAC (H1 in ledger/storage/doc.go): a WriteLAC of 10^9, and a re-add of
// the last entry carrying LAC 10^9, sent to one bookie of an open ledger,
// are kept only up to the last entry that bookie holds. The writer then
// dies without closing; a new client recovers the ledger within a bounded
// time, at its real last entry, with every entry intact.
func TestHostileInflatedLAC(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	nodes := startLedgerBookies(t, meta, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	writerEnv, killWriter := realLedgerEnv(t, meta)
	w, err := ledger.Create(ctx, writerEnv, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done, stop := context.WithCancel(context.Background())
		stop()
		_ = w.Close(done) // recovered: Close can only fail; this stops its background work
	})
	const entries = 50
	for id := range int64(entries) {
		if _, err := w.AppendSync(ctx, zombiePayload(id)); err != nil {
			t.Fatal(err)
		}
	}
	target := nodes[1]
	c := dialBookie(t, target.Listen)
	const inflated = 1_000_000_000
	if _, err := c.WriteLAC(ctx, &bookiepb.WriteLACRequest{LedgerId: w.ID(), Lac: inflated}); err != nil {
		t.Fatalf("WriteLAC: %v", err)
	}
	sealed, err := ledger.SealEntry(w.Metadata(), entries-1, zombiePayload(entries-1))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sendAdd(ctx, c, &bookiepb.AddRequest{RequestId: 1, LedgerId: w.ID(), EntryId: entries - 1,
		Lac: inflated, Payload: sealed})
	if err != nil || resp.Status != bookiepb.AddStatus_ADD_OK {
		t.Fatalf("re-add of the last entry with LAC %d: %v, %v", inflated, resp, err)
	}
	lac, err := c.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: w.ID()})
	if err != nil || lac.Lac > entries-1 {
		t.Fatalf("bookie %s: LAC %v, %v; want at most %d", target.ID, lac, err, entries-1)
	}
	clamped, err := metricValue("http://"+target.AdminAddr+"/metrics", "strata_bookie_lac_clamped_total")
	if err != nil || clamped < 2 {
		t.Fatalf("strata_bookie_lac_clamped_total %v, %v; want at least 2", clamped, err)
	}
	t.Logf("bookie %s kept LAC %d (last entry %d) after WriteLAC(%d)", target.ID, lac.Lac, lac.LastEntryId, inflated)

	killWriter()
	env, _ := realLedgerEnv(t, meta)
	const bound = 20 * time.Second
	rctx, rcancel := context.WithTimeout(ctx, bound)
	defer rcancel()
	start := time.Now()
	md, err := ledger.Recover(rctx, env, w.ID())
	if err != nil {
		t.Fatalf("recovery within %v: %v", bound, err)
	}
	t.Logf("recovered ledger %d at entry %d in %v", md.GetId(), md.GetLastEntryId(), time.Since(start).Round(time.Millisecond))
	if md.GetLastEntryId() != entries-1 {
		t.Fatalf("recovered at entry %d, want %d", md.GetLastEntryId(), entries-1)
	}
	checkClosedLedger(ctx, t, env, md)
	checkPeakRSS(t, nodeRSSBoundMiB, append(bookieProcs(nodes), metadProcs(meta)...)...)
}

// rssKiB reads a process's resident set size and its peak (VmRSS, VmHWM).
func rssKiB(pid int) (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %q: %w", name, value, err)
		}
		if name == "VmRSS" {
			rss = n
		} else {
			peak = n
		}
	}
	return rss, peak, sc.Err()
}

// nodeRSSBoundMiB is what no process's peak RSS may reach in the hostile
// tests whose requests are small (bookie overwrites, LACs, orphan
// entries, a fence): they must not make a node grow, and an idle bookie,
// metad member or broker of a test cluster peaks well under it (measured
// peaks are logged).
const nodeRSSBoundMiB = 256

// checkPeakRSS fails the test when a process's peak RSS (VmHWM) reached
// boundMiB.
func checkPeakRSS(t *testing.T, boundMiB int64, procs ...*proctest.Process) {
	t.Helper()
	var peaks []string
	for _, p := range procs {
		_, peak, err := rssKiB(p.Pid())
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		peaks = append(peaks, fmt.Sprintf("%s %d", p.Name, peak>>10))
		if peak>>10 >= boundMiB {
			t.Errorf("%s: peak RSS %d MiB, bound %d MiB", p.Name, peak>>10, boundMiB)
		}
	}
	t.Logf("peak RSS (MiB, bound %d): %s", boundMiB, strings.Join(peaks, ", "))
}

func bookieProcs(nodes []*proctest.BookieNode) []*proctest.Process {
	var out []*proctest.Process
	for _, n := range nodes {
		out = append(out, n.Process)
	}
	return out
}

func metadProcs(m *proctest.MetadCluster) []*proctest.Process {
	var out []*proctest.Process
	for _, n := range m.Members {
		out = append(out, n.Process)
	}
	return out
}

// metadRSSBoundMiB is what no metad member may reach, at its peak, in
// TestHostileMetadLargeValues. Without the byte bounds, 300 × 1 MiB puts
// take every member to about 1 GB. With them, a member holds
// at most 64 MiB of history, 16 MiB of log cache and 32 MiB of proposals
// in flight, plus Go's garbage; measured peaks are logged.
const metadRSSBoundMiB = 320

// TestHostileMetadLargeValues: 300 puts of 1 MiB to one key
// keep every metad member's memory bounded (peak RSS under
// metadRSSBoundMiB) and metad serving; and the other limits answer real
// requests: a quota on keys (RESOURCE_EXHAUSTED), List pages bounded by
// bytes, transactions bounded in ops, and lease ids that do not count.
func TestHostileMetadLargeValues(t *testing.T) {
	skipShort(t)
	const quotaKeys = 100
	meta := proctest.StartMetad(t, bins["metad"], 3, "--quota-keys", strconv.Itoa(quotaKeys))
	cl, err := metaclient.New(metaclient.Config{Endpoints: meta.Endpoints(), RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	for _, m := range meta.Members {
		rss, peak, err := rssKiB(m.Pid())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("metad %s before: RSS %d MiB, peak %d MiB", m.ID, rss>>10, peak>>10)
	}
	value := make([]byte, kv.MaxValueBytes)
	var last []byte
	start := time.Now()
	retried := 0
	for i := range 300 {
		_, _ = rand.Read(value) // every value different, as an attacker would send
		// A leader change under this load is normal (the write's outcome
		// is then unknown): put the same value again, as a client would.
		for {
			_, err := cl.Put(ctx, "/hostile/big", value)
			if err == nil {
				break
			}
			if retried++; retried > 20 || !(errors.Is(err, metaclient.ErrUnknownOutcome) || errors.Is(err, metaclient.ErrUnavailable)) {
				t.Fatalf("put %d: %v", i, err)
			}
			t.Logf("put %d: %v; putting it again", i, err)
		}
		last = bytes.Clone(value)
	}
	t.Logf("300 puts of 1 MiB in %v (%d retried)", time.Since(start).Round(time.Millisecond), retried)
	// Every member has applied them all before the peaks are read.
	testwait.UntilNil(t, 60*time.Second, "every member applied the puts", func() error {
		var revs []int64
		for _, m := range meta.Members {
			st, err := cl.StatusOf(ctx, m.Listen)
			if err != nil {
				return err
			}
			revs = append(revs, st.Revision)
		}
		for _, r := range revs {
			if r < 300 {
				return fmt.Errorf("revisions %v", revs)
			}
		}
		return nil
	})
	for _, m := range meta.Members {
		rss, peak, err := rssKiB(m.Pid())
		if err != nil {
			t.Fatal(err)
		}
		history, _ := metricValue("http://"+m.AdminAddr+"/metrics", "strata_metad_history_bytes")
		t.Logf("metad %s after: RSS %d MiB, peak %d MiB, history %.1f MiB", m.ID, rss>>10, peak>>10, history/(1<<20))
		if peak>>10 >= metadRSSBoundMiB {
			t.Errorf("metad %s: peak RSS %d MiB, bound %d MiB", m.ID, peak>>10, metadRSSBoundMiB)
		}
		if history > kv.DefaultHistoryBytes+(2<<20) {
			t.Errorf("metad %s: history holds %.0f bytes, bound %d", m.ID, history, kv.DefaultHistoryBytes)
		}
	}
	// Still serving, every member.
	got, err := cl.Get(ctx, "/hostile/big")
	if err != nil || !bytes.Equal(got.GetValue(), last) {
		t.Fatalf("get after the puts: %v", err)
	}
	for _, m := range meta.Members {
		mc := dialMetad(t, m.Listen)
		if _, err := mc.Put(ctx, &metadpb.PutRequest{Key: "/hostile/small/" + m.ID, Value: []byte("ok")}); err != nil {
			t.Fatalf("put through member %s: %v", m.ID, err)
		}
	}

	// The key quota: writes that add keys past it are refused, clearly.
	keys := func() int {
		kvs, _, err := cl.List(ctx, "/", metaclient.KeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		return len(kvs)
	}
	var refused error
	for i := 0; refused == nil && i < 2*quotaKeys; i++ {
		_, refused = cl.Put(ctx, fmt.Sprintf("/hostile/q/%03d", i), []byte("x"))
	}
	if !errors.Is(refused, metaclient.ErrQuotaExceeded) || status.Code(refused) != codes.ResourceExhausted {
		t.Fatalf("past %d keys: %v, want ErrQuotaExceeded", quotaKeys, refused)
	}
	if n := keys(); n != quotaKeys {
		t.Fatalf("%d keys after the quota refused a put, want %d", n, quotaKeys)
	}
	t.Logf("refused: %v", refused)
	if _, err := cl.Put(ctx, "/hostile/big", []byte("smaller")); err != nil {
		t.Fatalf("overwriting a key at the quota: %v", err)
	}
	if _, err := cl.Delete(ctx, "/hostile/q/", metaclient.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "/hostile/q/again", []byte("x")); err != nil {
		t.Fatalf("a put after deletes made room: %v", err)
	}

	// List pages are bounded by bytes whatever the limit asked for.
	raw := dialMetad(t, meta.Members[0].Listen)
	for i := range 10 {
		_, _ = rand.Read(value)
		if _, err := cl.Put(ctx, fmt.Sprintf("/hostile/list/%02d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	page, err := raw.List(ctx, &metadpb.ListRequest{Prefix: "/hostile/list/", Limit: 1_000_000})
	if err != nil || !page.More || len(page.Kvs) == 0 || len(page.Kvs) > kv.MaxListBytes/kv.MaxValueBytes {
		t.Fatalf("List of 10 MiB with limit 10^6: %d keys, more=%v, %v", len(page.GetKvs()), page.GetMore(), err)
	}
	// A transaction is bounded in ops.
	var ops []*metadpb.Op
	for i := range 129 {
		ops = append(ops, &metadpb.Op{Op: &metadpb.Op_Delete{Delete: &metadpb.DeleteOp{Key: fmt.Sprint("/hostile/t/", i)}}})
	}
	if _, err := raw.Txn(ctx, &metadpb.TxnRequest{Ops: ops}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a txn of 129 ops: %v, want InvalidArgument", err)
	}
	// Lease ids are drawn at random, not counted from the log index.
	var ids []int64
	for range 2 {
		l, err := raw.LeaseGrant(ctx, &metadpb.LeaseGrantRequest{TtlMs: 10_000})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, l.Id)
	}
	if ids[0] < 1<<32 || ids[1] < 1<<32 || ids[1]-ids[0] == 1 {
		t.Fatalf("lease ids %v look counted", ids)
	}
}

// dialMetad returns a raw client for one metad member, closed by the
// test's cleanup.
func dialMetad(t testing.TB, addr string) metadpb.MetadClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(grpcopts.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return metadpb.NewMetadClient(conn)
}

// TestHostileOrphanEntriesCollected: entries for a
// ledger id metad does not know are accepted (a bookie cannot tell them
// from a ledger being created elsewhere) but collected by the orphan sweep
// once they have been absent from metad for longer than the grace.
func TestHostileOrphanEntriesCollected(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	b := proctest.StartBookie(t, bins["bookie"], meta, "b1", "--ledger-gc-interval", "200ms", "--ledger-gc-grace", "1s")
	c := dialBookie(t, b.Listen)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const unknown = 999_999_999
	payload := bytes.Repeat([]byte("junk"), 16<<10) // 64 KiB
	for e := range uint64(50) {
		resp, err := sendAdd(ctx, c, &bookiepb.AddRequest{RequestId: 1, LedgerId: unknown, EntryId: e, Lac: int64(e) - 1, Payload: payload})
		if err != nil || resp.Status != bookiepb.AddStatus_ADD_OK {
			t.Fatalf("add %d: %v, %v", e, resp, err)
		}
	}
	if err := checkCopy(ctx, c, unknown, [][]byte{payload}); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	metrics := "http://" + b.AdminAddr + "/metrics"
	testwait.UntilNil(t, 30*time.Second, "the orphan sweep deletes the unknown ledger", func() error {
		if err := checkGone(ctx, c, unknown); err != nil {
			return err
		}
		if n, err := metricValue(metrics, "strata_bookie_ledger_gc_deleted_ledgers_total"); err != nil || n != 1 {
			return fmt.Errorf("deleted_ledgers_total %v, %v; want 1", n, err)
		}
		return nil
	})
	t.Logf("ledger %d, unknown to metad, collected %v after its entries", unknown, time.Since(added).Round(time.Millisecond))
	checkPeakRSS(t, nodeRSSBoundMiB, append([]*proctest.Process{b.Process}, metadProcs(meta)...)...)
}
