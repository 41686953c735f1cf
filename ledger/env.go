package ledger

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// BookieClient is how writers, readers and recovery talk to bookies. The
// real one (ledger/ledgergrpc) keeps one pipelined AddEntries stream per
// bookie; tests use an in-memory twin (ledger/ledgertest) that delays,
// drops, fails and crashes on command.
type BookieClient interface {
	// Add sends one add to a bookie and returns at once. cb is called
	// exactly once: with the bookie's answer, or with an error when the
	// outcome is unknown (transport failure, no answer within the client's
	// add timeout). Adds to one bookie are sent in call order. cb must not
	// block. Add must not modify req: a writer passes one request to each
	// bookie of an entry's write set.
	Add(bookie string, req *bookiepb.AddRequest, cb func(*bookiepb.AddResponse, error))
	// ReadEntry reads one entry; with req.Fence the bookie fences first.
	// A READ_NO_ENTRY status is an explicit "absent"; any error is unknown.
	// An error matching ErrEntryCorrupt says the bookie's copy failed its
	// checksum.
	ReadEntry(ctx context.Context, bookie string, req *bookiepb.ReadEntryRequest) (*bookiepb.ReadEntryResponse, error)
	// ReadEntries streams a range (see bookiepb.Bookie.ReadEntries).
	ReadEntries(ctx context.Context, bookie string, req *bookiepb.ReadEntriesRequest, fn func(*bookiepb.ReadEntryResponse) error) error
	ReadLAC(ctx context.Context, bookie string, req *bookiepb.ReadLACRequest) (*bookiepb.ReadLACResponse, error)
	Fence(ctx context.Context, bookie string, ledgerID uint64) (*bookiepb.FenceResponse, error)
	WriteLAC(ctx context.Context, bookie string, ledgerID uint64, lac int64) error
	DeleteLedger(ctx context.Context, bookie string, ledgerID uint64) error
}

// MetadataStore keeps ledger metadata with compare-and-set semantics. The
// real one (ledger/ledgermetad) is in metad under MetadataPrefix; tests use
// an in-memory twin (ledger/ledgertest) that can be made unavailable
// (BookKeeper #1591).
type MetadataStore interface {
	// Create stores md under a new id (it sets md.Id) and returns the id
	// and the record's version.
	Create(ctx context.Context, md *ledgerpb.LedgerMetadata) (uint64, int64, error)
	// Get returns the metadata and its version; ErrNoSuchLedger if absent.
	Get(ctx context.Context, id uint64) (*ledgerpb.LedgerMetadata, int64, error)
	// Update replaces the metadata if its version is still version and
	// returns the new version; ErrMetadataConflict when it changed. Any
	// other error is an unknown outcome: re-read before deciding.
	Update(ctx context.Context, md *ledgerpb.LedgerMetadata, version int64) (int64, error)
	// Delete removes the metadata.
	Delete(ctx context.Context, id uint64) error
	// List returns every ledger id, in order.
	List(ctx context.Context) ([]uint64, error)
}

// MetadataLister is a MetadataStore that can return every ledger's
// metadata in one listing, in id order (ledgermetad's store does); ListAll
// uses it when the store has it.
type MetadataLister interface {
	ListAll(ctx context.Context) ([]*ledgerpb.LedgerMetadata, error)
}

// ListAll returns the metadata of every ledger in id order: in one listing
// when store is a MetadataLister, otherwise by List and Get (a ledger
// deleted in between is left out).
func ListAll(ctx context.Context, store MetadataStore) ([]*ledgerpb.LedgerMetadata, error) {
	if l, ok := store.(MetadataLister); ok {
		return l.ListAll(ctx)
	}
	ids, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*ledgerpb.LedgerMetadata, 0, len(ids))
	for _, id := range ids {
		md, _, err := store.Get(ctx, id)
		if errors.Is(err, ErrNoSuchLedger) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, md)
	}
	return out, nil
}

// BookieRegistry lists the bookies that may take new data. The real one
// (ledgermetad.Registry) reads the bookies' registrations in metad.
type BookieRegistry interface {
	// Writable returns registered bookies in state WRITABLE.
	Writable(ctx context.Context) ([]*bookiepb.BookieInfo, error)
}

// Env is what the ledger protocol runs against.
type Env struct {
	Meta     MetadataStore
	Bookies  BookieClient
	Registry BookieRegistry
	Logger   *slog.Logger
	// Metrics counts what the protocol wants an operator to see (a stuck
	// recovery); nil counts nothing.
	Metrics *Metrics
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Placement chooses the bookies of new ledgers and the replacements
	// of ensemble changes and re-replication; the zero value is the
	// production rule (weighted random, see Placement).
	Placement Placement
}

// MetadataPrefix is where ledger metadata lives in metad:
// MetadataPrefix + 20-digit zero-padded id.
const MetadataPrefix = "/strata/ledgers/"
