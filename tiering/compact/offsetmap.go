package compact

import (
	"crypto/sha256"
	"encoding/binary"
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

// keyHash is the first 16 bytes of a key's SHA-256, as two words. Two keys
// with the same 128-bit prefix collide: the older one's latest record is
// then taken for superseded and dropped. The chance for n keys is about
// n²/2^129 (1e-25 for 10 million keys): the accepted risk Kafka takes
// with MD5 and Redpanda with SHA-256.
type keyHash struct{ hi, lo uint64 }

func hashKey(key []byte) keyHash {
	sum := sha256.Sum256(key)
	return keyHash{binary.BigEndian.Uint64(sum[0:8]), binary.BigEndian.Uint64(sum[8:16])}
}

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
	slots   []slot
	n       int // keys stored
	maxKeys int // load factor limit
}

// NewOffsetMap returns an empty map using about budgetBytes of memory
// (KeysPerMiB keys per MiB). It holds at least one key whatever the
// budget.
func NewOffsetMap(budgetBytes int) *OffsetMap {
	nSlots := max(budgetBytes/slotBytes, 2)
	return &OffsetMap{
		slots:   make([]slot, nSlots),
		maxKeys: max(nSlots*loadNumerator/loadDenominator, 1),
	}
}

// Len is the number of keys stored.
func (m *OffsetMap) Len() int { return m.n }

// Capacity is the number of keys the map holds before Put reports full.
func (m *OffsetMap) Capacity() int { return m.maxKeys }

// Room is Capacity - Len: how many new keys still fit.
func (m *OffsetMap) Room() int { return m.maxKeys - m.n }

// Reset empties the map, keeping its memory.
func (m *OffsetMap) Reset() {
	clear(m.slots)
	m.n = 0
}

// Put records offset as the latest offset of key. It keeps the larger
// offset if the key is already there (a pass feeds offsets in order, so
// this is the newer one). It returns false, storing nothing, when key is
// new and the map is full.
func (m *OffsetMap) Put(key []byte, offset int64) bool {
	return m.put(hashKey(key), offset)
}

// Get returns the latest offset recorded for key.
func (m *OffsetMap) Get(key []byte) (int64, bool) {
	return m.get(hashKey(key))
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
