package e2e

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// TestLedgerMetadStore runs the metad-backed ledger MetadataStore against a
// real metad cluster: id allocation (also concurrent), create, get,
// compare-and-set updates, listing and deletion.
func TestLedgerMetadStore(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	cl := newMetaClient(t, meta)
	store := ledgermetad.NewStore(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	newMD := func() *ledgerpb.LedgerMetadata {
		return &ledgerpb.LedgerMetadata{
			EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, LastEntryId: -1,
			Fragments:   []*ledgerpb.Fragment{{FirstEntryId: 0, Bookies: []string{"a:1", "b:1", "c:1"}}},
			CreatedAtMs: time.Now().UnixMilli(), Properties: map[string]string{"owner": "e2e"},
		}
	}
	md := newMD()
	id1, v1, err := store.Create(ctx, md)
	if err != nil {
		t.Fatal(err)
	}
	if md.Id != id1 || v1 != 1 || id1 == 0 {
		t.Fatalf("created ledger %d (md.Id %d) at version %d", id1, md.Id, v1)
	}
	got, version, err := store.Get(ctx, id1)
	if err != nil || version != v1 || !proto.Equal(got, md) {
		t.Fatalf("get %d: %v at version %d, %v; want %v at %d", id1, got, version, err, md, v1)
	}
	// The value is where the key layout says, readable by anyone.
	if kv, err := cl.Get(ctx, ledger.MetadataKey(id1)); err != nil || kv.Version != v1 {
		t.Fatalf("raw key %s: %v, %v", ledger.MetadataKey(id1), kv, err)
	}

	// Concurrent creators get distinct ids.
	const creators = 16
	ids := make([]uint64, creators)
	var wg sync.WaitGroup
	errs := make(chan error, creators)
	for i := range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, _, err := store.Create(ctx, newMD())
			if err != nil {
				errs <- err
				return
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent create: %v", err)
	}
	all := append(slices.Clone(ids), id1)
	slices.Sort(all)
	if len(slices.Compact(slices.Clone(all))) != len(all) {
		t.Fatalf("duplicate ids: %v", all)
	}

	// Compare-and-set updates.
	got.State, got.LastEntryId, got.Length = ledgerpb.LedgerState_CLOSED, 41, 4200
	v2, err := store.Update(ctx, got, v1)
	if err != nil || v2 != v1+1 {
		t.Fatalf("update at version %d: version %d, %v", v1, v2, err)
	}
	stale := proto.Clone(got).(*ledgerpb.LedgerMetadata)
	stale.LastEntryId = 99
	_, err = store.Update(ctx, stale, v1)
	if !errors.Is(err, ledger.ErrMetadataConflict) || !errors.Is(err, metaclient.ErrVersionConflict) {
		t.Fatalf("update at stale version: %v", err)
	}
	if now, version, err := store.Get(ctx, id1); err != nil || version != v2 || now.LastEntryId != 41 {
		t.Fatalf("after the conflict: %v at %d, %v", now, version, err)
	}

	// Listing: every id, in order, also with the metadata.
	list, err := store.List(ctx)
	if err != nil || !slices.Equal(list, all) {
		t.Fatalf("list = %v, %v; want %v", list, err, all)
	}
	mds, err := ledger.ListAll(ctx, store)
	if err != nil || len(mds) != len(all) {
		t.Fatalf("list all: %d, %v", len(mds), err)
	}
	for i, m := range mds {
		if m.Id != all[i] {
			t.Fatalf("list all: position %d holds ledger %d, want %d", i, m.Id, all[i])
		}
	}

	// Deletion.
	if err := store.Delete(ctx, id1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Get(ctx, id1); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("get deleted ledger: %v", err)
	}
	if err := store.Delete(ctx, id1); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if _, err := store.Update(ctx, got, v2); !errors.Is(err, ledger.ErrMetadataConflict) {
		t.Fatalf("update deleted ledger: %v", err)
	}
	if _, err := store.Update(ctx, got, 0); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("update at version 0: %v", err)
	}
	list, err = store.List(ctx)
	if err != nil || slices.Contains(list, id1) || len(list) != creators {
		t.Fatalf("list after delete = %v, %v", list, err)
	}

	// Many at once: one transaction (one revision), missing ledgers no
	// error; a metad that refuses a transaction that large gets them one
	// by one.
	small := proctest.StartMetad(t, bins["metad"], 1, "--max-txn-ops", "4")
	smallCl := newMetaClient(t, small)
	for _, tc := range []struct {
		cl        *metaclient.Client
		revisions func(int64) bool
	}{
		{cl, func(n int64) bool { return n == 1 }},
		{smallCl, func(n int64) bool { return n >= 6 }},
	} {
		st := ledgermetad.NewStore(tc.cl)
		var batch []uint64
		for range 6 {
			id, _, err := st.Create(ctx, newMD())
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, id)
		}
		before, rev0, err := tc.cl.List(ctx, ledger.MetadataPrefix, metaclient.KeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteMany(ctx, append(slices.Clone(batch), id1)); err != nil {
			t.Fatalf("delete many: %v", err)
		}
		after, rev1, err := tc.cl.List(ctx, ledger.MetadataPrefix, metaclient.KeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before)-len(batch) || !tc.revisions(rev1-rev0) {
			t.Fatalf("deleting %d of %d ledgers left %d, in %d revisions", len(batch), len(before), len(after), rev1-rev0)
		}
		for _, kv := range after {
			if id, _ := ledger.ParseMetadataKey(kv.GetKey()); slices.Contains(batch, id) {
				t.Fatalf("ledger %d survived", id)
			}
		}
	}

	// A metadata key that is not a ledger's makes listing fail loudly.
	if _, err := cl.Put(ctx, ledger.MetadataPrefix+"junk", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := store.List(ctx); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("list with a stray key: %v", err)
	}
}

// TestLedgerBookieRegistry reads the bookie registry as the writer does.
func TestLedgerBookieRegistry(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 1)
	cl := newMetaClient(t, meta)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range []*bookiepb.BookieInfo{
		{Id: "b1", Address: "127.0.0.1:1001", FreeBytes: 10},
		{Id: "b2", Address: "127.0.0.1:1002", FreeBytes: 20, State: bookiepb.BookieState_READ_ONLY},
		{Id: "b3", Address: "127.0.0.1:1003", FreeBytes: 30, Rack: "r1"},
	} {
		v, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Put(ctx, bookies.RegistryPrefix+b.Id, v); err != nil {
			t.Fatal(err)
		}
	}
	writable, err := ledgermetad.NewRegistry(cl).Writable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, b := range writable {
		addrs = append(addrs, b.Address)
	}
	if !slices.Equal(addrs, []string{"127.0.0.1:1001", "127.0.0.1:1003"}) {
		t.Fatalf("writable bookies %v", addrs)
	}
	ensemble, err := ledger.Ordered.ChooseEnsemble(writable, 2, nil)
	if err != nil || !slices.Equal(ensemble, []string{"127.0.0.1:1003", "127.0.0.1:1001"}) {
		t.Fatalf("ensemble %v, %v", ensemble, err)
	}
}
