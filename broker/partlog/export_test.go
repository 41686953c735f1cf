package partlog

import (
	"context"

	"github.com/strata-log/strata/proto/brokerpb"
)

// What the external tests (package partlog_test: the log driven by its
// passes) use of the package's insides.

// MetadValueBytes is metad's largest value, which every list must fit in.
const MetadValueBytes = metadValueBytes

// ReadIndex reads a closed segment's LedgerIndex from the store.
var ReadIndex = readIndex

// MaybeRoll rolls the open segment if it is due.
func (l *Log) MaybeRoll(ctx context.Context) error {
	_, err := rolling{l}.checkRoll(ctx)
	return err
}

// The producer state's bounds.
const (
	MaxProducers    = maxProducers
	ProducerBatches = producerBatches
)

// ForgetCached drops what the read path cached of ledger id.
func (l *Log) ForgetCached(id uint64) { l.reads.forget(id) }

// CachedIndex returns a closed segment's index through the read path's
// cache.
func (l *Log) CachedIndex(ctx context.Context, id uint64) (*brokerpb.LedgerIndex, error) {
	return l.reads.index(ctx, id)
}
