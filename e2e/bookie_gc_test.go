package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
)

// bookieGCGrace is the grace the bookies of TestBookieGCDeletesOrphanedLedger
// run with; they sweep every 200ms.
const bookieGCGrace = time.Second

// TestBookieGCDeletesOrphanedLedger: a ledger deleted while one bookie of
// its ensemble is down (kill -9) stays on that bookie only until the
// bookie, restarted, has seen it absent from metad for longer than
// --ledger-gc-grace; then the bookie deletes its copy (rule O1 in
// ledger/bookie/doc.go). A second ledger, still in metad, is untouched and
// readable from every bookie, and ledgers are written while every bookie
// sweeps every 200ms (rule O2: a ledger being created is never an orphan).
func TestBookieGCDeletesOrphanedLedger(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	var nodes []*proctest.BookieNode
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, proctest.StartBookie(t, bins["bookie"], meta, fmt.Sprintf("b%d", i),
			"--ledger-gc-interval", "200ms", "--ledger-gc-grace", bookieGCGrace.String()))
	}
	env, _ := realLedgerEnv(t, meta)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// With three bookies and E=3 both ledgers are on every bookie.
	const entries = 100
	doomed, _, doomedStored := writeGCLedger(ctx, t, env, entries)
	kept, keptData, keptStored := writeGCLedger(ctx, t, env, entries)
	victim := nodes[1]
	clients := map[string]bookiepb.BookieClient{}
	for _, n := range nodes {
		clients[n.ID] = dialBookie(t, n.Listen)
	}
	// An entry is acknowledged at the ack quorum (2): the third bookie's
	// copy may land just after, so wait for every bookie's, not the
	// writer's view of two.
	testwait.UntilNil(t, 10*time.Second, "every bookie to hold both ledgers", func() error {
		for _, n := range nodes {
			for id, want := range map[uint64][][]byte{doomed: doomedStored, kept: keptStored} {
				if err := checkCopy(ctx, clients[n.ID], id, want); err != nil {
					return fmt.Errorf("bookie %s before the kill: %w", n.ID, err)
				}
			}
		}
		return nil
	})

	victim.Kill()
	err := ledger.Delete(ctx, env, doomed)
	if !errors.Is(err, ledger.ErrDeleteIncomplete) || !strings.Contains(err.Error(), victim.Listen) {
		t.Fatalf("delete with %s down: %v; want ErrDeleteIncomplete naming %s", victim.ID, err, victim.Listen)
	}
	for _, n := range nodes {
		if n != victim {
			if err := checkGone(ctx, clients[n.ID], doomed); err != nil {
				t.Fatalf("bookie %s after the delete: %v", n.ID, err)
			}
		}
	}

	restarted := time.Now()
	victim.Restart(t)
	waitCtx, waitCancel := context.WithTimeout(ctx, 30*time.Second)
	defer waitCancel()
	if err := victim.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	metrics := "http://" + victim.AdminAddr + "/metrics"
	testwait.UntilNil(t, 30*time.Second, "the restarted bookie deletes its orphaned copy", func() error {
		if err := checkGone(ctx, clients[victim.ID], doomed); err != nil {
			return err
		}
		if n, err := metricValue(metrics, "strata_bookie_ledger_gc_deleted_ledgers_total"); err != nil || n != 1 {
			return fmt.Errorf("deleted_ledgers_total %v, %v; want 1", n, err)
		}
		return nil
	})
	deleted := time.Now()
	if took := deleted.Sub(restarted); took <= bookieGCGrace {
		t.Fatalf("the copy was deleted %v after the restart, within the %v grace", took, bookieGCGrace)
	}
	t.Logf("orphaned ledger %d deleted on %s %v after its restart", doomed, victim.ID, deleted.Sub(restarted).Round(time.Millisecond))
	log, err := os.ReadFile(victim.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	logged := ""
	for line := range strings.Lines(string(log)) {
		if strings.Contains(line, "orphan") && strings.Contains(line, fmt.Sprintf(" ledger=%d ", doomed)) {
			logged += line
		}
	}
	if !strings.Contains(logged, "deleted orphaned ledger") {
		t.Fatalf("no deletion of ledger %d in %s's log:\n%s", doomed, victim.ID, log)
	}
	t.Logf("%s's log:\n%s", victim.ID, logged)

	// Let more than a grace period of sweeps pass after the deletion: had
	// any sweep taken the kept ledger for an orphan, it would be gone by
	// then.
	testwait.UntilNil(t, 30*time.Second, "sweeps for longer than the grace after the deletion", func() error {
		last, err := metricValue(metrics, "strata_bookie_ledger_gc_last_sweep_timestamp_seconds")
		if err != nil {
			return err
		}
		if at := time.Unix(0, int64(last*1e9)); at.Sub(deleted) <= bookieGCGrace+200*time.Millisecond {
			return fmt.Errorf("last sweep at %v", at)
		}
		if n, err := metricValue(metrics, "strata_bookie_ledger_gc_orphaned_ledgers"); err != nil || n != 0 {
			return fmt.Errorf("orphaned_ledgers %v, %v; want 0", n, err)
		}
		return nil
	})
	for _, n := range nodes {
		if err := checkCopy(ctx, clients[n.ID], kept, keptStored); err != nil {
			t.Fatalf("bookie %s: the kept ledger: %v", n.ID, err)
		}
		want := 0.0
		if n == victim {
			want = 1
		}
		if got, err := metricValue("http://"+n.AdminAddr+"/metrics", "strata_bookie_ledger_gc_deleted_ledgers_total"); err != nil || got != want {
			t.Fatalf("bookie %s deleted %v orphans (%v), want %v", n.ID, got, err, want)
		}
	}
	if _, _, err := env.Meta.Get(ctx, kept); err != nil {
		t.Fatalf("the kept ledger's metadata: %v", err)
	}
	r, err := ledger.OpenReader(ctx, env, kept)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, entries-1)
	if err != nil || len(got) != entries {
		t.Fatalf("read the kept ledger: %d entries, %v", len(got), err)
	}
	for i, e := range got {
		if !bytes.Equal(e.Payload, keptData[i]) {
			t.Fatalf("kept ledger entry %d differs", i)
		}
	}
}

// writeGCLedger writes a closed 3/3/2 ledger of n entries and returns its id
// and payloads.
// writeGCLedger writes a closed ledger of n entries and returns its id,
// the payloads and the entries as bookies store them (digest included).
func writeGCLedger(ctx context.Context, t *testing.T, env ledger.Env, n int) (id uint64, data, stored [][]byte) {
	t.Helper()
	w, err := ledger.Create(ctx, env, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	data = make([][]byte, n)
	for i := range data {
		data[i] = payloadFor(entryKey{w.ID(), uint64(i)}, 256)
		if _, err := w.AppendSync(ctx, data[i]); err != nil {
			t.Fatalf("ledger %d entry %d: %v", w.ID(), i, err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	md := w.Metadata()
	for i, p := range data {
		s, err := ledger.SealEntry(md, int64(i), p)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, s)
	}
	return w.ID(), data, stored
}

// checkCopy checks that a bookie holds every entry of a ledger as want
// has it (as stored: digest included).
func checkCopy(ctx context.Context, c bookiepb.BookieClient, id uint64, want [][]byte) error {
	for e := range want {
		resp, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: id, EntryId: uint64(e)})
		if err != nil {
			return fmt.Errorf("ledger %d entry %d: %w", id, e, err)
		}
		if resp.Status != bookiepb.ReadStatus_READ_OK || !bytes.Equal(resp.Payload, want[e]) {
			return fmt.Errorf("ledger %d entry %d: %s, or a different payload", id, e, resp.Status)
		}
	}
	return nil
}

// checkGone checks that a bookie holds nothing of a ledger: no first entry,
// no state.
func checkGone(ctx context.Context, c bookiepb.BookieClient, id uint64) error {
	resp, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: id, EntryId: 0})
	if err != nil {
		return fmt.Errorf("ledger %d: %w", id, err)
	}
	if resp.Status != bookiepb.ReadStatus_READ_NO_ENTRY {
		return fmt.Errorf("ledger %d entry 0: %s, want %s", id, resp.Status, bookiepb.ReadStatus_READ_NO_ENTRY)
	}
	lac, err := c.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: id})
	if err != nil {
		return fmt.Errorf("ledger %d: %w", id, err)
	}
	if lac.Lac != -1 || lac.LastEntryId != -1 || lac.Fenced {
		return fmt.Errorf("ledger %d still has state: lac %d, last entry %d, fenced %t", id, lac.Lac, lac.LastEntryId, lac.Fenced)
	}
	return nil
}
