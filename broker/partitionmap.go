package broker

import (
	"strings"

	"github.com/strata-log/strata/proto/metadpb"
)

// partitionMap holds a mirror's per-partition records decoded, and keeps
// them current from the mirror's changes (mirror.delta) between a loop's
// rounds: a round decodes and visits only the records that changed since
// the last one. A failover changes one assignment and one owner record
// per partition taken over, and the controller and every owner go on
// rounding while it lasts; walking (and copying) every record of the
// cluster in each round made those rounds O(cluster). Not safe for
// concurrent use.
type partitionMap[T any] struct {
	prefix string
	// decode turns a record into its partition's value; false leaves it
	// out of vals.
	decode func(kv *metadpb.KeyValue) (keyed[T], bool)
	vals   map[tp]T
	cursor mirrorCursor
}

// keyed is a partition's decoded record.
type keyed[T any] struct {
	tp tp
	v  T
}

func newPartitionMap[T any](prefix string, decode func(kv *metadpb.KeyValue) (keyed[T], bool)) *partitionMap[T] {
	return &partitionMap[T]{prefix: prefix, decode: decode, vals: map[tp]T{}}
}

// update brings vals up to date with m and returns the partitions whose
// record changed since the last update, and a channel closed at m's next
// change. full reports that m was read whole (the first update, a listing
// since, an update more than maxMirrorJournal changes behind, or
// forceFull): touched then names every partition vals holds.
func (p *partitionMap[T]) update(m *mirror, forceFull bool) (touched map[tp]bool, full bool, changed <-chan struct{}) {
	keys, next, all, changed := m.delta(p.cursor)
	p.cursor = next
	touched = map[tp]bool{}
	if all || forceFull {
		// A change after delta is read here and again by the next
		// update: deciding it twice is harmless.
		clear(p.vals)
		m.each(func(kv *metadpb.KeyValue) {
			if v, ok := p.decode(kv); ok {
				p.vals[v.tp] = v.v
				touched[v.tp] = true
			}
		})
		return touched, true, changed
	}
	for _, key := range keys {
		k, err := parseTP(strings.TrimPrefix(key, p.prefix))
		if err != nil {
			continue
		}
		touched[k] = true
		delete(p.vals, k)
		if kv := m.get(key); kv != nil {
			if v, ok := p.decode(kv); ok {
				p.vals[v.tp] = v.v
			}
		}
	}
	return touched, false, changed
}
