package kv

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/strata-log/strata/proto/metadpb"
)

// Limits on what a put may write.
const (
	// MaxKeyBytes is the longest key, in bytes.
	MaxKeyBytes = 4096
	// MaxValueBytes is the largest value, in bytes (1 MiB).
	MaxValueBytes = 1 << 20
)

// Defaults applied by New, and the bounds of a List page.
const (
	// DefaultHistoryRevisions is Options.HistoryRevisions when it is 0.
	DefaultHistoryRevisions = 10000
	// DefaultHistoryBytes is Options.HistoryBytes when it is 0 (64 MiB).
	DefaultHistoryBytes = 64 << 20
	// DefaultListLimit is the page size of List when limit <= 0.
	DefaultListLimit = 1000
	// MaxListLimit caps a List page whatever limit asks for: a page is
	// built under the store's read lock, which holds up Apply.
	MaxListLimit = 10000
	// MaxListBytes caps the key and value bytes of a List page (at least
	// one key is returned): a page must fit in one response (the servers'
	// 16 MiB message limit) and not cost the server more memory than that.
	MaxListBytes = 4 << 20
	// DefaultEventsMaxRevisions is the response cap of Events when
	// maxRevisions <= 0.
	DefaultEventsMaxRevisions = 1000
)

// Options configures a Store.
type Options struct {
	// HistoryRevisions is how many recent revisions of watch history to
	// keep; 0 means DefaultHistoryRevisions. Watches that fall further
	// behind get a *CompactedError and must re-list.
	HistoryRevisions int
	// HistoryBytes bounds the key and value bytes the watch history keeps
	// (beyond its newest revision, which is always kept); 0 means
	// DefaultHistoryBytes. Every member holds the history in memory.
	HistoryBytes int64
}

// Validate reports whether the options are usable.
func (o Options) Validate() error {
	if o.HistoryRevisions < 0 {
		return fmt.Errorf("kv: HistoryRevisions is %d, want >= 0", o.HistoryRevisions)
	}
	if o.HistoryBytes < 0 {
		return fmt.Errorf("kv: HistoryBytes is %d, want >= 0", o.HistoryBytes)
	}
	return nil
}

func (o Options) String() string {
	return fmt.Sprintf("kv.Options{HistoryRevisions: %d, HistoryBytes: %d}", o.HistoryRevisions, o.HistoryBytes)
}

func (o Options) withDefaults() Options {
	if o.HistoryRevisions == 0 {
		o.HistoryRevisions = DefaultHistoryRevisions
	}
	if o.HistoryBytes == 0 {
		o.HistoryBytes = DefaultHistoryBytes
	}
	return o
}

// Store is the metad state machine. It is safe for concurrent use: Apply and
// Restore are meant to be called from one goroutine (the Raft apply loop),
// reads from any number.
type Store struct {
	opts Options // defaults applied; immutable after New

	mu struct {
		sync.RWMutex
		state
		// appliedIndex is the log index of the last Apply or Restore.
		appliedIndex uint64
		// changed is closed and replaced by every Apply or Restore that
		// changes the state.
		changed chan struct{}
	}
}

// state is everything a Snapshot carries.
//
// The *metadpb.KeyValue values in kvs and every message in history are
// immutable once stored: a put stores a new KeyValue rather than updating
// the old one. Reads may therefore hand out or copy them after releasing
// the lock, and history events share the stored KeyValues.
type state struct {
	revision int64
	kvs      map[string]*metadpb.KeyValue
	// dataBytes is the sum over kvs of len(key)+len(value), what the
	// max_data_bytes quota bounds.
	dataBytes int64
	index     keyIndex // the keys of kvs, in order
	leases    map[int64]*lease
	members   map[string]*metadpb.MemberInfo
	history   history
}

// lease is a granted lease and the keys attached to it.
type lease struct {
	ttlMs int64
	keys  map[string]struct{}
}

func newState(opts Options) state {
	return state{
		kvs:     make(map[string]*metadpb.KeyValue),
		leases:  make(map[int64]*lease),
		members: make(map[string]*metadpb.MemberInfo),
		history: newHistory(opts.HistoryRevisions, opts.HistoryBytes),
	}
}

// kvBytes is what a live key counts towards the data quota.
func kvBytes(kv *metadpb.KeyValue) int64 { return int64(len(kv.Key) + len(kv.Value)) }

// New returns an empty store: revision 0, compact revision 0, applied index
// 0. It panics if opts.Validate fails, which is a programming error.
func New(opts Options) *Store {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	s := &Store{opts: opts.withDefaults()}
	s.mu.state = newState(s.opts)
	s.mu.changed = make(chan struct{})
	return s
}

// AppliedIndex returns the log index of the last Apply or Restore, whether
// or not that Apply returned an error.
func (s *Store) AppliedIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.appliedIndex
}

// Revision returns the current global revision, 0 for an empty store.
func (s *Store) Revision() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.revision
}

// CompactRevision returns the revision below which watch history is gone:
// Events accepts from > CompactRevision.
func (s *Store) CompactRevision() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.history.compactRevision
}

// Get returns a copy of key's KeyValue, whether it exists, and the revision
// the read was served at.
func (s *Store) Get(key string) (kv *metadpb.KeyValue, found bool, revision int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	stored, ok := s.mu.kvs[key]
	if !ok {
		return nil, false, s.mu.revision
	}
	return copyKV(stored, false), true, s.mu.revision
}

// List returns, in key order, up to limit keys that start with prefix and
// sort after startAfter ("" for the first page), with more set when further
// matching keys remain. limit <= 0 means DefaultListLimit, and limit is at
// most MaxListLimit; a page also ends before the key that would take its
// key and value bytes past MaxListBytes (it holds at least one key), so a
// caller pages until more is false, never until it has limit keys.
// keysOnly leaves values out. revision is the revision the read was served
// at.
func (s *Store) List(prefix, startAfter string, limit int, keysOnly bool) (kvs []*metadpb.KeyValue, more bool, revision int64) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	var size int64
	start := prefix
	if startAfter != "" {
		// The smallest string greater than startAfter.
		start = max(start, startAfter+"\x00")
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for key := range s.mu.index.ascend(start) {
		if !strings.HasPrefix(key, prefix) {
			break
		}
		kv := s.mu.kvs[key]
		n := int64(len(key))
		if !keysOnly {
			n += int64(len(kv.Value))
		}
		if len(kvs) == limit || (len(kvs) > 0 && size+n > MaxListBytes) {
			more = true
			break
		}
		size += n
		kvs = append(kvs, copyKV(kv, keysOnly))
	}
	return kvs, more, s.mu.revision
}

// KeyCount returns the number of live keys.
func (s *Store) KeyCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.mu.kvs)
}

// DataBytes returns the sum over live keys of their key and value bytes,
// what Limits.max_data_bytes bounds.
func (s *Store) DataBytes() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.dataBytes
}

// HistoryBytes returns what the watch history is charged for its events.
func (s *Store) HistoryBytes() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.history.bytes
}

// LeaseCount returns the number of granted leases.
func (s *Store) LeaseCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.mu.leases)
}

// Lease returns lease id, if it is granted: one map lookup, for the
// leader's keep-alives.
func (s *Store) Lease(id int64) (*metadpb.Lease, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.mu.leases[id]
	if !ok {
		return nil, false
	}
	return &metadpb.Lease{Id: id, TtlMs: l.ttlMs}, true
}

// LeaseKey returns a key attached to lease id for which match holds, if
// any (metad checks that a caller may write every key of a lease it
// renews or revokes). match runs under the store's read lock: it must not
// call the store.
func (s *Store) LeaseKey(id int64, match func(key string) bool) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if l, ok := s.mu.leases[id]; ok {
		for key := range l.keys {
			if match(key) {
				return key, true
			}
		}
	}
	return "", false
}

// Leases returns every granted lease, sorted by id.
func (s *Store) Leases() []*metadpb.Lease {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.sortedLeases()
}

// HasLease reports whether lease id is granted.
func (s *Store) HasLease(id int64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.mu.leases[id]
	return ok
}

// Members returns a copy of every member record, sorted by id.
func (s *Store) Members() []*metadpb.MemberInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.sortedMembers()
}

// Member returns a copy of member id's record.
func (s *Store) Member(id string) (*metadpb.MemberInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m, ok := s.mu.members[id]
	if !ok {
		return nil, false
	}
	return copyMember(m), true
}

// Changed returns a channel that the next Apply or Restore that changes the
// state (revision, leases or members) closes. Callers take a fresh channel
// after it fires; reading the state after taking the channel and then
// waiting on it misses no change.
func (s *Store) Changed() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.changed
}

// notifyLocked wakes everyone waiting on Changed.
// REQUIRES: s.mu held for writing.
func (s *Store) notifyLocked() {
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
}

// Snapshot returns a deep copy of the whole state in a deterministic order:
// kvs by key, leases by id, members by id, history oldest first.
func (s *Store) Snapshot() *metadpb.Snapshot {
	s.mu.RLock()
	snap := &metadpb.Snapshot{
		Revision:        s.mu.revision,
		CompactRevision: s.mu.history.compactRevision,
		Kvs:             make([]*metadpb.KeyValue, 0, s.mu.index.len()),
		Leases:          s.mu.sortedLeases(),
		Members:         s.mu.sortedMembers(),
		History:         s.mu.history.all(),
	}
	for key := range s.mu.index.ascend("") {
		snap.Kvs = append(snap.Kvs, s.mu.kvs[key])
	}
	s.mu.RUnlock()

	// Stored KeyValues and history entries are immutable, so the expensive
	// copy runs without holding up Apply.
	for i, kv := range snap.Kvs {
		snap.Kvs[i] = cloneKV(kv)
	}
	for i, r := range snap.History {
		snap.History[i] = cloneWatchResponse(r)
	}
	return snap
}

// Restore replaces the whole state with a deep copy of snap (nil means an
// empty store) and sets the applied index to index. snap is trusted to come
// from Snapshot; Restore still keeps the store's invariants when it does
// not: duplicate keys keep the last entry, a key naming an unknown lease is
// kept but attached to nothing, history is trimmed to HistoryRevisions and
// HistoryBytes, and
// the compact revision is raised so that Events never skips a revision the
// history lacks.
func (s *Store) Restore(snap *metadpb.Snapshot, index uint64) {
	st := restoreState(snap, s.opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.state = st
	s.mu.appliedIndex = index
	s.notifyLocked()
}

func restoreState(snap *metadpb.Snapshot, opts Options) state {
	st := newState(opts)
	if snap == nil {
		return st
	}
	st.revision = snap.GetRevision()
	for _, l := range snap.GetLeases() {
		st.leases[l.GetId()] = &lease{ttlMs: l.GetTtlMs(), keys: make(map[string]struct{})}
	}
	keys := make([]string, 0, len(snap.GetKvs()))
	for _, kv := range snap.GetKvs() {
		if kv == nil {
			continue
		}
		kv = cloneKV(kv)
		if _, dup := st.kvs[kv.Key]; !dup {
			keys = append(keys, kv.Key)
		}
		st.kvs[kv.Key] = kv
	}
	for _, kv := range st.kvs {
		st.dataBytes += kvBytes(kv)
		if l, ok := st.leases[kv.Lease]; ok {
			l.keys[kv.Key] = struct{}{}
		}
	}
	slices.Sort(keys)
	st.index = newKeyIndex(keys)
	for _, m := range snap.GetMembers() {
		if m.GetId() != "" && m.GetClientAddress() != "" {
			st.members[m.Id] = copyMember(m)
		}
	}

	compact := snap.GetCompactRevision()
	for _, r := range snap.GetHistory() {
		if r.GetRevision() > compact && r.GetRevision() > st.history.lastRevision() {
			st.history.append(cloneWatchResponse(r))
		}
	}
	// History must cover (compact, revision] without gaps at the start.
	if first, ok := st.history.firstRevision(); ok {
		compact = max(compact, first-1, st.history.compactRevision)
	} else {
		compact = max(compact, st.revision)
	}
	st.history.compactRevision = compact
	return st
}

// sortedLeases returns copies of the leases, sorted by id.
// REQUIRES: the owning Store's mu held.
func (st *state) sortedLeases() []*metadpb.Lease {
	out := make([]*metadpb.Lease, 0, len(st.leases))
	for id, l := range st.leases {
		out = append(out, &metadpb.Lease{Id: id, TtlMs: l.ttlMs})
	}
	slices.SortFunc(out, func(a, b *metadpb.Lease) int { return cmp.Compare(a.Id, b.Id) })
	return out
}

// sortedMembers returns copies of the member records, sorted by id.
// REQUIRES: the owning Store's mu held.
func (st *state) sortedMembers() []*metadpb.MemberInfo {
	out := make([]*metadpb.MemberInfo, 0, len(st.members))
	for _, m := range st.members {
		out = append(out, copyMember(m))
	}
	slices.SortFunc(out, func(a, b *metadpb.MemberInfo) int { return strings.Compare(a.Id, b.Id) })
	return out
}

// copyKV returns a new KeyValue with kv's fields. The value bytes are shared:
// stored values are never modified, and callers must not modify them either.
func copyKV(kv *metadpb.KeyValue, keysOnly bool) *metadpb.KeyValue {
	out := &metadpb.KeyValue{
		Key:            kv.Key,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Version:        kv.Version,
		Lease:          kv.Lease,
	}
	if !keysOnly {
		out.Value = kv.Value
	}
	return out
}

// cloneKV is copyKV with the value bytes copied too (nil when empty).
func cloneKV(kv *metadpb.KeyValue) *metadpb.KeyValue {
	out := copyKV(kv, true)
	if len(kv.GetValue()) > 0 {
		out.Value = bytes.Clone(kv.Value)
	}
	return out
}

func cloneWatchResponse(r *metadpb.WatchResponse) *metadpb.WatchResponse {
	out := &metadpb.WatchResponse{
		Revision: r.GetRevision(),
		Events:   make([]*metadpb.Event, len(r.GetEvents())),
	}
	for i, e := range r.GetEvents() {
		out.Events[i] = &metadpb.Event{Type: e.GetType()}
		if e.GetKv() != nil {
			out.Events[i].Kv = cloneKV(e.Kv)
		}
	}
	return out
}

func copyMember(m *metadpb.MemberInfo) *metadpb.MemberInfo {
	return &metadpb.MemberInfo{Id: m.Id, ClientAddress: m.ClientAddress, AdminAddress: m.AdminAddress}
}
