package partlog

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
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
	// DeleteKeys removes the keys (absent ones are no error) in one
	// transaction: at most ledger.DeleteBatch of them.
	DeleteKeys(ctx context.Context, keys []string) error
	// PutWith is Put that also writes the records of with, whatever
	// their versions, in the same transaction: all of it or nothing. It
	// returns key's new version and the records of with as written, in
	// order.
	PutWith(ctx context.Context, key string, value []byte, expectedVersion int64, with []Record) (int64, []*metadpb.KeyValue, error)
}

// Record is a key and value written alongside a compare-and-set
// (Store.PutWith), under a metad lease when Lease is not 0 (the record
// vanishes with it).
type Record struct {
	Key   string
	Value []byte
	Lease int64
}

// Key prefixes in metad (PartitionPrefix is brokerpb's, so that readers
// of the partitions' lists need not link this package).
const (
	PartitionPrefix   = brokerpb.PartitionPrefix
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

func (s metaStore) PutWith(ctx context.Context, key string, value []byte, expectedVersion int64, with []Record) (int64, []*metadpb.KeyValue, error) {
	var compares []*metadpb.Compare
	if expectedVersion >= 0 {
		compares = append(compares, &metadpb.Compare{Key: key, Version: expectedVersion})
	}
	ops := []*metadpb.Op{{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: key, Value: value}}}}
	for _, r := range with {
		ops = append(ops, &metadpb.Op{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: r.Key, Value: r.Value, Lease: r.Lease}}})
	}
	resp, err := s.c.Txn(ctx, compares, ops)
	if err != nil {
		return 0, nil, err
	}
	if !resp.GetSucceeded() {
		return 0, nil, fmt.Errorf("%w: %s, expected at version %d", metaclient.ErrVersionConflict, key, expectedVersion)
	}
	if len(resp.GetResults()) != len(ops) {
		return 0, nil, fmt.Errorf("partlog: writing %s: %d results for %d writes", key, len(resp.GetResults()), len(ops))
	}
	written := make([]*metadpb.KeyValue, len(with))
	for i := range with {
		written[i] = resp.GetResults()[i+1].GetKv()
	}
	return resp.GetResults()[0].GetKv().GetVersion(), written, nil
}

func (s metaStore) Delete(ctx context.Context, key string) error {
	_, err := s.c.Delete(ctx, key)
	return err
}

func (s metaStore) DeleteKeys(ctx context.Context, keys []string) error {
	return s.c.DeleteKeys(ctx, keys)
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
	r, err := indexRecord(ledgerID, idx)
	if err != nil {
		return err
	}
	if _, err := store.Put(ctx, r.Key, r.Value, -1); err != nil {
		return fmt.Errorf("partlog: writing %s: %w", IndexKey(ledgerID), err)
	}
	return nil
}

// indexRecord is a closed segment's LedgerIndex as a record to write.
func indexRecord(ledgerID uint64, idx *brokerpb.LedgerIndex) (Record, error) {
	val, err := proto.Marshal(idx)
	if err != nil {
		return Record{}, err
	}
	return Record{Key: IndexKey(ledgerID), Value: val}, nil
}

// casPartitionLog writes pl if the key is still at version. A conflict
// is ErrConflict.
func casPartitionLog(ctx context.Context, store Store, topic string, partition int32, pl *brokerpb.PartitionLog, version int64) (int64, error) {
	v, _, err := casPartitionLogWith(ctx, store, topic, partition, pl, version, nil)
	return v, err
}

// casPartitionLogWith is casPartitionLog writing also the records of with
// in the same transaction (none of them on a conflict); it returns them as
// written.
func casPartitionLogWith(ctx context.Context, store Store, topic string, partition int32, pl *brokerpb.PartitionLog, version int64,
	with []Record) (int64, []*metadpb.KeyValue, error) {
	val, err := proto.Marshal(pl)
	if err != nil {
		return 0, nil, err
	}
	key := PartitionKey(topic, partition)
	var v int64
	var written []*metadpb.KeyValue
	if len(with) == 0 {
		v, err = store.Put(ctx, key, val, version)
	} else {
		v, written, err = store.PutWith(ctx, key, val, version, with)
	}
	if errors.Is(err, metaclient.ErrVersionConflict) {
		return 0, nil, fmt.Errorf("%w: %s at version %d: %w", ErrConflict, key, version, err)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("partlog: writing %s: %w", key, err)
	}
	return v, written, nil
}
