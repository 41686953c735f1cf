package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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
	var bookies []string
	for _, f := range md.GetFragments() {
		bookies = append(bookies, f.GetBookies()...)
	}
	slices.Sort(bookies)
	bookies = slices.Compact(bookies)
	if err := env.Meta.Delete(ctx, id); err != nil {
		return err
	}
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
