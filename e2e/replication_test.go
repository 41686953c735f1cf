package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/ledger/replication"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// replicationCluster is 3 metad members and 4 bookies whose replicator
// audits every second with a 3s grace period.
type replicationCluster struct {
	meta    *proctest.MetadCluster
	bookies []*proctest.BookieNode
	env     []string
}

func startReplicationCluster(t *testing.T) *replicationCluster {
	t.Helper()
	c := &replicationCluster{meta: proctest.StartMetad(t, bins["metad"], 3)}
	for i := 1; i <= 4; i++ {
		c.bookies = append(c.bookies, proctest.StartBookie(t, bins["bookie"], c.meta, fmt.Sprintf("b%d", i),
			"--autorecovery-interval", "1s", "--autorecovery-grace", "3s"))
	}
	c.env = []string{"STRATA_METAD=" + strings.Join(c.meta.Endpoints(), ",")}
	return c
}

func (c *replicationCluster) byAddress(addr string) *proctest.BookieNode {
	for _, b := range c.bookies {
		if b.Listen == addr {
			return b
		}
	}
	return nil
}

// writeClosedLedger writes a closed 3/3/2 ledger of 500 entries with
// `strata ledger simpletest --keep` and returns its id and ensemble.
func (c *replicationCluster) writeClosedLedger(t *testing.T) (uint64, []string) {
	t.Helper()
	out, errOut, code := strata(t, c.env, "ledger", "simpletest", "--entries", "500", "--entry-size", "512", "--keep", "--output", "json")
	var res struct {
		LedgerID uint64   `json:"ledger_id"`
		Ensemble []string `json:"ensemble"`
		OK       bool     `json:"ok"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || !res.OK || len(res.Ensemble) != 3 {
		t.Fatalf("simpletest: exit %d, %+v, %v\n%s\n%s", code, res, err, out, errOut)
	}
	return res.LedgerID, res.Ensemble
}

// readAll reads entries 0..n-1 of a ledger from one bookie, directly.
func readAll(t *testing.T, addr string, id uint64, n int) ([][]byte, error) {
	t.Helper()
	client := dialBookie(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([][]byte, n)
	for e := range n {
		resp, err := client.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: id, EntryId: uint64(e)})
		if err != nil {
			return nil, fmt.Errorf("bookie %s entry %d: %w", addr, e, err)
		}
		if resp.Status != bookiepb.ReadStatus_READ_OK {
			return nil, fmt.Errorf("bookie %s entry %d: %s", addr, e, resp.Status)
		}
		out[e] = resp.Payload
	}
	return out, nil
}

// victimCopy reads entries 0..n-1 of a ledger from the bookie about to be
// killed or drained. The writer returned once an ack quorum (2 of 3) held
// each entry: the third copy may land a moment later, so wait for it
// rather than read once.
func victimCopy(t *testing.T, addr string, id uint64, n int) [][]byte {
	t.Helper()
	var entries [][]byte
	testwait.UntilNil(t, 10*time.Second, fmt.Sprintf("bookie %s to hold all %d entries", addr, n), func() (err error) {
		entries, err = readAll(t, addr, id, n)
		return err
	})
	return entries
}

// checkRestored checks that the ledger's metadata no longer names gone and
// that each bookie of its (single-fragment, E = Qw) ensemble holds every
// entry with the reference payload.
func checkRestored(t *testing.T, store ledger.MetadataStore, id uint64, gone string, want [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, _, err := store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if md.State != ledgerpb.LedgerState_CLOSED || md.LastEntryId != int64(len(want)-1) || len(md.Fragments) != 1 {
		t.Fatalf("metadata %v", md)
	}
	ens := md.Fragments[0].Bookies
	if slices.Contains(ens, gone) || len(slices.Compact(slices.Sorted(slices.Values(ens)))) != 3 {
		t.Fatalf("ensemble %v (replaced %s)", ens, gone)
	}
	for _, b := range ens {
		got, err := readAll(t, b, id, len(want))
		if err != nil {
			t.Fatal(err)
		}
		for e := range want {
			if !bytes.Equal(got[e], want[e]) {
				t.Fatalf("bookie %s entry %d differs from the original copy", b, e)
			}
		}
	}
}

// TestReplicationRestoresCopiesAfterDecommission: re-replication restores
// 3 copies after a bookie is decommissioned. `strata bookie decommission
// --wait` returns once no ledger names the bookie; then every entry is
// readable from each of the ledger's 3 bookies individually.
func TestReplicationRestoresCopiesAfterDecommission(t *testing.T) {
	skipShort(t)
	c := startReplicationCluster(t)
	id, ensemble := c.writeClosedLedger(t)
	victim := c.byAddress(ensemble[1])
	want := victimCopy(t, victim.Listen, id, 500)

	out, errOut, code := strata(t, c.env, "bookie", "decommission", victim.ID, "--wait", "--interval", "500ms", "--timeout", "30s")
	if code != 0 || !strings.Contains(out, "decommissioned at") || !strings.Contains(out, "OK bookie "+victim.ID+" drained") {
		t.Fatalf("decommission --wait: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Logf("decommission --wait:\n%s", out)
	checkRestored(t, ledgermetad.NewStore(newMetaClient(t, c.meta)), id, victim.Listen, want)

	// The decommissioned bookie registers read-only (no new ledger lands
	// on it), and the listing shows nothing under-replicated.
	testwait.UntilNil(t, 10*time.Second, "decommissioned bookie read-only", func() error {
		out, _, code := strata(t, c.env, "bookie", "list")
		line := ""
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, victim.ID+" ") {
				line = l
			}
		}
		if code != 0 || !strings.Contains(line, "read-only") || !strings.Contains(line, "yes") ||
			!strings.Contains(out, "under-replicated ledgers: 0 of 1") || !strings.Contains(out, "replicator: b") {
			return fmt.Errorf("bookie list: exit %d\n%s", code, out)
		}
		return nil
	})
	out, _, _ = strata(t, c.env, "bookie", "list")
	t.Logf("bookie list:\n%s", out)
	out, errOut, code = strata(t, c.env, "bookie", "decommission", victim.ID, "--output", "json")
	var drain struct {
		Ledgers int  `json:"ledgers"`
		Drained bool `json:"drained"`
	}
	if err := json.Unmarshal([]byte(out), &drain); err != nil || code != 0 || !drain.Drained || drain.Ledgers != 0 {
		t.Fatalf("decommission again: exit %d %v\n%s\n%s", code, err, out, errOut)
	}
	if out, _, code := strata(t, c.env, "bookie", "recommission", victim.ID); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("recommission: exit %d\n%s", code, out)
	}
	if _, errOut, code := strata(t, c.env, "bookie", "decommission", "nosuchbookie"); code != 1 || !strings.Contains(errOut, "no such bookie") {
		t.Fatalf("decommission of an unknown bookie: exit %d %q", code, errOut)
	}
}

// TestReplicationRestoresCopiesAfterKill: a bookie holding a closed ledger
// is killed with -9; after the grace period its copies are on live bookies
// again, 3 of them.
func TestReplicationRestoresCopiesAfterKill(t *testing.T) {
	skipShort(t)
	c := startReplicationCluster(t)
	id, ensemble := c.writeClosedLedger(t)
	// Kill the elected replicator's bookie if it holds the ledger, so that
	// a new leader must take over (and count the grace period itself).
	victim := c.byAddress(ensemble[0])
	cl := newMetaClient(t, c.meta)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if l, err := replication.Leader(ctx, replication.MetaKV(cl)); err == nil && l != nil {
		for _, b := range c.bookies {
			if b.ID == l.ID && slices.Contains(ensemble, b.Listen) {
				victim = b
				t.Logf("killing %s, the replication leader", b.ID)
			}
		}
	}
	want := victimCopy(t, victim.Listen, id, 500)
	killed := time.Now()
	victim.Kill()

	store := ledgermetad.NewStore(cl)
	testwait.UntilNil(t, 30*time.Second, "ledger re-replicated off the killed bookie", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		md, _, err := store.Get(ctx, id)
		if err != nil {
			return err
		}
		if slices.Contains(md.Fragments[0].Bookies, victim.Listen) {
			return fmt.Errorf("ensemble %v still names %s", md.Fragments[0].Bookies, victim.Listen)
		}
		return nil
	})
	t.Logf("re-replicated %v after the kill", time.Since(killed).Round(100*time.Millisecond))
	if since := time.Since(killed); since < 3*time.Second {
		t.Errorf("re-replicated after %v, before the 3s grace period", since)
	}
	checkRestored(t, store, id, victim.Listen, want)

	// The dead bookie can be decommissioned by id: its address comes from
	// the replicator's records, and nothing names it any more.
	out, errOut, code := strata(t, c.env, "bookie", "decommission", victim.ID)
	if code != 0 || !strings.Contains(out, "("+victim.Listen+") decommissioned") || !strings.Contains(out, "OK bookie "+victim.ID+" drained") {
		t.Fatalf("decommission of the dead bookie: exit %d\n%s\n%s", code, out, errOut)
	}
}
