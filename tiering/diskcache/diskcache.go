package diskcache

import (
	"cmp"
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/vfs"
)

// ErrCorrupt marks a chunk file that failed its checks (D2). Get never
// returns it: a corrupt file is a miss, counted in CorruptChunks.
// Marked (internal/corruption): corruption.Is holds for it and for
// every error that wraps it.
var ErrCorrupt = corruption.Mark(errors.New("diskcache: corrupt chunk file"))

const (
	magic       = "STRCHNK1"
	headerBytes = 8 + 4 + 8 + 8
	crcBytes    = 4
	chunkSuffix = ".chunk"
	tempSuffix  = ".tmp"
	// maxKeyBytes bounds the key a file may claim, so a damaged length
	// cannot make Get allocate much (object keys are at most 1024 bytes).
	maxKeyBytes = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Config configures a Cache.
type Config struct {
	// Dir holds the chunk files; it is created if missing and must be
	// used by one Cache at a time.
	Dir string
	// CapBytes bounds the files' total size (D1).
	CapBytes int64
}

// Validate reports what is wrong with c.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("diskcache: no directory")
	case c.CapBytes <= 0:
		return fmt.Errorf("diskcache: capacity %d bytes", c.CapBytes)
	}
	return nil
}

func (c Config) String() string { return fmt.Sprintf("dir=%s cap=%dB", c.Dir, c.CapBytes) }

// Metrics are a Cache's metrics. NewMetrics makes them; a nil *Metrics
// given to Open means unregistered ones.
type Metrics struct {
	// Hits and Misses count Gets; a corrupt file is a miss too.
	Hits, Misses prometheus.Counter
	// Bytes is the size of the files indexed. It moves by deltas.
	Bytes prometheus.Gauge
	// Evictions counts chunks removed to make room (D1).
	Evictions prometheus.Counter
	// CorruptChunks counts files that failed their checks and were
	// deleted (D2).
	CorruptChunks prometheus.Counter
	// WriteErrors counts Puts that failed (a full or broken disk); the
	// chunk is then simply not cached.
	WriteErrors prometheus.Counter
}

// NewMetrics creates the metrics, named strata_broker_tier_disk_cache_*,
// and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_broker_tier_disk_cache_" + name, Help: help})
	}
	m := &Metrics{
		Hits:          c("hits_total", "Object chunks read from the on-disk chunk cache."),
		Misses:        c("misses_total", "Object chunks looked up in the on-disk chunk cache and not found there (or found corrupt)."),
		Evictions:     c("evictions_total", "Chunks removed from the on-disk chunk cache to stay within its bound."),
		CorruptChunks: c("corrupt_total", "Chunk files of the on-disk cache that failed their checks and were deleted."),
		WriteErrors:   c("write_errors_total", "Chunks the on-disk cache failed to write."),
		Bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_broker_tier_disk_cache_bytes", Help: "Bytes of chunk files in the on-disk chunk cache."}),
	}
	if reg != nil {
		reg.MustRegister(m.Hits, m.Misses, m.Bytes, m.Evictions, m.CorruptChunks, m.WriteErrors)
	}
	return m
}

// id names a chunk: object key hash and chunk number.
type id struct {
	hash  string // hex(SHA-256(key))[:32]
	index int64
}

// entry is an indexed chunk file.
type entry struct {
	id   id
	gen  uint64
	size int64 // the whole file
	elem *list.Element
}

func (e *entry) name() string {
	return fmt.Sprintf("%s-%d-%d%s", e.id.hash, e.id.index, e.gen, chunkSuffix)
}

// Cache is an on-disk chunk cache; see the package documentation.
type Cache struct {
	fs  vfs.FS
	cfg Config
	m   *Metrics

	mu struct {
		sync.Mutex
		entries map[id]*entry
		lru     list.List // most recently used first
		bytes   int64
		nextGen uint64
	}
}

// Open indexes cfg.Dir (creating it if needed): it deletes temporary
// files and files it cannot name, keeps only the newest file of a chunk
// written more than once, and evicts the oldest files beyond
// cfg.CapBytes. It reads no file's contents.
func Open(fs vfs.FS, cfg Config, m *Metrics) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if err := fs.MkdirAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("diskcache: %w", err)
	}
	names, err := fs.List(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("diskcache: %w", err)
	}
	c := &Cache{fs: fs, cfg: cfg, m: m}
	c.mu.entries = make(map[id]*entry)
	var found []*entry
	var stale []string
	for _, n := range names {
		e, ok := parseName(n)
		if !ok {
			stale = append(stale, n)
			continue
		}
		info, err := fs.Stat(filepath.Join(cfg.Dir, n))
		if err != nil || info.IsDir() {
			stale = append(stale, n)
			continue
		}
		e.size = info.Size()
		found = append(found, e)
	}
	// Oldest first, so the newest of a chunk's files wins and the LRU
	// ends up with the newest in front.
	sortByGen(found)
	for _, e := range found {
		c.mu.nextGen = max(c.mu.nextGen, e.gen+1)
		if old := c.mu.entries[e.id]; old != nil {
			c.unlinkLocked(old)
			stale = append(stale, old.name())
		}
		c.linkLocked(e)
	}
	stale = append(stale, c.evictLocked(0)...)
	c.removeFiles(stale)
	return c, nil
}

// parseName parses "<hash>-<index>-<gen>.chunk".
func parseName(n string) (*entry, bool) {
	base, ok := strings.CutSuffix(n, chunkSuffix)
	if !ok {
		return nil, false
	}
	parts := strings.Split(base, "-")
	if len(parts) != 3 || len(parts[0]) != 32 {
		return nil, false
	}
	if _, err := hex.DecodeString(parts[0]); err != nil {
		return nil, false
	}
	index, err1 := strconv.ParseInt(parts[1], 10, 64)
	gen, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || index < 0 {
		return nil, false
	}
	return &entry{id: id{parts[0], index}, gen: gen}, true
}

func sortByGen(es []*entry) {
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.gen, b.gen) })
}

func chunkID(key string, index int64) id {
	sum := sha256.Sum256([]byte(key))
	return id{hex.EncodeToString(sum[:16]), index}
}

func (c *Cache) String() string { return c.cfg.String() }

// Bytes is the size of the files indexed.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.bytes
}

// Len is the number of chunks indexed.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.entries)
}

// Get returns chunk index of key if the cache holds it with exactly size
// bytes of data and it passes its checks (D2); a file that fails them is
// deleted. The slice is the caller's.
func (c *Cache) Get(key string, index, size int64) ([]byte, bool) {
	cid := chunkID(key, index)
	c.mu.Lock()
	e := c.mu.entries[cid]
	if e != nil {
		c.mu.lru.MoveToFront(e.elem)
	}
	c.mu.Unlock()
	if e == nil {
		c.m.Misses.Inc()
		return nil, false
	}
	data, err := c.read(e, key, index, size)
	if err == nil {
		c.m.Hits.Inc()
		return data, true
	}
	// Gone meanwhile (evicted, or removed by hand) is a plain miss; any
	// other failure is a file not to trust.
	c.m.Misses.Inc()
	if corruption.Is(err) {
		c.m.CorruptChunks.Inc()
	}
	if c.drop(e) {
		c.removeFiles([]string{e.name()})
	}
	return nil, false
}

// read reads and checks e's file.
func (c *Cache) read(e *entry, key string, index, size int64) ([]byte, error) {
	want := headerBytes + int64(len(key)) + size + crcBytes
	if e.size != want {
		return nil, fmt.Errorf("%w: %s has %d bytes, a %d-byte chunk of this key needs %d", ErrCorrupt, e.name(), e.size, size, want)
	}
	f, err := c.fs.Open(filepath.Join(c.cfg.Dir, e.name()))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, want)
	if n, err := f.ReadAt(buf, 0); n != len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s ended after %d of %d bytes", ErrCorrupt, e.name(), n, len(buf))
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, e.name(), err)
	}
	return check(buf, key, index, size)
}

// check parses a whole chunk file and returns its data.
func check(buf []byte, key string, index, size int64) ([]byte, error) {
	if len(buf) < headerBytes+crcBytes || string(buf[:8]) != magic {
		return nil, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	keyLen := int64(binary.LittleEndian.Uint32(buf[8:]))
	gotIndex := int64(binary.LittleEndian.Uint64(buf[12:]))
	dataLen := int64(binary.LittleEndian.Uint64(buf[20:]))
	if keyLen != int64(len(key)) || dataLen != size || headerBytes+keyLen+dataLen+crcBytes != int64(len(buf)) {
		return nil, fmt.Errorf("%w: lengths (key %d, data %d) do not fit the file or the chunk asked for", ErrCorrupt, keyLen, dataLen)
	}
	body := buf[:len(buf)-crcBytes]
	if got, stored := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(buf[len(body):]); got != stored {
		return nil, fmt.Errorf("%w: crc 0x%08x, stored 0x%08x", ErrCorrupt, got, stored)
	}
	// After the CRC: a file of another key or chunk is consistent but
	// not this one (D4).
	if string(buf[headerBytes:headerBytes+keyLen]) != key || gotIndex != index {
		return nil, fmt.Errorf("%w: holds chunk %d of another object", ErrCorrupt, gotIndex)
	}
	return buf[headerBytes+keyLen : headerBytes+keyLen+dataLen : headerBytes+keyLen+dataLen], nil
}

// Put stores data as chunk index of key, replacing any copy, evicting the
// least recently used chunks beyond the bound. A chunk larger than the
// bound is not stored. A failed write is counted and returned; the cache
// stays consistent.
func (c *Cache) Put(key string, index int64, data []byte) error {
	if len(key) > maxKeyBytes {
		return fmt.Errorf("diskcache: key of %d bytes", len(key))
	}
	size := int64(headerBytes + len(key) + len(data) + crcBytes)
	if size > c.cfg.CapBytes {
		return nil
	}
	c.mu.Lock()
	e := &entry{id: chunkID(key, index), gen: c.mu.nextGen, size: size}
	c.mu.nextGen++
	c.mu.Unlock()

	final := filepath.Join(c.cfg.Dir, e.name())
	tmp := final + tempSuffix
	if err := c.write(tmp, key, index, data); err != nil {
		c.m.WriteErrors.Inc()
		_ = c.fs.Remove(tmp)
		return fmt.Errorf("diskcache: writing chunk %d of %s: %w", index, key, err)
	}
	// Room first, then the file: the bound holds for every file indexed.
	c.mu.Lock()
	victims := c.evictLocked(size)
	c.mu.Unlock()
	c.removeFiles(victims)
	if err := c.fs.Rename(tmp, final); err != nil {
		c.m.WriteErrors.Inc()
		_ = c.fs.Remove(tmp)
		return fmt.Errorf("diskcache: writing chunk %d of %s: %w", index, key, err)
	}
	c.mu.Lock()
	var replaced []string
	if old := c.mu.entries[e.id]; old != nil {
		c.unlinkLocked(old)
		replaced = append(replaced, old.name())
	}
	c.linkLocked(e)
	// Another Put may have taken the room meanwhile.
	replaced = append(replaced, c.evictLocked(0)...)
	c.mu.Unlock()
	c.removeFiles(replaced)
	return nil
}

// write writes a whole chunk file at name.
func (c *Cache) write(name, key string, index int64, data []byte) (err error) {
	f, err := c.fs.Create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	hdr := make([]byte, headerBytes, headerBytes+len(key))
	copy(hdr, magic)
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(key)))
	binary.LittleEndian.PutUint64(hdr[12:], uint64(index))
	binary.LittleEndian.PutUint64(hdr[20:], uint64(len(data)))
	hdr = append(hdr, key...)
	crc := crc32.Update(crc32.Checksum(hdr, castagnoli), castagnoli, data)
	var trailer [crcBytes]byte
	binary.LittleEndian.PutUint32(trailer[:], crc)
	for _, b := range [][]byte{hdr, data, trailer[:]} {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// Remove forgets chunk index of key and deletes its file: the caller
// found its bytes wrong (a damaged object cached faithfully, or damage
// in transit) and must download them again.
func (c *Cache) Remove(key string, index int64) {
	cid := chunkID(key, index)
	c.mu.Lock()
	e := c.mu.entries[cid]
	if e != nil {
		c.unlinkLocked(e)
	}
	c.mu.Unlock()
	if e != nil {
		c.removeFiles([]string{e.name()})
	}
}

// drop unlinks e if it is still indexed; it reports whether it was.
func (c *Cache) drop(e *entry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.entries[e.id] != e {
		return false
	}
	c.unlinkLocked(e)
	return true
}

// evictLocked unlinks the least recently used chunks until need more
// bytes fit within the bound, and returns their file names to remove.
//
// REQUIRES: c.mu held.
func (c *Cache) evictLocked(need int64) []string {
	var victims []string
	for c.mu.bytes+need > c.cfg.CapBytes && c.mu.lru.Len() > 0 {
		e := c.mu.lru.Back().Value.(*entry)
		c.unlinkLocked(e)
		victims = append(victims, e.name())
		c.m.Evictions.Inc()
	}
	return victims
}

// REQUIRES: c.mu held.
func (c *Cache) linkLocked(e *entry) {
	e.elem = c.mu.lru.PushFront(e)
	c.mu.entries[e.id] = e
	c.mu.bytes += e.size
	c.m.Bytes.Add(float64(e.size))
}

// REQUIRES: c.mu held; e indexed.
func (c *Cache) unlinkLocked(e *entry) {
	c.mu.lru.Remove(e.elem)
	delete(c.mu.entries, e.id)
	c.mu.bytes -= e.size
	c.m.Bytes.Add(-float64(e.size))
}

// removeFiles deletes files of the directory; failures are ignored (a
// file left behind is unindexed: Open deletes or re-indexes it).
func (c *Cache) removeFiles(names []string) {
	for _, n := range names {
		_ = c.fs.Remove(filepath.Join(c.cfg.Dir, n))
	}
}
