package bookie

import (
	"context"
	"testing"
	"time"

	pebblevfs "github.com/cockroachdb/pebble/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger/storage"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
	"github.com/strata-log/strata/vfs"
)

// guardedLedger holds entries written before the fuzzing starts: no
// request but its deletion may change them (C2 in ledger/storage/doc.go).
const guardedLedger = 1 << 40

// FuzzRequests decodes arbitrary bytes as each bookie request and serves
// it against an in-memory storage that checks digests (digestKeys): no
// input may panic or hang, every answer is either a response or a status
// error, no request but a delete changes the bytes of a stored entry
// (C2), no ledger's LAC passes the highest entry it holds (H1), and the
// guarded ledger's LAC never passes its writer's last entry (H2).
func FuzzRequests(f *testing.F) {
	seeds := []proto.Message{
		&bookiepb.AddRequest{RequestId: 1, LedgerId: 1, EntryId: 0, Lac: -1, Payload: []byte("x")},
		&bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 0, Fence: true},
		&bookiepb.ReadEntriesRequest{LedgerId: 1, FirstEntryId: 0, LastEntryId: 10, MaxBytes: 100},
		&bookiepb.ReadLACRequest{LedgerId: 1, PreviousLac: -1, WaitMs: 5},
		&bookiepb.FenceRequest{LedgerId: 1},
		&bookiepb.WriteLACRequest{LedgerId: 1, Lac: 3},
		&bookiepb.DeleteLedgerRequest{LedgerId: 1},
		&bookiepb.AddRequest{RequestId: 1, LedgerId: guardedLedger, EntryId: 2, Lac: 1 << 40, Payload: []byte("EVIL"), Recovery: true},
		&bookiepb.WriteLACRequest{LedgerId: guardedLedger, Lac: 1_000_000_000},
	}
	for i, m := range seeds {
		b, _ := proto.Marshal(m)
		f.Add(byte(i), b)
	}
	// A forged add far past the guarded ledger's entries (kind 0: an add).
	far, _ := proto.Marshal(&bookiepb.AddRequest{RequestId: 1, LedgerId: guardedLedger, EntryId: 1000, Lac: 999, Payload: []byte("far")})
	f.Add(byte(0), far)
	md := keyedLedger(guardedLedger, ledgerpb.DigestType_DIGEST_AES_GMAC)
	meta := newFakeMeta(md)
	meta.unkeyed = true // other ledgers take any bytes: their LACs rise, within H1
	keys := newTestKeys(f, meta)
	st := memStorageVerified(f, keys.verify)
	var guarded [][]byte
	for entry, p := range []string{"zero", "one", "two", "three"} {
		guarded = append(guarded, seal(f, md, int64(entry), p))
	}
	waitKey(f, keys, md, guarded[0])
	for entry, p := range guarded {
		done := make(chan error, 1)
		if err := st.Add(context.Background(), guardedLedger, uint64(entry), int64(entry)-1, p, false,
			func(err error) { done <- err }); err != nil || <-done != nil {
			f.Fatalf("setup: add %d: %v", entry, err)
		}
	}
	s := &service{store: st, info: func() *bookiepb.BookieInfo { return &bookiepb.BookieInfo{} }, draining: context.Background()}
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		touched := uint64(0)
		defer func() {
			if st, ok := st.State(touched); ok && st.LAC > max(st.LastEntryID, -1) {
				t.Fatalf("ledger %d: LAC %d above the last entry held %d", touched, st.LAC, st.LastEntryID)
			}
			if st, _ := st.State(guardedLedger); st.LAC >= int64(len(guarded)) {
				t.Fatalf("guarded ledger: LAC %d above its writer's last entry %d", st.LAC, len(guarded)-1)
			}
			for entry, want := range guarded {
				e, err := st.Read(guardedLedger, uint64(entry))
				if err != nil || string(e.Payload) != string(want) {
					t.Fatalf("guarded entry %d: %q, %v; want %q", entry, e.Payload, err, want)
				}
			}
		}()
		switch kind % 6 {
		case 0:
			var req bookiepb.AddRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			touched = req.LedgerId
			done := make(chan struct{})
			err := st.Add(ctx, req.LedgerId, req.EntryId, req.Lac, req.Entry(), req.Recovery, func(error) { close(done) })
			if err == nil {
				<-done
			}
		case 1:
			var req bookiepb.ReadEntryRequest
			if proto.Unmarshal(data, &req) == nil {
				_, _ = s.ReadEntry(ctx, &req)
			}
		case 2:
			var req bookiepb.ReadLACRequest
			if proto.Unmarshal(data, &req) == nil {
				_, _ = s.ReadLAC(ctx, &req)
			}
		case 3:
			var req bookiepb.FenceRequest
			if proto.Unmarshal(data, &req) == nil {
				_, _ = s.Fence(ctx, &req)
			}
		case 4:
			var req bookiepb.WriteLACRequest
			if proto.Unmarshal(data, &req) == nil {
				touched = req.LedgerId
				_, _ = s.WriteLAC(ctx, &req)
			}
		case 5:
			var req bookiepb.DeleteLedgerRequest
			if proto.Unmarshal(data, &req) == nil && req.LedgerId != guardedLedger {
				_, _ = s.DeleteLedger(ctx, &req)
			}
		}
	})
}

// memStorage opens a storage in memory, closed when the test ends.
func memStorage(t testing.TB) *storage.Storage { return memStorageVerified(t, nil) }

// memStorageVerified is memStorage with storage.Options.Verify.
func memStorageVerified(t testing.TB, verify func(ledgerID, entryID uint64, entry []byte) bool) *storage.Storage {
	st, err := storage.Open(context.Background(), storage.Options{
		FS: vfs.NewMem(), IndexFS: pebblevfs.NewMem(), Dir: "/bookie",
		JournalMaxFileBytes: 1 << 20, JournalPreallocateBytes: -1, MaxEntryBytes: 64 << 10,
		DiskCheckInterval: -1, CheckpointInterval: -1, GCInterval: -1,
		OnFatal: func(err error) { t.Errorf("fatal: %v", err) },
		Verify:  verify,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
