package compact

import (
	"hash/maphash"
	"math/bits"
)

// slotBytes is the memory of one OffsetMap slot: a 16-byte key hash and an
// 8-byte offset, as in Kafka's cleaner (MD5 + offset).
const slotBytes = 24

// Load factor limit: at most loadNumerator/loadDenominator of the slots
// hold keys. Linear probing at 0.8 costs about 13 slots per miss and 3 per
// hit on average; Kafka's 0.9 would cost about 50 per miss, and a miss is
// what every new key in the dirty range pays.
const (
	loadNumerator   = 4
	loadDenominator = 5
)

// KeysPerMiB is how many distinct keys an OffsetMap holds per MiB of
// budget: 1 MiB / 24 bytes a slot = 43,690 slots, 80% usable.
const KeysPerMiB = (1 << 20) / slotBytes * loadNumerator / loadDenominator

// keyHash is a key's 128-bit hash: two 64-bit maphash sums under the
// map's two random seeds. Two keys with the same hash collide: the older
// one's latest record is then taken for superseded and dropped. The
// chance for n keys is about n²/2^129 (1e-25 for 10 million keys): the
// accepted risk Kafka takes with MD5 and Redpanda with SHA-256. The seeds
// are random per map, so a producer cannot choose keys that collide (and
// one that may write to the topic can delete any key anyway); SHA-256
// cost 40% of a pass over small records for no further guarantee.
type keyHash struct{ hi, lo uint64 }

// slot is one entry; offsetPlusOne 0 marks it empty, so that the zero
// value of the slice is an empty table and offset 0 is storable.
type slot struct {
	hash          keyHash
	offsetPlusOne int64
}

// OffsetMap maps a key (by its 128-bit hash) to the offset of the latest
// record with that key. Its memory is fixed at construction: one
// preallocated open-addressing table (linear probing) sized from a byte
// budget. When the load factor limit is reached Put refuses new keys, so
// that a compaction pass can stop at what it indexed and leave the rest
// to the next pass. Not safe for concurrent use.
type OffsetMap struct {
	seeds   [2]maphash.Seed
	slots   []slot
	n       int // keys stored
	maxKeys int // load factor limit
	// used lists the slots filled since the last Reset while they are few
	// (at most cap(used) = len(slots)/usedFraction; manyUsed once more
	// were), so that Reset of a map holding a few keys clears those, not
	// all of its memory (which a pass would otherwise also fault in).
	used     []int
	manyUsed bool
}

// usedFraction: Reset clears slot by slot while at most 1/usedFraction of
// the slots were filled.
const usedFraction = 64

// NewOffsetMap returns an empty map using about budgetBytes of memory
// (KeysPerMiB keys per MiB). It holds at least one key whatever the
// budget.
func NewOffsetMap(budgetBytes int) *OffsetMap {
	nSlots := max(budgetBytes/slotBytes, 2)
	return &OffsetMap{
		seeds:   [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		slots:   make([]slot, nSlots),
		maxKeys: max(nSlots*loadNumerator/loadDenominator, 1),
		used:    make([]int, 0, nSlots/usedFraction),
	}
}

// Len is the number of keys stored.
func (m *OffsetMap) Len() int { return m.n }

// Capacity is the number of keys the map holds before Put reports full.
func (m *OffsetMap) Capacity() int { return m.maxKeys }

// Room is Capacity - Len: how many new keys still fit.
func (m *OffsetMap) Room() int { return m.maxKeys - m.n }

// Reset empties the map, keeping its memory (an empty map is left
// alone: clearing a large table costs a pass more than its small dirty
// range).
func (m *OffsetMap) Reset() {
	switch {
	case m.n == 0:
		return
	case !m.manyUsed:
		for _, i := range m.used {
			m.slots[i] = slot{}
		}
	default:
		clear(m.slots)
	}
	m.n = 0
	m.used, m.manyUsed = m.used[:0], false
}

// hash is key's keyHash under m's seeds.
func (m *OffsetMap) hash(key []byte) keyHash {
	return keyHash{maphash.Bytes(m.seeds[0], key), maphash.Bytes(m.seeds[1], key)}
}

// Put records offset as the latest offset of key. It keeps the larger
// offset if the key is already there (a pass feeds offsets in order, so
// this is the newer one). It returns false, storing nothing, when key is
// new and the map is full.
func (m *OffsetMap) Put(key []byte, offset int64) bool {
	return m.put(m.hash(key), offset)
}

// Get returns the latest offset recorded for key.
func (m *OffsetMap) Get(key []byte) (int64, bool) {
	return m.get(m.hash(key))
}

// home is the first slot probed for h: the high word scaled onto the
// table (Lemire's multiply-shift), so the table needs no power-of-two size
// and the whole budget is used.
func (m *OffsetMap) home(h keyHash) int {
	i, _ := bits.Mul64(h.hi, uint64(len(m.slots)))
	return int(i)
}

func (m *OffsetMap) put(h keyHash, offset int64) bool {
	for i := m.home(h); ; {
		s := &m.slots[i]
		if s.offsetPlusOne == 0 {
			if m.n >= m.maxKeys {
				return false
			}
			*s = slot{hash: h, offsetPlusOne: offset + 1}
			m.n++
			if len(m.used) < cap(m.used) {
				m.used = append(m.used, i)
			} else {
				m.manyUsed = true // Reset clears everything
			}
			return true
		}
		if s.hash == h {
			s.offsetPlusOne = max(s.offsetPlusOne, offset+1)
			return true
		}
		// The load limit keeps an empty slot, so the probe ends.
		if i++; i == len(m.slots) {
			i = 0
		}
	}
}

func (m *OffsetMap) get(h keyHash) (int64, bool) {
	for i := m.home(h); ; {
		s := &m.slots[i]
		if s.offsetPlusOne == 0 {
			return 0, false
		}
		if s.hash == h {
			return s.offsetPlusOne - 1, true
		}
		if i++; i == len(m.slots) {
			i = 0
		}
	}
}
