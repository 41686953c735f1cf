// Package diskcache is the tier reader's bounded on-disk cache of object
// chunks: the level under tiering's in-memory chunk cache, so that a
// consumer replaying history that no longer fits in memory, or a broker
// that restarted, reads its chunks from local disk instead of the object
// store.
//
// A Cache is an index over one directory, of chunk files named by the
// object key and chunk number they hold. Get reads and checks one whole
// chunk; Put writes one; Remove forgets one. The caller (tiering.Reader)
// decides what goes in: every chunk it downloads.
//
// # Invariants
//
//   - D1 Bounded. The files the index holds total at most CapBytes (their
//     whole size, header and trailer included). Put evicts the least
//     recently used chunks (Get and Put count as uses) to make room, and
//     a chunk larger than the bound is not stored. Open evicts down to
//     the bound too, so lowering it takes effect at the next start.
//   - D2 Never serve damage. Get returns a chunk only if its file has the
//     expected length, names the same object key and chunk number that
//     was asked for, and its CRC-32C matches. Anything else (a truncated
//     file, a flipped bit, a file of another chunk) is a miss: the file is
//     deleted and counted in CorruptChunks, and the caller downloads the
//     chunk again.
//   - D3 Atomic. A chunk is written to a temporary file which is renamed
//     into place once complete, so a reader never sees a file being
//     written; a crash leaves at most a temporary file, deleted by Open.
//     Files are not fsynced (a cache loses nothing that cannot be
//     downloaded again): after a power loss a renamed file may be short or
//     zeroed, which D2 catches.
//   - D4 No aliasing. Object keys are never reused (tiering T2), and a
//     file holds the full key it was written for, so a chunk of one
//     object is never served for another, even when two keys hash alike.
//   - D5 Survives restarts. Open re-indexes the directory from its file
//     names and sizes, without reading the files (D2 checks each on its
//     first Get); their recency is the order they were written in (their
//     generation numbers), oldest evicted first.
//
// # Files
//
// A chunk of object key K, chunk number I lives in
//
//	<dir>/<hex(SHA-256(K))[:32]>-<I>-<G>.chunk
//
// where G is a generation number unique within the directory (so a chunk
// written again never renames over a file a concurrent Get or an eviction
// is using). Temporary files end in ".tmp". Everything is little-endian:
//
//	magic    [8]byte  "STRCHNK1"
//	keyLen   uint32   bytes of the object key
//	index    uint64   chunk number I
//	dataLen  uint64   bytes of chunk data
//	key      [keyLen]byte
//	data     [dataLen]byte
//	crc      uint32   CRC-32C (Castagnoli) of everything before it
//
// # Concurrency
//
// A Cache is safe for concurrent use. File I/O never runs under its mutex:
// the index is updated before (eviction) or after (publication) the
// reads, writes and removals it decides. A Get racing the eviction of its
// file either reads it whole (an open file outlives its name) or misses.
// Concurrent Gets of one chunk each read the file; the tier reader's
// single-flight above makes that rare.
package diskcache
