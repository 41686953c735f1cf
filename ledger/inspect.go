package ledger

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/strata-log/strata/internal/corruption"
)

// EntryStatus is the verdict on one entry of CheckEntries.
type EntryStatus string

// Entry verdicts.
const (
	// EntryOK: a bookie of the write set returned the entry (its stored
	// checksum held).
	EntryOK EntryStatus = "OK"
	// EntryCorrupt: no copy could be read and at least one bookie reported
	// its copy corrupt (ErrEntryCorrupt).
	EntryCorrupt EntryStatus = "CORRUPT"
	// EntryUnreadable: no copy could be read (bookies down, or none has
	// it).
	EntryUnreadable EntryStatus = "UNREADABLE"
)

// EntryCheck is CheckEntries' report on one entry.
type EntryCheck struct {
	ID     int64
	Status EntryStatus
	// Size and CRC32C (Castagnoli) of the payload, when Status is OK.
	Size   int
	CRC32C uint32
	// Err is why the entry could not be read, when Status is not OK.
	Err error
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CheckEntries reads entries first..last (at most the LAC) through r and
// calls fn with a verdict for each, in order, going on past entries that
// cannot be read. It stops at fn's first error, which it returns, or when
// ctx ends. Reads go through ReadRange, so they stream where they can and
// fail over to other copies: an entry is OK when any copy is good.
func CheckEntries(ctx context.Context, r *Reader, first, last int64, fn func(EntryCheck) error) error {
	if err := r.checkRange(ctx, first, last); err != nil {
		return err
	}
	for pos := first; pos <= last; {
		err := r.ReadRange(ctx, pos, last, func(e Entry) error {
			pos = e.ID + 1
			return fn(EntryCheck{ID: e.ID, Status: EntryOK, Size: len(e.Payload), CRC32C: crc32.Checksum(e.Payload, castagnoli)})
		})
		if err == nil {
			return nil
		}
		var re *readError
		if !errors.As(err, &re) || ctx.Err() != nil {
			return err
		}
		// Some entry from pos on could not be read (with striping, reads
		// run ahead): check pos alone, then stream on after it.
		check := EntryCheck{ID: pos, Status: EntryOK}
		payload, err := r.readOne(ctx, pos)
		switch {
		case err == nil:
			check.Size, check.CRC32C = len(payload), crc32.Checksum(payload, castagnoli)
		case ctx.Err() != nil:
			return err
		case corruption.Is(err):
			check.Status, check.Err = EntryCorrupt, err
		default:
			check.Status, check.Err = EntryUnreadable, err
		}
		if err := fn(check); err != nil {
			return err
		}
		pos++
	}
	return nil
}

// String renders the check as "id size crc status" for people.
func (c EntryCheck) String() string {
	if c.Status != EntryOK {
		return fmt.Sprintf("%d - - %s", c.ID, c.Status)
	}
	return fmt.Sprintf("%d %d %08x %s", c.ID, c.Size, c.CRC32C, c.Status)
}
