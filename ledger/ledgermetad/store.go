package ledgermetad

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// maxAllocateAttempts bounds the compare-and-set loop of one id allocation
// (besides the caller's context): each failed attempt means another
// allocation succeeded, so running out means heavy contention.
const maxAllocateAttempts = 256

// idBlock is how many ids one compare-and-set of the counter reserves for
// a Store: the ledgers of thousands of partitions written for the first
// time at once (each creates one) took one contended counter CAS each, at
// about 40 creates a second. Ids a Store reserved and never used are
// skipped (ids need only be unique and never reused).
const idBlock = 64

// Store is the ledger.MetadataStore kept in metad: each ledger's
// LedgerMetadata as a protobuf value at ledger.MetadataKey(id), every
// change a compare-and-set on the key's version, ids from a counter at
// ledger.NextIDKey.
//
// Errors: Get returns ledger.ErrNoSuchLedger for a missing ledger; Update
// returns ledger.ErrMetadataConflict (also matching
// metaclient.ErrVersionConflict) when the version moved on; any other error
// from metad is returned wrapped, and for Create and Update means the
// outcome is unknown (errors.Is metaclient.ErrUnknownOutcome tells when
// metad said so): re-read before deciding. An unknown-outcome Create may
// leave an OPEN ledger nobody writes; Delete removes it.
type Store struct {
	meta *metaclient.Client
	// ids is the block of reserved ids not handed out yet: [next,
	// limit), guarded by the one-slot semaphore sem (held while a block
	// is reserved, so one process refills once, not once per caller).
	sem         chan struct{}
	next, limit uint64
}

var (
	_ ledger.MetadataStore        = (*Store)(nil)
	_ ledger.MetadataLister       = (*Store)(nil)
	_ ledger.MetadataBatchDeleter = (*Store)(nil)
)

// NewStore returns the store over meta.
func NewStore(meta *metaclient.Client) *Store {
	return &Store{meta: meta, sem: make(chan struct{}, 1)}
}

// Create allocates an id, sets md.Id and stores md under it with a
// compare-and-set on "absent", so a ledger is never overwritten even if the
// counter were reset: an id that turns out to be taken is skipped.
func (s *Store) Create(ctx context.Context, md *ledgerpb.LedgerMetadata) (uint64, int64, error) {
	for attempt := 0; ; attempt++ {
		id, err := s.allocateID(ctx)
		if err != nil {
			return 0, 0, err
		}
		md.Id = id
		value, err := proto.Marshal(md)
		if err != nil {
			return 0, 0, fmt.Errorf("ledgermetad: encode metadata of ledger %d: %w", id, err)
		}
		kv, err := s.meta.Put(ctx, ledger.MetadataKey(id), value, metaclient.WithExpectedVersion(0))
		switch {
		case err == nil:
			return id, kv.GetVersion(), nil
		case errors.Is(err, metaclient.ErrVersionConflict) && attempt < maxAllocateAttempts:
			continue // the id is taken (counter behind the keys): take the next
		default:
			return 0, 0, fmt.Errorf("ledgermetad: create ledger %d: %w", id, err)
		}
	}
}

// allocateID hands out the next id of the Store's block, reserving a new
// block of idBlock ids first when it is used up.
func (s *Store) allocateID(ctx context.Context) (uint64, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, fmt.Errorf("ledgermetad: allocate ledger id: %w", ctx.Err())
	}
	defer func() { <-s.sem }()
	if s.next >= s.limit {
		first, err := s.reserveIDs(ctx, idBlock)
		if err != nil {
			return 0, err
		}
		s.next, s.limit = first, first+idBlock
	}
	id := s.next
	s.next++
	return id, nil
}

// reserveIDs advances the counter at ledger.NextIDKey by n by
// compare-and-set and returns the id it held (the first of the n). A conflict means another allocation won: read
// again. An unknown outcome is retried too: if the write did apply, the
// id is simply never used (ids need only be unique, not dense).
func (s *Store) reserveIDs(ctx context.Context, n uint64) (uint64, error) {
	var lastErr error
	for attempt := 0; attempt < maxAllocateAttempts; attempt++ {
		if attempt > 0 {
			// Jitter spreads competing allocators apart.
			wait := time.Duration(rand.Int64N(int64(min(attempt, 20)) * int64(time.Millisecond)))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, fmt.Errorf("ledgermetad: allocate ledger id: %w (last error: %v)", ctx.Err(), lastErr)
			case <-t.C:
			}
		}
		next, version := uint64(1), int64(0)
		kv, err := s.meta.Get(ctx, ledger.NextIDKey)
		switch {
		case errors.Is(err, metaclient.ErrNotFound):
		case err != nil:
			return 0, fmt.Errorf("ledgermetad: allocate ledger id: %w", err)
		default:
			if next, err = strconv.ParseUint(string(kv.GetValue()), 10, 64); err != nil || next == 0 {
				return 0, fmt.Errorf("ledgermetad: allocate ledger id: %s holds %q, not a ledger id", ledger.NextIDKey, kv.GetValue())
			}
			version = kv.GetVersion()
		}
		_, err = s.meta.Put(ctx, ledger.NextIDKey, []byte(strconv.FormatUint(next+n, 10)), metaclient.WithExpectedVersion(version))
		switch {
		case err == nil:
			return next, nil
		case errors.Is(err, metaclient.ErrVersionConflict), errors.Is(err, metaclient.ErrUnknownOutcome) && ctx.Err() == nil:
			lastErr = err
		default:
			return 0, fmt.Errorf("ledgermetad: allocate ledger id: %w", err)
		}
	}
	return 0, fmt.Errorf("ledgermetad: allocate ledger id: gave up after %d attempts: %w", maxAllocateAttempts, lastErr)
}

// Get implements ledger.MetadataStore.
func (s *Store) Get(ctx context.Context, id uint64) (*ledgerpb.LedgerMetadata, int64, error) {
	kv, err := s.meta.Get(ctx, ledger.MetadataKey(id))
	if errors.Is(err, metaclient.ErrNotFound) {
		return nil, 0, fmt.Errorf("%w: ledger %d", ledger.ErrNoSuchLedger, id)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("ledgermetad: read metadata of ledger %d: %w", id, err)
	}
	md, err := decodeMetadata(kv.GetKey(), kv.GetValue())
	if err != nil {
		return nil, 0, err
	}
	return md, kv.GetVersion(), nil
}

func decodeMetadata(key string, value []byte) (*ledgerpb.LedgerMetadata, error) {
	md := &ledgerpb.LedgerMetadata{}
	if err := proto.Unmarshal(value, md); err != nil {
		return nil, fmt.Errorf("ledgermetad: metadata at %s is unreadable: %w", key, err)
	}
	return md, nil
}

// Update implements ledger.MetadataStore.
func (s *Store) Update(ctx context.Context, md *ledgerpb.LedgerMetadata, version int64) (int64, error) {
	if version < 1 {
		// Version 0 would create the key: never what an update means.
		return 0, fmt.Errorf("%w: update of ledger %d at version %d", ledger.ErrInvalid, md.GetId(), version)
	}
	value, err := proto.Marshal(md)
	if err != nil {
		return 0, fmt.Errorf("ledgermetad: encode metadata of ledger %d: %w", md.GetId(), err)
	}
	kv, err := s.meta.Put(ctx, ledger.MetadataKey(md.GetId()), value, metaclient.WithExpectedVersion(version))
	if errors.Is(err, metaclient.ErrVersionConflict) {
		return 0, fmt.Errorf("%w: ledger %d is no longer at version %d: %w", ledger.ErrMetadataConflict, md.GetId(), version, err)
	}
	if err != nil {
		return 0, fmt.Errorf("ledgermetad: update metadata of ledger %d: %w", md.GetId(), err)
	}
	return kv.GetVersion(), nil
}

// Delete removes the metadata; a missing ledger is no error.
func (s *Store) Delete(ctx context.Context, id uint64) error {
	if _, err := s.meta.Delete(ctx, ledger.MetadataKey(id)); err != nil {
		return fmt.Errorf("ledgermetad: delete metadata of ledger %d: %w", id, err)
	}
	return nil
}

// DeleteMany implements ledger.MetadataBatchDeleter: one metad
// transaction (metaclient.DeleteKeys: one by one if metad's --max-txn-ops
// refuses it); missing ledgers are no error.
func (s *Store) DeleteMany(ctx context.Context, ids []uint64) error {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = ledger.MetadataKey(id)
	}
	if err := s.meta.DeleteKeys(ctx, keys); err != nil {
		return fmt.Errorf("ledgermetad: delete metadata of %d ledgers: %w", len(ids), err)
	}
	return nil
}

// List lists the keys only; a key under the prefix that is not a metadata
// key is an error, not skipped: something else writes there.
func (s *Store) List(ctx context.Context) ([]uint64, error) {
	kvs, _, err := s.meta.List(ctx, ledger.MetadataPrefix, metaclient.KeysOnly())
	if err != nil {
		return nil, fmt.Errorf("ledgermetad: list ledgers: %w", err)
	}
	ids := make([]uint64, 0, len(kvs))
	for _, kv := range kvs {
		id, err := ledger.ParseMetadataKey(kv.GetKey())
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// ListAll implements ledger.MetadataLister with one paged listing; like
// List, it fails on a key under the prefix that is not a metadata key.
func (s *Store) ListAll(ctx context.Context) ([]*ledgerpb.LedgerMetadata, error) {
	kvs, _, err := s.meta.List(ctx, ledger.MetadataPrefix)
	if err != nil {
		return nil, fmt.Errorf("ledgermetad: list ledgers: %w", err)
	}
	out := make([]*ledgerpb.LedgerMetadata, 0, len(kvs))
	for _, kv := range kvs {
		if _, err := ledger.ParseMetadataKey(kv.GetKey()); err != nil {
			return nil, err
		}
		md, err := decodeMetadata(kv.GetKey(), kv.GetValue())
		if err != nil {
			return nil, err
		}
		out = append(out, md)
	}
	return out, nil
}
