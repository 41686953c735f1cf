package bookie

import (
	"context"
	"testing"
	"time"

	pebblevfs "github.com/cockroachdb/pebble/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger/storage"
	"github.com/strata-log/strata/ledger/vfs"
	"github.com/strata-log/strata/proto/bookiepb"
)

// FuzzRequests decodes arbitrary bytes as each bookie request and serves
// it against an in-memory storage: no input may panic or hang, and every
// answer is either a response or a status error.
func FuzzRequests(f *testing.F) {
	seeds := []proto.Message{
		&bookiepb.AddRequest{RequestId: 1, LedgerId: 1, EntryId: 0, Lac: -1, Payload: []byte("x")},
		&bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 0, Fence: true},
		&bookiepb.ReadEntriesRequest{LedgerId: 1, FirstEntryId: 0, LastEntryId: 10, MaxBytes: 100},
		&bookiepb.ReadLACRequest{LedgerId: 1, PreviousLac: -1, WaitMs: 5},
		&bookiepb.FenceRequest{LedgerId: 1},
		&bookiepb.WriteLACRequest{LedgerId: 1, Lac: 3},
		&bookiepb.DeleteLedgerRequest{LedgerId: 1},
	}
	for i, m := range seeds {
		b, _ := proto.Marshal(m)
		f.Add(byte(i), b)
	}
	st, err := storage.Open(context.Background(), storage.Options{
		FS: vfs.NewMem(), IndexFS: pebblevfs.NewMem(), Dir: "/fuzz",
		JournalMaxFileBytes: 1 << 20, JournalPreallocateBytes: -1, MaxEntryBytes: 64 << 10,
		DiskCheckInterval: -1, CheckpointInterval: -1, GCInterval: -1,
		OnFatal: func(err error) { f.Fatalf("fatal: %v", err) },
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	s := &service{store: st, info: func() *bookiepb.BookieInfo { return &bookiepb.BookieInfo{} }}
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		switch kind % 6 {
		case 0:
			var req bookiepb.AddRequest
			if proto.Unmarshal(data, &req) != nil {
				return
			}
			done := make(chan struct{})
			err := st.Add(ctx, req.LedgerId, req.EntryId, req.Lac, req.Payload, req.Recovery, func(error) { close(done) })
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
				_, _ = s.WriteLAC(ctx, &req)
			}
		case 5:
			var req bookiepb.DeleteLedgerRequest
			if proto.Unmarshal(data, &req) == nil {
				_, _ = s.DeleteLedger(ctx, &req)
			}
		}
	})
}
