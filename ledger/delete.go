package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/strata-log/strata/proto/ledgerpb"
)

// ErrDeleteIncomplete means that Delete removed the ledger's metadata but some
// bookies did not confirm deleting their copies. Readers can no longer find
// the ledger; the copies on those bookies (named in the error) only take
// disk space until each bookie's orphan sweep removes them (ledger/bookie:
// a ledger absent from metad for --ledger-gc-grace).
var ErrDeleteIncomplete = errors.New("ledger: deleted from metadata, but not from every bookie")

// Delete deletes ledger id: first its metadata, then its entries on every
// bookie of every fragment. Metadata goes first so that a crash half-way
// leaves unreferenced data on bookies, never metadata that points at
// deleted entries. The caller must know that no writer still appends to
// the ledger (it is closed, or its writer is gone for good).
//
// Errors: ErrNoSuchLedger when there is no such ledger; the metadata
// store's error (nothing deleted, or an unknown outcome); ErrDeleteIncomplete
// joined with each failing bookie's error.
func Delete(ctx context.Context, env Env, id uint64) error {
	md, _, err := env.Meta.Get(ctx, id)
	if err != nil {
		return err
	}
	if err := env.Meta.Delete(ctx, id); err != nil {
		return err
	}
	return deleteCopies(ctx, env, id, md)
}

// MetadataBatchDeleter is a MetadataStore that removes the metadata of up
// to DeleteBatch ledgers in one operation (ledgermetad: one metad
// transaction); a missing ledger is no error.
type MetadataBatchDeleter interface {
	DeleteMany(ctx context.Context, ids []uint64) error
}

// DeleteBatch is the most ledgers DeleteAll hands a MetadataBatchDeleter
// at once: half of metad's default --max-txn-ops (128).
const DeleteBatch = 64

// DeleteAll deletes the ledgers ids as Delete does each, with at most
// parallel metadata reads and bookie calls in flight, and their metadata
// removed DeleteBatch at a time when env.Meta is a MetadataBatchDeleter
// (one by one otherwise). Retention and compaction delete tens to
// thousands of ledgers at once; one by one, each was a metad write of
// its own. errs[i] is the outcome for ids[i], as Delete would return it.
// The same rules apply: every ledger must be closed or without a writer,
// and its metadata goes before its copies.
func DeleteAll(ctx context.Context, env Env, ids []uint64, parallel int) (errs []error) {
	errs = make([]error, len(ids))
	mds := make([]*ledgerpb.LedgerMetadata, len(ids))
	forEach(len(ids), parallel, func(i int) {
		mds[i], _, errs[i] = env.Meta.Get(ctx, ids[i])
	})
	var found []int // indexes of the ledgers whose metadata was read
	for i := range ids {
		if errs[i] == nil {
			found = append(found, i)
		}
	}
	if b, ok := env.Meta.(MetadataBatchDeleter); ok {
		for batch := range slices.Chunk(found, DeleteBatch) {
			batchIDs := make([]uint64, len(batch))
			for k, i := range batch {
				batchIDs[k] = ids[i]
			}
			if err := b.DeleteMany(ctx, batchIDs); err != nil {
				for _, i := range batch {
					errs[i] = err
				}
			}
		}
	} else {
		forEach(len(found), parallel, func(k int) {
			errs[found[k]] = env.Meta.Delete(ctx, ids[found[k]])
		})
	}
	forEach(len(found), parallel, func(k int) {
		if i := found[k]; errs[i] == nil {
			errs[i] = deleteCopies(ctx, env, ids[i], mds[i])
		}
	})
	return errs
}

// deleteCopies deletes ledger id's entries on every bookie of every
// fragment of its metadata md, which is gone from the store:
// ErrDeleteIncomplete joined with each failing bookie's error.
func deleteCopies(ctx context.Context, env Env, id uint64, md *ledgerpb.LedgerMetadata) error {
	var bookies []string
	for _, f := range md.GetFragments() {
		bookies = append(bookies, f.GetBookies()...)
	}
	slices.Sort(bookies)
	bookies = slices.Compact(bookies)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, b := range bookies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := env.Bookies.DeleteLedger(ctx, b, id); err != nil {
				mu.Lock()
				errs = append(errs, err) // it names the bookie
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%w: ledger %d: %w", ErrDeleteIncomplete, id, errors.Join(errs...))
	}
	return nil
}

// forEach calls fn(0..n-1), at most parallel (at least 1) at a time, and
// returns when every call has.
func forEach(n, parallel int, fn func(i int)) {
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}
