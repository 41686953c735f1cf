package broker

import "github.com/strata-log/strata/proto/metadpb"

// decodeCache remembers what a mirror's records decoded to, by key and mod
// revision, so that a round over a large cluster decodes only the records
// that changed since the last round: a failover changes one owner record
// per partition taken over, and the controller rounds through all of them
// while it goes on. Not safe for concurrent use.
type decodeCache[T any] struct {
	decode  func(kv *metadpb.KeyValue) (T, bool)
	entries map[string]decodeEntry[T]
}

type decodeEntry[T any] struct {
	rev int64
	val T
	ok  bool
}

func newDecodeCache[T any](decode func(kv *metadpb.KeyValue) (T, bool)) *decodeCache[T] {
	return &decodeCache[T]{decode: decode, entries: map[string]decodeEntry[T]{}}
}

// each calls fn with every record of snap that decodes, and forgets the
// keys snap no longer holds.
func (c *decodeCache[T]) each(snap map[string]*metadpb.KeyValue, fn func(v T)) {
	for key, kv := range snap {
		e, hit := c.entries[key]
		if !hit || e.rev != kv.ModRevision {
			e.rev = kv.ModRevision
			e.val, e.ok = c.decode(kv)
			c.entries[key] = e
		}
		if e.ok {
			fn(e.val)
		}
	}
	if len(c.entries) > len(snap) {
		for key := range c.entries {
			if _, ok := snap[key]; !ok {
				delete(c.entries, key)
			}
		}
	}
}
