package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/proto/bookiepb"
)

// mountTmpfs mounts a small tmpfs for the test (root only) and unmounts it
// at cleanup.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if out, err := exec.Command("mkdir", "-p", dir).CombinedOutput(); err != nil {
		t.Fatalf("mkdir: %v %s", err, out)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("needs root to mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// addOne writes one entry and returns its status.
func addOne(ctx context.Context, c bookiepb.BookieClient, ledger, entry uint64, payload []byte) (bookiepb.AddStatus, error) {
	stream, err := c.AddEntries(ctx)
	if err != nil {
		return 0, err
	}
	defer stream.CloseSend()
	if err := stream.Send(&bookiepb.AddRequest{RequestId: 1, LedgerId: ledger, EntryId: entry, Lac: int64(entry) - 1, Payload: payload}); err != nil {
		return 0, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return 0, err
	}
	return resp.Status, nil
}

// TestBookieDiskFull fills a bookie's small disk: it turns read-only (adds
// get a retriable READ_ONLY, reads go on, the registry says read-only),
// loses nothing, and is writable again once a deleted ledger's space is
// reclaimed.
func TestBookieDiskFull(t *testing.T) {
	skipShort(t)
	disk := mountTmpfs(t, "96m")
	meta := proctest.StartMetad(t, bins["metad"], 3)
	b := &proctest.BookieNode{ID: "b1", Listen: proctest.FreeAddr(t), AdminAddr: proctest.FreeAddr(t), DataDir: filepath.Join(disk, "b1")}
	b.Process = proctest.Start(t, "bookie-b1", bins["bookie"], b.Args(meta,
		"--journal-max-file-bytes", "4194304", "--max-entry-bytes", "1048576",
		"--read-only-above", "0.70", "--writable-below", "0.50", "--gc-interval", "1s")...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	c := dialBookie(t, b.Listen)
	cl := newMetaClient(t, meta)

	// A ledger that must survive, then one that fills the disk.
	keep := map[entryKey][32]byte{}
	for e := uint64(0); e < 20; e++ {
		p := payloadFor(entryKey{1, e}, 4096)
		if st, err := addOne(ctx, c, 1, e, p); err != nil || st != bookiepb.AddStatus_ADD_OK {
			t.Fatalf("add 1/%d: %v %v", e, st, err)
		}
		keep[entryKey{1, e}] = sha(p)
	}
	stream, err := c.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 256<<10)
	var readOnlyAt uint64
	for e := uint64(0); readOnlyAt == 0; e++ {
		if e > 2000 {
			t.Fatal("the bookie never turned read-only")
		}
		if err := stream.Send(&bookiepb.AddRequest{RequestId: e, LedgerId: 2, EntryId: e, Lac: int64(e) - 1, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("add 2/%d: %v", e, err)
		}
		switch resp.Status {
		case bookiepb.AddStatus_ADD_OK:
		case bookiepb.AddStatus_ADD_READ_ONLY:
			readOnlyAt = e
		default:
			t.Fatalf("add 2/%d: %v %s", e, resp.Status, resp.Message)
		}
	}
	_ = stream.CloseSend()
	t.Logf("read-only after %d entries of 256 KiB", readOnlyAt)
	checkAcked(t, c, keep)
	testwait.UntilNil(t, 10*time.Second, "registry says read-only", func() error {
		known, err := bookies.List(ctx, cl)
		if err != nil {
			return err
		}
		if len(known) != 1 || known[0].State() != "read-only" {
			return fmt.Errorf("registry: %+v", known)
		}
		return nil
	})

	// Free space: delete the big ledger; GC reclaims its journal files.
	if _, err := c.DeleteLedger(ctx, &bookiepb.DeleteLedgerRequest{LedgerId: 2}); err != nil {
		t.Fatal(err)
	}
	testwait.UntilNil(t, 30*time.Second, "writable again", func() error {
		st, err := addOne(ctx, c, 1, 20, payloadFor(entryKey{1, 20}, 4096))
		if err != nil {
			return err
		}
		if st != bookiepb.AddStatus_ADD_OK {
			return errors.New(st.String())
		}
		return nil
	})
	keep[entryKey{1, 20}] = sha(payloadFor(entryKey{1, 20}, 4096))
	checkAcked(t, c, keep)
}
