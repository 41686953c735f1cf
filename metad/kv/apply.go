package kv

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/strata-log/strata/proto/metadpb"
	"google.golang.org/protobuf/proto"
)

// Apply applies one committed Raft command, found at log index index. It is
// deterministic: the same commands in the same order give the same state and
// the same responses on every replica.
//
// It returns a *metadpb.TxnResponse for a txn, a *metadpb.LeaseGrantResponse
// for a lease grant, a *metadpb.LeaseRevokeResponse for a lease revoke and
// nil for a member record. A txn whose compares fail is not an error: it
// returns Succeeded false. An invalid command returns an error wrapping
// ErrInvalidCommand, ErrInvalidKey, ErrValueTooLarge or ErrLeaseNotFound,
// a command over cmd.Limits one wrapping ErrQuotaExceeded, and either
// changes nothing but the applied index, which Apply always advances to
// index.
//
// Apply keeps no reference to cmd: values are copied, so the caller may
// reuse cmd's buffers.
func (s *Store) Apply(index uint64, cmd *metadpb.Command) (proto.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.appliedIndex = index

	var (
		resp    proto.Message // stays a nil interface for member records
		changed bool
	)
	limits := cmd.GetLimits()
	switch c := cmd.GetCommand().(type) {
	case *metadpb.Command_Txn:
		r, ch, err := s.applyTxnLocked(c.Txn, limits)
		if err != nil {
			return nil, err
		}
		resp, changed = r, ch
	case *metadpb.Command_LeaseGrant:
		r, err := s.grantLeaseLocked(index, c.LeaseGrant, limits)
		if err != nil {
			return nil, err
		}
		resp, changed = r, true
	case *metadpb.Command_LeaseRevoke:
		r, err := s.revokeLeaseLocked(c.LeaseRevoke)
		if err != nil {
			return nil, err
		}
		resp, changed = r, true
	case *metadpb.Command_MemberInfo:
		ch, err := s.putMemberLocked(c.MemberInfo)
		if err != nil {
			return nil, err
		}
		changed = ch
	default:
		return nil, fmt.Errorf("%w: command has no operation", ErrInvalidCommand)
	}
	if changed {
		s.notifyLocked()
	}
	return resp, nil
}

// keyProblem describes what makes key invalid, or returns "" for a valid key.
func keyProblem(key string) string {
	switch {
	case key == "":
		return "empty key"
	case len(key) > MaxKeyBytes:
		return fmt.Sprintf("key is %d bytes, more than %d", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return "key is not valid UTF-8"
	}
	return ""
}

// validateTxnLocked checks the whole txn, compares and ops, before anything
// is applied, so that an invalid txn changes nothing whatever its compares
// say.
// REQUIRES: s.mu held.
func (s *Store) validateTxnLocked(txn *metadpb.TxnRequest) error {
	if txn == nil {
		return fmt.Errorf("%w: txn is nil", ErrInvalidCommand)
	}
	for i, c := range txn.Compares {
		if c == nil {
			return fmt.Errorf("%w: compare %d is nil", ErrInvalidCommand, i)
		}
		if p := keyProblem(c.Key); p != "" {
			return fmt.Errorf("%w: compare %d: %s", ErrInvalidKey, i, p)
		}
		if c.Version < 0 || c.ModRevision < 0 {
			return fmt.Errorf("%w: compare %d: version %d or mod revision %d is negative", ErrInvalidCommand, i, c.Version, c.ModRevision)
		}
	}
	for i, op := range txn.Ops {
		switch o := op.GetOp().(type) {
		case *metadpb.Op_Put:
			put := o.Put
			if put == nil {
				return fmt.Errorf("%w: op %d: put is nil", ErrInvalidCommand, i)
			}
			if p := keyProblem(put.Key); p != "" {
				return fmt.Errorf("%w: op %d put: %s", ErrInvalidKey, i, p)
			}
			if len(put.Value) > MaxValueBytes {
				return fmt.Errorf("%w: op %d put: value is %d bytes, more than %d",
					ErrValueTooLarge, i, len(put.Value), MaxValueBytes)
			}
			if put.Lease != 0 {
				if _, ok := s.mu.leases[put.Lease]; !ok {
					return fmt.Errorf("%w: op %d put: lease %d", ErrLeaseNotFound, i, put.Lease)
				}
			}
		case *metadpb.Op_Delete:
			del := o.Delete
			if del == nil {
				return fmt.Errorf("%w: op %d: delete is nil", ErrInvalidCommand, i)
			}
			// An empty prefix would delete everything; that is refused
			// rather than made easy.
			if p := keyProblem(del.Key); p != "" {
				return fmt.Errorf("%w: op %d delete: %s", ErrInvalidKey, i, p)
			}
		default:
			return fmt.Errorf("%w: op %d has no operation", ErrInvalidCommand, i)
		}
	}
	return nil
}

// applyTxnLocked validates and applies a txn and reports whether it changed
// the state.
// REQUIRES: s.mu held for writing.
func (s *Store) applyTxnLocked(txn *metadpb.TxnRequest, limits *metadpb.Limits) (*metadpb.TxnResponse, bool, error) {
	if err := s.validateTxnLocked(txn); err != nil {
		return nil, false, err
	}
	for _, c := range txn.Compares {
		if !s.compareHoldsLocked(c) {
			return s.failedTxnLocked(txn.Compares), false, nil
		}
	}
	if err := s.checkQuotaLocked(txn.Ops, limits); err != nil {
		return nil, false, err
	}

	// Every change of this txn carries the next revision; the revision is
	// only taken if there is a change.
	rev := s.mu.revision + 1
	var events []*metadpb.Event
	results := make([]*metadpb.OpResult, len(txn.Ops))
	for i, op := range txn.Ops {
		switch o := op.Op.(type) {
		case *metadpb.Op_Put:
			kv := s.putLocked(o.Put, rev)
			events = append(events, &metadpb.Event{Type: metadpb.Event_PUT, Kv: kv})
			results[i] = &metadpb.OpResult{Kv: copyKV(kv, false)}
		case *metadpb.Op_Delete:
			keys := s.keysToDeleteLocked(o.Delete)
			for _, key := range keys {
				events = append(events, s.deleteLocked(key, rev))
			}
			results[i] = &metadpb.OpResult{Deleted: int64(len(keys))}
		}
	}
	changed := s.recordLocked(rev, events)
	return &metadpb.TxnResponse{Succeeded: true, Revision: s.mu.revision, Results: results}, changed, nil
}

// failedTxnLocked is the response to a txn whose compares do not all hold:
// the present state of every compared key, in compare order.
// REQUIRES: s.mu held.
func (s *Store) failedTxnLocked(compares []*metadpb.Compare) *metadpb.TxnResponse {
	resp := &metadpb.TxnResponse{
		Revision: s.mu.revision,
		Current:  make([]*metadpb.KeyValue, len(compares)),
	}
	for i, c := range compares {
		if kv, ok := s.mu.kvs[c.Key]; ok {
			resp.Current[i] = copyKV(kv, false)
		} else {
			resp.Current[i] = &metadpb.KeyValue{Key: c.Key}
		}
	}
	return resp
}

// versionLocked returns key's version, 0 when absent.
// REQUIRES: s.mu held.
// compareHoldsLocked evaluates one compare: the version, and the mod
// revision when it is set.
// REQUIRES: s.mu held.
func (s *Store) compareHoldsLocked(c *metadpb.Compare) bool {
	if s.versionLocked(c.Key) != c.Version {
		return false
	}
	if c.ModRevision == 0 {
		return true
	}
	kv, ok := s.mu.kvs[c.Key]
	return ok && kv.ModRevision == c.ModRevision
}

func (s *Store) versionLocked(key string) int64 {
	if kv, ok := s.mu.kvs[key]; ok {
		return kv.Version
	}
	return 0
}

// recordLocked makes rev the store's revision and records its events in the
// history, if there are any; it reports whether it did.
// REQUIRES: s.mu held for writing.
func (s *Store) recordLocked(rev int64, events []*metadpb.Event) bool {
	if len(events) == 0 {
		return false
	}
	s.mu.revision = rev
	s.mu.history.append(&metadpb.WatchResponse{Events: events, Revision: rev})
	return true
}

// putLocked writes one validated put at revision rev and returns the stored
// KeyValue, which must not be modified.
// REQUIRES: s.mu held for writing.
func (s *Store) putLocked(put *metadpb.PutOp, rev int64) *metadpb.KeyValue {
	kv := &metadpb.KeyValue{
		Key:            put.Key,
		CreateRevision: rev,
		ModRevision:    rev,
		Version:        1,
		Lease:          put.Lease,
	}
	if len(put.Value) > 0 {
		kv.Value = bytes.Clone(put.Value)
	}
	s.mu.dataBytes += kvBytes(kv)
	if prev, ok := s.mu.kvs[put.Key]; ok {
		s.mu.dataBytes -= kvBytes(prev)
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
		if prev.Lease != put.Lease {
			s.detachLocked(prev)
		}
	} else {
		s.mu.index.insert(put.Key)
	}
	if put.Lease != 0 {
		s.mu.leases[put.Lease].keys[put.Key] = struct{}{}
	}
	s.mu.kvs[put.Key] = kv
	return kv
}

// keysToDeleteLocked returns the live keys a delete removes, in key order.
// REQUIRES: s.mu held.
func (s *Store) keysToDeleteLocked(del *metadpb.DeleteOp) []string {
	if !del.Prefix {
		if _, ok := s.mu.kvs[del.Key]; ok {
			return []string{del.Key}
		}
		return nil
	}
	var keys []string
	for key := range s.mu.index.ascend(del.Key) {
		if !strings.HasPrefix(key, del.Key) {
			break
		}
		keys = append(keys, key)
	}
	return keys
}

// deleteLocked removes a live key at revision rev and returns its event.
// REQUIRES: s.mu held for writing.
func (s *Store) deleteLocked(key string, rev int64) *metadpb.Event {
	s.mu.dataBytes -= kvBytes(s.mu.kvs[key])
	s.detachLocked(s.mu.kvs[key])
	delete(s.mu.kvs, key)
	s.mu.index.delete(key)
	return &metadpb.Event{
		Type: metadpb.Event_DELETE,
		Kv:   &metadpb.KeyValue{Key: key, ModRevision: rev},
	}
}

// detachLocked removes kv's key from the lease it is attached to, if any.
// REQUIRES: s.mu held for writing.
func (s *Store) detachLocked(kv *metadpb.KeyValue) {
	if l, ok := s.mu.leases[kv.Lease]; ok {
		delete(l.keys, kv.Key)
	}
}

// grantLeaseLocked creates a lease. Id 0 asks for the log index as the id,
// which is unique and the same on every replica. (The server proposes
// random ids instead, so that they cannot be enumerated.)
// REQUIRES: s.mu held for writing.
func (s *Store) grantLeaseLocked(index uint64, g *metadpb.LeaseGrantCommand, limits *metadpb.Limits) (*metadpb.LeaseGrantResponse, error) {
	if g == nil {
		return nil, fmt.Errorf("%w: lease grant is nil", ErrInvalidCommand)
	}
	if maxLeases := limits.GetMaxLeases(); maxLeases > 0 && int64(len(s.mu.leases)) >= maxLeases {
		return nil, fmt.Errorf("%w: %d leases granted, the most allowed", ErrQuotaExceeded, len(s.mu.leases))
	}
	id := g.Id
	if id == 0 {
		if index == 0 || index > math.MaxInt64 {
			return nil, fmt.Errorf("%w: lease grant: log index %d cannot be a lease id", ErrInvalidCommand, index)
		}
		id = int64(index)
	}
	if id < 0 {
		return nil, fmt.Errorf("%w: lease grant: id %d is negative", ErrInvalidCommand, id)
	}
	if g.TtlMs <= 0 {
		return nil, fmt.Errorf("%w: lease grant: ttl %d ms, want > 0", ErrInvalidCommand, g.TtlMs)
	}
	if _, ok := s.mu.leases[id]; ok {
		return nil, fmt.Errorf("%w: lease grant: lease %d already exists", ErrInvalidCommand, id)
	}
	s.mu.leases[id] = &lease{ttlMs: g.TtlMs, keys: make(map[string]struct{})}
	return &metadpb.LeaseGrantResponse{Id: id, TtlMs: g.TtlMs}, nil
}

// revokeLeaseLocked removes a lease and deletes its keys, in key order, at
// one new revision (none if it had no keys).
// REQUIRES: s.mu held for writing.
func (s *Store) revokeLeaseLocked(r *metadpb.LeaseRevokeCommand) (*metadpb.LeaseRevokeResponse, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: lease revoke is nil", ErrInvalidCommand)
	}
	l, ok := s.mu.leases[r.Id]
	if !ok {
		return nil, fmt.Errorf("%w: lease revoke: lease %d", ErrLeaseNotFound, r.Id)
	}
	rev := s.mu.revision + 1
	keys := slices.Sorted(maps.Keys(l.keys))
	events := make([]*metadpb.Event, 0, len(keys))
	for _, key := range keys {
		events = append(events, s.deleteLocked(key, rev))
	}
	s.recordLocked(rev, events)
	delete(s.mu.leases, r.Id)
	return &metadpb.LeaseRevokeResponse{Revision: s.mu.revision}, nil
}

// putMemberLocked upserts a member record, or deletes it when the client
// address is empty, and reports whether anything changed.
// REQUIRES: s.mu held for writing.
func (s *Store) putMemberLocked(m *metadpb.MemberInfo) (bool, error) {
	if m == nil {
		return false, fmt.Errorf("%w: member info is nil", ErrInvalidCommand)
	}
	if m.Id == "" {
		return false, fmt.Errorf("%w: member info has no id", ErrInvalidCommand)
	}
	prev, ok := s.mu.members[m.Id]
	if m.ClientAddress == "" {
		delete(s.mu.members, m.Id)
		return ok, nil
	}
	if ok && prev.ClientAddress == m.ClientAddress && prev.AdminAddress == m.AdminAddress {
		return false, nil
	}
	s.mu.members[m.Id] = copyMember(m)
	return true, nil
}

// checkQuotaLocked refuses ops that would grow the store past limits: a
// quota on keys or data bytes is enforced only against ops that increase
// that quantity, so deletes and shrinking puts always go through, even
// over a quota lowered since. The growth is exact (the ops are simulated
// in order, deletes credited), and depends only on the state and the
// command, so every replica decides alike.
// REQUIRES: s.mu held.
func (s *Store) checkQuotaLocked(ops []*metadpb.Op, limits *metadpb.Limits) error {
	maxKeys, maxBytes := limits.GetMaxKeys(), limits.GetMaxDataBytes()
	if maxKeys <= 0 && maxBytes <= 0 {
		return nil
	}
	// after maps a key this txn touched to its size after the ops so far,
	// -1 when deleted.
	after := map[string]int64{}
	size := func(key string) (int64, bool) {
		if n, ok := after[key]; ok {
			return n, n >= 0
		}
		if kv, ok := s.mu.kvs[key]; ok {
			return kvBytes(kv), true
		}
		return 0, false
	}
	var keys, data int64
	remove := func(key string) {
		if n, ok := size(key); ok {
			keys--
			data -= n
			after[key] = -1
		}
	}
	for _, op := range ops {
		switch o := op.Op.(type) {
		case *metadpb.Op_Put:
			n := int64(len(o.Put.Key) + len(o.Put.Value))
			old, had := size(o.Put.Key)
			if !had {
				keys++
			}
			data += n - old
			after[o.Put.Key] = n
		case *metadpb.Op_Delete:
			if !o.Delete.Prefix {
				remove(o.Delete.Key)
				continue
			}
			for _, key := range s.keysToDeleteLocked(o.Delete) {
				remove(key)
			}
			for key := range after { // keys this txn created under the prefix
				if strings.HasPrefix(key, o.Delete.Key) {
					remove(key)
				}
			}
		}
	}
	total := int64(len(s.mu.kvs))
	if maxKeys > 0 && keys > 0 && total+keys > maxKeys {
		return fmt.Errorf("%w: %d keys, and this write adds %d; the quota is %d keys",
			ErrQuotaExceeded, total, keys, maxKeys)
	}
	if maxBytes > 0 && data > 0 && s.mu.dataBytes+data > maxBytes {
		return fmt.Errorf("%w: %d bytes of keys and values, and this write adds %d; the quota is %d bytes",
			ErrQuotaExceeded, s.mu.dataBytes, data, maxBytes)
	}
	return nil
}
