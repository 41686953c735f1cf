package broker

import (
	"strings"

	"github.com/strata-log/strata/proto/metadpb"
)

// recordMap holds a mirror's records decoded by key (a partition's, a
// topic's), and keeps them current from the mirror's changes
// (mirror.delta) between a loop's rounds: a round decodes and visits only
// the records that changed since the last one. A failover changes one
// assignment and one owner record per partition taken over, and the
// controller and every owner go on rounding while it lasts; walking (and
// copying) every record of the cluster in each round made those rounds
// O(cluster). Not safe for concurrent use.
type recordMap[K comparable, T any] struct {
	// parse names a record's key; false leaves the record out (a key that
	// names nothing).
	parse func(key string) (K, bool)
	// decode turns a record into its value; false leaves it out of vals.
	decode func(kv *metadpb.KeyValue) (T, bool)
	vals   map[K]T
	cursor mirrorCursor
}

func newRecordMap[K comparable, T any](parse func(string) (K, bool), decode func(*metadpb.KeyValue) (T, bool)) *recordMap[K, T] {
	return &recordMap[K, T]{parse: parse, decode: decode, vals: map[K]T{}}
}

// newPartitionMap is a recordMap of the per-partition records under prefix.
func newPartitionMap[T any](prefix string, decode func(*metadpb.KeyValue) (T, bool)) *recordMap[tp, T] {
	return newRecordMap(func(key string) (tp, bool) {
		k, err := parseTP(strings.TrimPrefix(key, prefix))
		return k, err == nil
	}, decode)
}

// update brings vals up to date with m and returns the keys whose record
// changed since the last update, and a channel closed at m's next change.
// full reports that m was read whole (the first update, a listing since,
// an update more than maxMirrorJournal changes behind, or forceFull):
// touched then names every key vals holds, and not the ones it dropped.
func (r *recordMap[K, T]) update(m *mirror, forceFull bool) (touched map[K]bool, full bool, changed <-chan struct{}) {
	keys, next, all, changed := m.delta(r.cursor)
	r.cursor = next
	touched = map[K]bool{}
	if all || forceFull {
		// A change after delta is read here and again by the next
		// update: deciding it twice is harmless.
		clear(r.vals)
		m.each(func(kv *metadpb.KeyValue) {
			if k, ok := r.parse(kv.Key); ok {
				if v, ok := r.decode(kv); ok {
					r.vals[k] = v
					touched[k] = true
				}
			}
		})
		return touched, true, changed
	}
	for _, key := range keys {
		k, ok := r.parse(key)
		if !ok {
			continue
		}
		touched[k] = true
		delete(r.vals, k)
		if kv := m.get(key); kv != nil {
			if v, ok := r.decode(kv); ok {
				r.vals[k] = v
			}
		}
	}
	return touched, false, changed
}
