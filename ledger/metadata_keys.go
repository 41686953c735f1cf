package ledger

import (
	"fmt"
	"strconv"
	"strings"
)

// NextIDKey holds the next ledger id to hand out, as decimal text. Ids start
// at 1; every allocation is a compare-and-set that advances it by one.
const NextIDKey = "/strata/ledgers-next-id"

// metadataKeyDigits is the width of the zero-padded id in a metadata key:
// enough for any uint64, so key order is id order.
const metadataKeyDigits = 20

// MetadataKey is the metad key of ledger id's metadata.
func MetadataKey(id uint64) string {
	return MetadataPrefix + fmt.Sprintf("%0*d", metadataKeyDigits, id)
}

// ParseMetadataKey returns the ledger id of a metadata key.
func ParseMetadataKey(key string) (uint64, error) {
	digits, ok := strings.CutPrefix(key, MetadataPrefix)
	if !ok || len(digits) != metadataKeyDigits {
		return 0, fmt.Errorf("%w: %q is not a ledger metadata key", ErrInvalid, key)
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q is not a ledger metadata key", ErrInvalid, key)
		}
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a ledger metadata key: %v", ErrInvalid, key, err)
	}
	return id, nil
}
