package partlog

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Store is the subset of metad a Log needs. Errors: Get of a missing key
// matches metaclient.ErrNotFound; a Put whose expected version does not
// hold matches metaclient.ErrVersionConflict (nothing written).
type Store interface {
	// Get returns the value and its version.
	Get(ctx context.Context, key string) (value []byte, version int64, err error)
	// Put writes value if the key's version is expectedVersion (-1: any,
	// 0: the key must not exist) and returns the new version.
	Put(ctx context.Context, key string, value []byte, expectedVersion int64) (newVersion int64, err error)
	// Delete removes the key (no error if absent).
	Delete(ctx context.Context, key string) error
}

// Key prefixes in metad.
const (
	PartitionPrefix   = "/strata/partitions/"
	LedgerIndexPrefix = "/strata/ledger-index/"
)

// PartitionKey is the metad key of a partition's PartitionLog.
func PartitionKey(topic string, partition int32) string {
	return fmt.Sprintf("%s%s/%d", PartitionPrefix, topic, partition)
}

// IndexKey is the metad key of a closed segment's LedgerIndex.
func IndexKey(ledgerID uint64) string {
	return fmt.Sprintf("%s%020d", LedgerIndexPrefix, ledgerID)
}

// MetaStore adapts a metad client to Store.
func MetaStore(c *metaclient.Client) Store { return metaStore{c} }

type metaStore struct{ c *metaclient.Client }

func (s metaStore) Get(ctx context.Context, key string) ([]byte, int64, error) {
	kv, err := s.c.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	return kv.GetValue(), kv.GetVersion(), nil
}

func (s metaStore) Put(ctx context.Context, key string, value []byte, expectedVersion int64) (int64, error) {
	var opts []metaclient.WriteOption
	if expectedVersion >= 0 {
		opts = append(opts, metaclient.WithExpectedVersion(expectedVersion))
	}
	kv, err := s.c.Put(ctx, key, value, opts...)
	if err != nil {
		return 0, err
	}
	return kv.GetVersion(), nil
}

func (s metaStore) Delete(ctx context.Context, key string) error {
	_, err := s.c.Delete(ctx, key)
	return err
}

// ReadPartitionLog reads a partition's PartitionLog and its version (for
// non-owners: describe). A missing key matches metaclient.ErrNotFound.
func ReadPartitionLog(ctx context.Context, store Store, topic string, partition int32) (*brokerpb.PartitionLog, int64, error) {
	val, version, err := store.Get(ctx, PartitionKey(topic, partition))
	if err != nil {
		return nil, 0, err
	}
	pl := &brokerpb.PartitionLog{}
	if err := proto.Unmarshal(val, pl); err != nil {
		return nil, 0, fmt.Errorf("partlog: %s: decoding PartitionLog: %w", PartitionKey(topic, partition), err)
	}
	return pl, version, nil
}

// readIndex reads a closed segment's LedgerIndex.
func readIndex(ctx context.Context, store Store, ledgerID uint64) (*brokerpb.LedgerIndex, error) {
	val, _, err := store.Get(ctx, IndexKey(ledgerID))
	if err != nil {
		return nil, err
	}
	idx := &brokerpb.LedgerIndex{}
	if err := proto.Unmarshal(val, idx); err != nil {
		return nil, fmt.Errorf("partlog: %s: decoding LedgerIndex: %w", IndexKey(ledgerID), err)
	}
	return idx, nil
}

func writeIndex(ctx context.Context, store Store, ledgerID uint64, idx *brokerpb.LedgerIndex) error {
	val, err := proto.Marshal(idx)
	if err != nil {
		return err
	}
	if _, err := store.Put(ctx, IndexKey(ledgerID), val, -1); err != nil {
		return fmt.Errorf("partlog: writing %s: %w", IndexKey(ledgerID), err)
	}
	return nil
}

// casPartitionLog writes pl if the key is still at version. A conflict
// is ErrConflict.
func casPartitionLog(ctx context.Context, store Store, topic string, partition int32, pl *brokerpb.PartitionLog, version int64) (int64, error) {
	val, err := proto.Marshal(pl)
	if err != nil {
		return 0, err
	}
	v, err := store.Put(ctx, PartitionKey(topic, partition), val, version)
	if errors.Is(err, metaclient.ErrVersionConflict) {
		return 0, fmt.Errorf("%w: %s at version %d: %w", ErrConflict, PartitionKey(topic, partition), version, err)
	}
	if err != nil {
		return 0, fmt.Errorf("partlog: writing %s: %w", PartitionKey(topic, partition), err)
	}
	return v, nil
}
