package partlog

// Budget is a byte semaphore (internal/bytebudget.Budget): what a read
// from the bookies charges its read-ahead to while it is in flight.
type Budget interface {
	TryAcquire(n int64) bool
	Release(n int64)
}

// ReadAhead is the read-ahead of a broker's reads from the bookies: a read
// fetches up to readAheadBytes beyond what its fetch asked for, and keeps
// those entries for the next fetches in a cache shared by every
// partition, bounded in bytes (oldest out first), so that the read-ahead
// of partitions whose consumers stopped cannot pile up. The extra bytes
// are read only when Budget has room for them while the read is in
// flight: with the fetches' budget full, a read gets what its fetch asked
// for and nothing more. Safe for concurrent use.
type ReadAhead struct {
	cache  *TailCache
	budget Budget // nil: unbounded
}

// NewReadAhead returns a read-ahead keeping at most maxBytes of entries,
// whose reads charge budget (nil: none) while in flight.
func NewReadAhead(maxBytes int64, budget Budget) *ReadAhead {
	// Its own metrics: hits here are not the tail cache's.
	return &ReadAhead{cache: NewTailCache(maxBytes, nil), budget: budget}
}

// Bytes is the bytes of the entries kept.
func (r *ReadAhead) Bytes() int64 { return r.cache.Bytes() }

// get returns a kept entry.
func (r *ReadAhead) get(ledgerID uint64, entry int64) ([]byte, bool) {
	return r.cache.Get(ledgerID, entry)
}

// reserve reports whether a read may fetch readAheadBytes beyond what it
// was asked for; if so, the read calls done once the entries are kept.
func (r *ReadAhead) reserve() (done func(), ok bool) {
	if r.budget == nil {
		return func() {}, true
	}
	if !r.budget.TryAcquire(readAheadBytes) {
		return nil, false
	}
	return func() { r.budget.Release(readAheadBytes) }, true
}

// keep caches the entries first.. of ledger id that a read fetched beyond
// the want bytes its caller asked for: those that end past them (the
// caller stops before an entry that does not fit, so the next fetch
// starts there).
func (r *ReadAhead) keep(id uint64, first int64, payloads [][]byte, want int) {
	n := 0
	for i, p := range payloads {
		if n += len(p); n > want {
			r.cache.Add(id, first+int64(i), p)
		}
	}
}
