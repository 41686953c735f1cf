package ledger_test

import (
	"context"
	"testing"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// listerStore is a MetadataStore that also lists everything at once.
type listerStore struct {
	ledger.MetadataStore
	calls int
}

func (s *listerStore) ListAll(context.Context) ([]*ledgerpb.LedgerMetadata, error) {
	s.calls++
	return []*ledgerpb.LedgerMetadata{{Id: 42}}, nil
}

func TestListAll(t *testing.T) {
	ctx := context.Background()
	meta := ledgertest.NewFakeMetadata()
	var ids []uint64
	for range 3 {
		id, _, err := meta.Create(ctx, &ledgerpb.LedgerMetadata{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := meta.Delete(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	// Any store: List and Get, in id order.
	mds, err := ledger.ListAll(ctx, meta)
	if err != nil || len(mds) != 2 || mds[0].GetId() != ids[0] || mds[1].GetId() != ids[2] {
		t.Fatalf("ListAll = %v, %v; want ledgers %d and %d", mds, err, ids[0], ids[2])
	}
	// A MetadataLister answers in one call.
	l := &listerStore{MetadataStore: meta}
	mds, err = ledger.ListAll(ctx, l)
	if err != nil || len(mds) != 1 || mds[0].GetId() != 42 || l.calls != 1 {
		t.Fatalf("ListAll on a lister = %v, %v (%d calls)", mds, err, l.calls)
	}
}
