package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// ErrUnavailable is what FakeMetadata answers while unavailable, and when it
// loses the answer to an update it applied. Callers must treat it as an
// unknown outcome.
var ErrUnavailable = errors.New("ledgertest: metadata unavailable")

// FakeMetadata is an in-memory ledger.MetadataStore: versioned records with
// compare-and-set. Safe for concurrent use.
type FakeMetadata struct {
	mu          sync.Mutex
	nextID      uint64
	records     map[uint64]*record
	unavailable bool
	loseAnswers int
	updates     int
	batches     int
}

var (
	_ ledger.MetadataStore        = (*FakeMetadata)(nil)
	_ ledger.MetadataBatchDeleter = (*FakeMetadata)(nil)
)

type record struct {
	md      *ledgerpb.LedgerMetadata
	version int64
}

// NewFakeMetadata returns an empty store; ids start at 1.
func NewFakeMetadata() *FakeMetadata {
	return &FakeMetadata{nextID: 1, records: make(map[uint64]*record)}
}

// SetUnavailable makes every call fail with ErrUnavailable (on) or work
// again (off): metad without a quorum (BookKeeper #1591's ZooKeeper stall).
func (m *FakeMetadata) SetUnavailable(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unavailable = on
}

// LoseAnswers makes the next n successful updates apply and then answer
// ErrUnavailable: an unknown outcome the caller must resolve by reading.
func (m *FakeMetadata) LoseAnswers(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loseAnswers = n
}

// Updates counts the updates applied.
func (m *FakeMetadata) Updates() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.updates
}

// Ledger returns a copy of a ledger's metadata and version (inspection:
// works while unavailable).
func (m *FakeMetadata) Ledger(id uint64) (*ledgerpb.LedgerMetadata, int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.records[id]
	if r == nil {
		return nil, 0, false
	}
	return clone(r.md), r.version, true
}

// Set stores md under md.Id as a new version, bypassing compare-and-set
// (to script a concurrent change).
func (m *FakeMetadata) Set(md *ledgerpb.LedgerMetadata) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.records[md.Id]
	if r == nil {
		r = &record{}
		m.records[md.Id] = r
		m.nextID = max(m.nextID, md.Id+1)
	}
	r.md = clone(md)
	r.version++
	return r.version
}

func clone(md *ledgerpb.LedgerMetadata) *ledgerpb.LedgerMetadata {
	return proto.Clone(md).(*ledgerpb.LedgerMetadata)
}

// REQUIRES: m.mu held.
func (m *FakeMetadata) checkLocked(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.unavailable {
		return ErrUnavailable
	}
	return nil
}

// Create implements ledger.MetadataStore.
func (m *FakeMetadata) Create(ctx context.Context, md *ledgerpb.LedgerMetadata) (uint64, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(ctx); err != nil {
		return 0, 0, err
	}
	id := m.nextID
	m.nextID++
	md.Id = id
	m.records[id] = &record{md: clone(md), version: 1}
	return id, 1, nil
}

// Get implements ledger.MetadataStore.
func (m *FakeMetadata) Get(ctx context.Context, id uint64) (*ledgerpb.LedgerMetadata, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(ctx); err != nil {
		return nil, 0, err
	}
	r := m.records[id]
	if r == nil {
		return nil, 0, fmt.Errorf("%w: %d", ledger.ErrNoSuchLedger, id)
	}
	return clone(r.md), r.version, nil
}

// Update implements ledger.MetadataStore.
func (m *FakeMetadata) Update(ctx context.Context, md *ledgerpb.LedgerMetadata, version int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(ctx); err != nil {
		return 0, err
	}
	r := m.records[md.Id]
	if r == nil {
		return 0, fmt.Errorf("%w: %d", ledger.ErrNoSuchLedger, md.Id)
	}
	if r.version != version {
		return 0, fmt.Errorf("%w: ledger %d is at version %d, not %d", ledger.ErrMetadataConflict, md.Id, r.version, version)
	}
	r.md = clone(md)
	r.version++
	m.updates++
	if m.loseAnswers > 0 {
		m.loseAnswers--
		return 0, fmt.Errorf("%w (the update was applied)", ErrUnavailable)
	}
	return r.version, nil
}

// Delete implements ledger.MetadataStore.
func (m *FakeMetadata) Delete(ctx context.Context, id uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(ctx); err != nil {
		return err
	}
	if m.records[id] == nil {
		return fmt.Errorf("%w: %d", ledger.ErrNoSuchLedger, id)
	}
	delete(m.records, id)
	return nil
}

// DeleteMany implements ledger.MetadataBatchDeleter: all of ids at once
// (missing ones are skipped), or none of them past ledger.DeleteBatch, as
// metad refuses a transaction over its op limit.
func (m *FakeMetadata) DeleteMany(ctx context.Context, ids []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(ctx); err != nil {
		return err
	}
	if len(ids) > ledger.DeleteBatch {
		return fmt.Errorf("%w: %d ledgers in one batch, more than %d", ledger.ErrInvalid, len(ids), ledger.DeleteBatch)
	}
	for _, id := range ids {
		delete(m.records, id)
	}
	m.batches++
	return nil
}

// Batches counts the DeleteMany calls applied.
func (m *FakeMetadata) Batches() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.batches
}

// List implements ledger.MetadataStore.
func (m *FakeMetadata) List(ctx context.Context) ([]uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(ctx); err != nil {
		return nil, err
	}
	var ids []uint64
	for id := range m.records {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}
