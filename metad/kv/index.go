package kv

import (
	"iter"
	"slices"
	"sort"
)

// maxChunkKeys bounds one chunk of a keyIndex. Inserting or deleting a key
// moves at most this many strings, and finding a chunk is a binary search
// over len(keys)/(maxChunkKeys/2) chunks or fewer, so with a million keys
// an update touches a few KB instead of the 16 MB a single sorted slice would
// move.
const maxChunkKeys = 512

// keyIndex is the set of live keys in byte order: a sorted list of sorted
// chunks. It is the ordered twin of the Store's key map, used for prefix
// listing and prefix deletes.
//
// Invariants: every chunk is non-empty and at most maxChunkKeys long; keys
// are strictly increasing within a chunk and from the last key of one chunk
// to the first key of the next; count is the total number of keys.
type keyIndex struct {
	chunks [][]string
	count  int
}

// newKeyIndex builds an index from keys, which must be sorted and free of
// duplicates.
func newKeyIndex(sortedKeys []string) keyIndex {
	const fill = maxChunkKeys * 3 / 4 // leave room to grow before splitting
	var x keyIndex
	for len(sortedKeys) > 0 {
		n := min(fill, len(sortedKeys))
		chunk := make([]string, n, maxChunkKeys+1)
		copy(chunk, sortedKeys[:n])
		x.chunks = append(x.chunks, chunk)
		sortedKeys = sortedKeys[n:]
	}
	for _, c := range x.chunks {
		x.count += len(c)
	}
	return x
}

func (x *keyIndex) len() int { return x.count }

// chunkFor returns the index of the first chunk whose last key is >= key:
// the chunk that holds key, or where it belongs. It returns len(x.chunks)
// when key is greater than every key in the index.
func (x *keyIndex) chunkFor(key string) int {
	return sort.Search(len(x.chunks), func(i int) bool {
		c := x.chunks[i]
		return c[len(c)-1] >= key
	})
}

// insert adds key and reports whether it was absent.
func (x *keyIndex) insert(key string) bool {
	if len(x.chunks) == 0 {
		chunk := make([]string, 1, maxChunkKeys+1)
		chunk[0] = key
		x.chunks = append(x.chunks, chunk)
		x.count = 1
		return true
	}
	ci := x.chunkFor(key)
	if ci == len(x.chunks) {
		ci-- // greater than every key: append to the last chunk
	}
	c := x.chunks[ci]
	i, found := slices.BinarySearch(c, key)
	if found {
		return false
	}
	c = slices.Insert(c, i, key)
	x.count++
	if len(c) <= maxChunkKeys {
		x.chunks[ci] = c
		return true
	}
	half := len(c) / 2
	right := make([]string, len(c)-half, maxChunkKeys+1)
	copy(right, c[half:])
	clear(c[half:]) // drop references so deleted keys can be collected
	x.chunks[ci] = c[:half]
	x.chunks = slices.Insert(x.chunks, ci+1, right)
	return true
}

// delete removes key and reports whether it was present.
func (x *keyIndex) delete(key string) bool {
	ci := x.chunkFor(key)
	if ci == len(x.chunks) {
		return false
	}
	c := x.chunks[ci]
	i, found := slices.BinarySearch(c, key)
	if !found {
		return false
	}
	c = slices.Delete(c, i, i+1)
	x.count--
	if len(c) == 0 {
		x.chunks = slices.Delete(x.chunks, ci, ci+1)
		return true
	}
	x.chunks[ci] = c
	// Merge a thinned-out chunk into a neighbour so that heavy deletes do
	// not leave a long list of tiny chunks behind.
	if len(c) < maxChunkKeys/4 {
		switch {
		case ci+1 < len(x.chunks) && len(c)+len(x.chunks[ci+1]) <= maxChunkKeys:
			x.mergeNext(ci)
		case ci > 0 && len(c)+len(x.chunks[ci-1]) <= maxChunkKeys:
			x.mergeNext(ci - 1)
		}
	}
	return true
}

// mergeNext appends chunk ci+1 to chunk ci and removes chunk ci+1.
func (x *keyIndex) mergeNext(ci int) {
	x.chunks[ci] = append(x.chunks[ci], x.chunks[ci+1]...)
	x.chunks = slices.Delete(x.chunks, ci+1, ci+2)
}

// ascend yields the keys >= start in increasing order. The index must not
// change while the sequence is being iterated.
func (x *keyIndex) ascend(start string) iter.Seq[string] {
	return func(yield func(string) bool) {
		ci := x.chunkFor(start)
		if ci == len(x.chunks) {
			return
		}
		i, _ := slices.BinarySearch(x.chunks[ci], start)
		for ; ci < len(x.chunks); ci, i = ci+1, 0 {
			for _, key := range x.chunks[ci][i:] {
				if !yield(key) {
					return
				}
			}
		}
	}
}
