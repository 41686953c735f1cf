package journal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/strata-log/strata/internal/bufpool"
	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/internal/logging"
	"github.com/strata-log/strata/vfs"
)

// Location is where a record is: file sequence number, byte offset, and the
// length of the whole record including its header.
type Location struct {
	File   uint64
	Offset int64
	Length uint32
}

// Position is a point in the journal: a file and an offset in it. The zero
// Position is the beginning of the journal.
type Position struct {
	File   uint64
	Offset int64
}

// FileInfo describes one journal file.
type FileInfo struct {
	Seq  uint64
	Size int64 // for the file being written, its durable size
}

// pending is a record accepted by Append and not yet completed.
type pending struct {
	rec  Record
	size int // encoded bytes
	done Waiter
}

// Waiter is told the outcome of an appended record (AppendWaiter).
type Waiter interface {
	// Journaled is called once, from the writer goroutine, with where
	// the record is once it and every record before it are durable (err
	// nil), or with an error wrapping ErrFailed. It must not block.
	Journaled(loc Location, err error)
}

// doneFunc is Append's done callback as a Waiter.
type doneFunc func(Location, error)

func (f doneFunc) Journaled(loc Location, err error) { f(loc, err) }

// Journal is the bookie's append-only journal. See doc.go.
type Journal struct {
	opts   Options // with defaults
	logger *slog.Logger

	// nextSeq is the sequence number of the next file Replay creates. Only
	// Open and Replay use it, and Replay runs once at a time.
	nextSeq uint64

	mu struct {
		sync.Mutex
		// cond wakes the writer when the queue becomes non-empty or the
		// journal is closing.
		cond       sync.Cond
		queue      []pending
		queueBytes int64 // encoded bytes accepted and not yet completed
		// spaceFreed is closed (and replaced) when queue space frees or the
		// journal's state changes while Appends wait (waiters > 0).
		spaceFreed chan struct{}
		waiters    int
		replaying  bool
		replayed   bool
		closing    bool
		failErr    error            // non-nil once the journal failed; wraps ErrFailed
		files      map[uint64]int64 // every file: seq → size
		current    uint64           // file being written; 0 before Replay
		durable    int64            // bytes of current that are synced
		direct     bool             // current is written with direct I/O
	}

	// w is owned by the writer goroutine once Replay has set it up; before
	// that (and after the writer exits) by Replay and Close.
	w writer
	// slow limits the lines about slow groups.
	slow logging.Limiter

	readers struct {
		// Read holds the read lock while it reads through a handle, so
		// removing a file (write lock) never closes a handle in use.
		sync.RWMutex
		files map[uint64]readHandle // nil once closed
	}
	directReadsRefused atomic.Bool // a direct read failed with EINVAL: read buffered

	writerDone chan struct{}
	fatalOnce  sync.Once
}

// writer is the writer goroutine's state.
type writer struct {
	f           vfs.File
	seq         uint64
	off         int64     // end of the last durable group in f
	preallocEnd int64     // bytes of f reserved by Preallocate
	buf         []byte    // the group being encoded; vfs.DirectAlign-aligned
	batch       []pending // taken from the queue, being written in groups
	next        int       // first record of batch not yet in a group
	// directRefused is set once a direct write was refused (EINVAL): later
	// files are created for buffered writes without trying again.
	directRefused bool
}

// Open opens (creating if needed) the journal in opts.Dir. It checks every
// file's header, so a file from elsewhere is refused, but does not read
// records: call Replay, which must complete before the first Append. New
// records always go to a new file after the last existing one.
func Open(opts Options) (*Journal, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	j := &Journal{
		opts:       opts,
		logger:     opts.Logger.With("component", "journal", "dir", opts.Dir),
		writerDone: make(chan struct{}),
		slow:       logging.Limiter{Every: slowGroupLogEvery},
	}
	j.mu.cond.L = &j.mu.Mutex
	j.mu.spaceFreed = make(chan struct{})
	j.mu.files = map[uint64]int64{}
	j.readers.files = map[uint64]readHandle{}

	fsys := opts.FS
	if _, err := fsys.Stat(opts.Dir); errors.Is(err, fs.ErrNotExist) {
		if err := fsys.MkdirAll(opts.Dir); err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		// A new directory is durable only once its parent is synced.
		if err := fsys.SyncDir(filepath.Dir(filepath.Clean(opts.Dir))); err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	names, err := fsys.List(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var last uint64
	for _, name := range names {
		if seq, ok := parseRemovingName(name); ok {
			// RemoveFile was removing it when the process stopped.
			if err := j.finishRemoval(context.Background(), name, nil); err != nil {
				return nil, err
			}
			last = max(last, seq)
			continue
		}
		seq, ok := parseFileName(name)
		if !ok {
			if strings.HasSuffix(name, fileSuffix) {
				j.logger.Warn("ignoring a file that is not named like a journal file", "file", name)
			}
			continue
		}
		size, err := j.checkFile(seq)
		if err != nil {
			return nil, err
		}
		j.mu.files[seq] = size
		last = max(last, seq)
	}
	if last == math.MaxUint64 {
		return nil, fmt.Errorf("journal: file sequence numbers exhausted")
	}
	j.nextSeq = last + 1
	go j.run()
	return j, nil
}

const fileSuffix = ".journal"

// fileName is the name of file seq: 16 lower-case hex digits + ".journal".
func fileName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, fileSuffix) }

func parseFileName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, fileSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || fileName(seq) != name {
		return 0, false
	}
	return seq, true
}

func (j *Journal) path(seq uint64) string { return filepath.Join(j.opts.Dir, fileName(seq)) }

// checkFile returns the size of file seq and refuses a file whose intact
// header names another sequence number or format version: such a file was
// copied or renamed here, and replaying it would serve another file's
// records. A damaged or missing header is left to Replay.
func (j *Journal) checkFile(seq uint64) (int64, error) {
	f, err := j.opts.FS.Open(j.path(seq))
	if err != nil {
		return 0, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("journal: %w", err)
	}
	var h [FileHeaderSize]byte
	if n, err := f.ReadAt(h[:], 0); n < len(h) {
		if err != nil && err != io.EOF {
			return 0, fmt.Errorf("journal: reading the header of %s: %w", fileName(seq), err)
		}
		return info.Size(), nil
	}
	hseq, version, ok := decodeFileHeader(h[:])
	switch {
	case !ok:
		// Damaged or torn: Replay decides whether it is corruption or an
		// interrupted creation.
	case version != versionPacked && version != versionAligned:
		return 0, fmt.Errorf("journal: %s has format version %d; this build reads versions %d and %d",
			fileName(seq), version, versionPacked, versionAligned)
	case hseq != seq:
		return 0, corruptf(seq, 0, "misplaced file: its header says it is file %016x", hseq)
	}
	return info.Size(), nil
}

// Append queues rec. It returns at once with an error, and never calls done,
// if rec is invalid (ErrInvalidRecord, ErrTooLarge), the journal is closed
// (ErrClosed), failed (ErrFailed), not replayed (ErrNotReplayed), or ctx
// ends before there is queue space. Otherwise done is called exactly once,
// from the writer goroutine, after rec and every record queued before it are
// durable (err nil, loc says where rec is) or with an error wrapping
// ErrFailed. done must not block: it delays every later group. The journal
// keeps rec.Payload until done is called; the caller must not modify it
// before then.
func (j *Journal) Append(ctx context.Context, rec Record, done func(loc Location, err error)) error {
	if done == nil {
		return fmt.Errorf("%w: nil done callback", ErrInvalidRecord)
	}
	return j.AppendWaiter(ctx, rec, doneFunc(done))
}

// AppendWaiter is Append with w told the outcome (w.Journaled) instead of
// a done callback: a caller that already has a struct per record (the
// storage engine's) need not allocate a closure for each.
func (j *Journal) AppendWaiter(ctx context.Context, rec Record, w Waiter) error {
	if err := rec.validate(); err != nil {
		return err
	}
	if w == nil {
		return fmt.Errorf("%w: nil waiter", ErrInvalidRecord)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("journal: append: %w", err)
	}
	size := int64(rec.encodedSize())
	j.mu.Lock()
	for {
		switch {
		case j.mu.closing:
			j.mu.Unlock()
			return ErrClosed
		case j.mu.failErr != nil:
			err := j.mu.failErr
			j.mu.Unlock()
			return err
		case !j.mu.replayed:
			j.mu.Unlock()
			return ErrNotReplayed
		}
		if j.mu.queueBytes == 0 || j.mu.queueBytes+size <= j.opts.MaxQueueBytes {
			break
		}
		freed := j.mu.spaceFreed
		j.mu.waiters++
		j.mu.Unlock()
		var ctxErr error
		select {
		case <-freed:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
		j.mu.Lock()
		j.mu.waiters--
		if ctxErr != nil {
			j.mu.Unlock()
			return fmt.Errorf("journal: waiting for queue space: %w", ctxErr)
		}
	}
	j.mu.queue = append(j.mu.queue, pending{rec: rec, size: int(size), done: w})
	j.mu.queueBytes += size
	j.mu.cond.Signal()
	j.mu.Unlock()
	return nil
}

// wakeWaitersLocked wakes Appends waiting for queue space.
// REQUIRES: j.mu held.
func (j *Journal) wakeWaitersLocked() {
	if j.mu.waiters > 0 {
		close(j.mu.spaceFreed)
		j.mu.spaceFreed = make(chan struct{})
	}
}

// run is the writer goroutine: it writes and syncs one group at a time.
func (j *Journal) run() {
	defer close(j.writerDone)
	for {
		group, ok := j.nextGroup()
		if !ok {
			return
		}
		j.commit(group)
	}
}

// maxIdleBatch bounds the capacity of a batch slice kept for reuse, so one
// burst of tiny records does not pin a large slice forever.
const maxIdleBatch = 1 << 16

// nextGroup returns the next records to write together: everything queued
// first, up to MaxGroupBytes (at least one record). It waits for records and
// returns false once the journal is closing and nothing is left.
func (j *Journal) nextGroup() ([]pending, bool) {
	w := &j.w
	if w.next == len(w.batch) {
		clear(w.batch) // drop payload references
		w.batch, w.next = w.batch[:0], 0
		if cap(w.batch) > maxIdleBatch {
			w.batch = nil
		}
		j.mu.Lock()
		for len(j.mu.queue) == 0 && !j.mu.closing {
			j.mu.cond.Wait()
		}
		if len(j.mu.queue) == 0 {
			j.mu.Unlock()
			return nil, false
		}
		w.batch, j.mu.queue = j.mu.queue, w.batch
		j.mu.Unlock()
	}
	end, bytes := w.next, int64(0)
	for end < len(w.batch) && (end == w.next || bytes+int64(w.batch[end].size) <= j.opts.MaxGroupBytes) {
		bytes += int64(w.batch[end].size)
		end++
	}
	group := w.batch[w.next:end]
	w.next = end
	return group, true
}

// commit writes group with one Write and one Sync, then completes it.
func (j *Journal) commit(group []pending) {
	j.mu.Lock()
	failErr := j.mu.failErr
	j.mu.Unlock()
	if failErr != nil {
		finish(group, failErr)
		return
	}
	w := &j.w
	var groupBytes int64
	for i := range group {
		groupBytes += int64(group[i].size)
	}
	// Rotate between groups: a group never spans files, so at most the
	// last group of the last file can be unsynced after a crash.
	if w.off > j.dataStart() && w.off+j.paddedSize(w.off, groupBytes) > j.opts.MaxFileBytes {
		if err := j.rotate(); err != nil {
			j.fatal(fmt.Errorf("rotating to file %016x: %w", w.seq+1, err), group)
			return
		}
	}
	size := j.paddedSize(w.off, groupBytes) // bytes written: the group and its pad
	if err := j.reserve(w.off + size); err != nil {
		j.fatal(fmt.Errorf("preallocating file %016x: %w", w.seq, err), group)
		return
	}
	// The buffer is allocated aligned and big enough for the whole group,
	// so encoding never reallocates it (which would lose the alignment
	// direct I/O needs).
	buf := w.buf[:0]
	if int64(cap(buf)) < size {
		buf = vfs.AlignedBuffer(int(size))[:0]
		if size <= 2*j.opts.MaxGroupBytes {
			w.buf = buf // reuse; a group inflated by one huge record is not kept
		}
	}
	for i := range group {
		buf = appendRecord(buf, &group[i].rec, w.seq, w.off+int64(len(buf)), uint32(len(buf)))
	}
	if pad := int(size - groupBytes); pad > 0 {
		buf = appendPad(buf, w.seq, w.off+groupBytes, uint32(groupBytes), pad)
	}
	began := time.Now()
	if n, err := w.f.Write(buf); err != nil || n != len(buf) {
		if err == nil {
			err = io.ErrShortWrite
		}
		j.fatal(fmt.Errorf("writing file %016x: %w", w.seq, err), group)
		return
	}
	start := time.Now()
	if err := w.f.Sync(); err != nil {
		// Never retried: after a failed fdatasync the kernel may have
		// dropped the pages, and a second sync would "succeed".
		j.fatal(fmt.Errorf("syncing file %016x: %w", w.seq, err), group)
		return
	}
	syncDuration := time.Since(start)
	j.noteSlowGroup(start.Sub(began), syncDuration, size, len(group))
	off := w.off
	w.off += size
	j.mu.Lock()
	j.mu.durable = w.off
	j.mu.files[w.seq] = w.off
	j.mu.queueBytes -= groupBytes
	j.wakeWaitersLocked()
	j.mu.Unlock()
	if j.opts.OnGroupCommit != nil {
		j.opts.OnGroupCommit(int(groupBytes), len(group), syncDuration)
	}
	for i := range group {
		size := group[i].size
		group[i].done.Journaled(Location{File: w.seq, Offset: off, Length: uint32(size)}, nil)
		off += int64(size)
	}
}

// slowGroup: a group whose write and sync took longer than this is
// logged (at most once per slowGroupLogEvery, with how many were not),
// since every acknowledgement of the bookie waited for it.
const (
	slowGroup         = 50 * time.Millisecond
	slowGroupLogEvery = time.Second
)

// noteSlowGroup logs a slow group.
func (j *Journal) noteSlowGroup(write, sync time.Duration, bytes int64, records int) {
	if write+sync >= slowGroup {
		j.slow.Warn(j.logger, time.Now(), "slow journal group: acknowledgements waited for the disk",
			"write", write, "sync", sync, "bytes", bytes, "records", records)
	}
}

// finish fails every record of group with err.
func finish(group []pending, err error) {
	for i := range group {
		group[i].done.Journaled(Location{}, err)
	}
}

// fatal records a write-path failure: from now on nothing is acknowledged.
// It fails group, the rest of the writer's batch and everything queued, in
// queue order, and calls OnFatal once.
func (j *Journal) fatal(cause error, group []pending) {
	err := fmt.Errorf("%w: %w", ErrFailed, cause)
	j.mu.Lock()
	if j.mu.failErr == nil {
		j.mu.failErr = err
	}
	queued := j.mu.queue
	j.mu.queue = nil
	j.mu.queueBytes = 0
	j.wakeWaitersLocked()
	j.mu.Unlock()
	j.logger.Error("journal failed: acknowledging nothing more", "err", cause)
	j.fatalOnce.Do(func() {
		if j.opts.OnFatal != nil {
			j.opts.OnFatal(err)
		}
	})
	finish(group, err)
	w := &j.w
	finish(w.batch[w.next:], err)
	w.next = len(w.batch)
	finish(queued, err)
}

// rotate makes a new file current. The current file is fully synced: every
// group is synced before the next one starts.
func (j *Journal) rotate() error {
	w := &j.w
	next := w.seq + 1
	f, reserved, err := j.createFile(next, false)
	if err != nil {
		return err
	}
	old, oldSeq := w.f, w.seq
	w.f, w.seq, w.off, w.preallocEnd = f, next, j.dataStart(), reserved
	j.mu.Lock()
	j.mu.files[next] = j.dataStart()
	j.mu.current = next
	j.mu.durable = j.dataStart()
	j.mu.Unlock()
	j.logger.Debug("rotated", "from", fileName(oldSeq), "to", fileName(next))
	if err := old.Close(); err != nil {
		// Its data is durable: the last Sync succeeded.
		j.logger.Warn("closing a full journal file", "file", fileName(oldSeq), "err", err)
	}
	return nil
}

// createFile creates file seq and makes it and its header durable: reserve
// space, write the header (and in the aligned layout its pad), fdatasync,
// fsync the directory. It returns the file and how many bytes are
// reserved. At start-up (atStart) a full disk leaves the file unreserved
// instead of failing. The aligned layout is written with direct I/O unless
// the file system refuses it: at the open, or (EINVAL) at the header's
// write, after which the file is made again for buffered writes. Either way
// the layout is the same.
func (j *Journal) createFile(seq uint64, atStart bool) (vfs.File, int64, error) {
	f, reserved, direct, err := j.createFileOnce(seq, atStart)
	if err != nil && direct && errors.Is(err, syscall.EINVAL) {
		j.logger.Warn("the file system refused a direct write; writing the journal through the page cache",
			"file", fileName(seq), "err", err)
		j.w.directRefused = true
		f, reserved, direct, err = j.createFileOnce(seq, atStart)
	}
	if err != nil {
		return nil, 0, err
	}
	j.mu.Lock()
	changed := j.mu.direct != direct || j.mu.current == 0
	j.mu.direct = direct
	j.mu.Unlock()
	if changed && j.aligned() {
		if direct {
			j.logger.Info("journal writes use direct I/O", "file", fileName(seq))
		} else {
			j.logger.Warn("journal writes go through the page cache: the file system refuses direct I/O", "file", fileName(seq))
		}
	}
	return f, reserved, nil
}

// createFileOnce is one attempt of createFile; direct says whether it
// wrote with direct I/O.
func (j *Journal) createFileOnce(seq uint64, atStart bool) (f vfs.File, reserved int64, direct bool, err error) {
	if j.aligned() && !j.w.directRefused {
		f, direct, err = j.opts.FS.CreateDirect(j.path(seq))
	} else {
		f, err = j.opts.FS.Create(j.path(seq))
	}
	if err != nil {
		return nil, 0, false, err
	}
	if j.opts.PreallocateBytes > 0 {
		reserved = min(j.opts.PreallocateBytes, j.opts.MaxFileBytes)
		err = f.Preallocate(reserved)
		if atStart && errors.Is(err, syscall.ENOSPC) {
			// A full disk must not keep a bookie from starting: it still
			// serves reads and frees space by GC (its storage is read-only
			// then). Appends reserve again before every group, and a write
			// that cannot be reserved fails there, before any record.
			j.logger.Warn("no space to preallocate a new journal file; continuing without a reservation", "file", fileName(seq))
			reserved, err = 0, nil
		}
	}
	if err == nil {
		_, err = f.Write(j.fileStart(seq))
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = j.opts.FS.SyncDir(j.opts.Dir)
	}
	if err != nil {
		// The file holds no record: remove it, so that a retry in this
		// process does not leave a header-less file between two files
		// (which the next Replay would have to report as corrupt). If
		// removal fails too, such a file is last and Replay removes it.
		f.Close()
		if rmErr := j.opts.FS.Remove(j.path(seq)); rmErr != nil {
			j.logger.Warn("removing a file whose creation failed", "file", fileName(seq), "err", rmErr)
		}
		return nil, 0, direct, err
	}
	return f, reserved, direct, nil
}

// aligned reports whether new files use the aligned layout
// (versionAligned), written with direct I/O where possible.
func (j *Journal) aligned() bool { return !j.opts.BufferedWrites }

// dataStart is where the first group of a new file starts.
func (j *Journal) dataStart() int64 {
	if j.aligned() {
		return alignBytes
	}
	return FileHeaderSize
}

// paddedSize is the bytes a group of groupBytes written at off takes: in
// the aligned layout, with the pad up to the next boundary.
func (j *Journal) paddedSize(off, groupBytes int64) int64 {
	if !j.aligned() {
		return groupBytes
	}
	return groupBytes + int64(padLength(off+groupBytes))
}

// fileStart is what createFile writes at the start of file seq: the header,
// and in the aligned layout a pad to the first boundary (a group of its
// own), from an aligned buffer.
func (j *Journal) fileStart(seq uint64) []byte {
	if !j.aligned() {
		return appendFileHeader(nil, seq, versionPacked)
	}
	b := appendFileHeader(vfs.AlignedBuffer(alignBytes)[:0], seq, versionAligned)
	return appendPad(b, seq, FileHeaderSize, 0, alignBytes-FileHeaderSize)
}

// DirectIO reports whether the file being written uses direct I/O (false
// with Options.BufferedWrites, when the file system refuses it, and before
// Replay).
func (j *Journal) DirectIO() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.direct
}

// reserve makes sure the current file has space reserved up to end, in
// steps of PreallocateBytes, not past MaxFileBytes unless end is.
func (j *Journal) reserve(end int64) error {
	w := &j.w
	if j.opts.PreallocateBytes <= 0 || end <= w.preallocEnd {
		return nil
	}
	target := max(end, min(w.preallocEnd+j.opts.PreallocateBytes, j.opts.MaxFileBytes))
	if err := w.f.Preallocate(target); err != nil {
		return err
	}
	w.preallocEnd = target
	return nil
}

// Read returns the record at loc after verifying it (checksums, position,
// type, length). Corrupt data is never returned: a mismatch is a
// *CorruptError (ErrCorrupt). loc in an unknown file, or past the durable end
// of the current file, is ErrNotFound. The payload is freshly allocated.
// Safe to call concurrently with everything else.
func (j *Journal) Read(loc Location) (Record, error) {
	rec, _, err := j.read(loc, nil)
	return rec, err
}

// ReadBuffers holds the records that ReadPooled reads: buffers aligned for
// direct reads, in classes from a block up to the largest record's blocks.
var ReadBuffers = bufpool.NewFunc(vfs.AlignedBuffer, bufpool.Steps(vfs.DirectAlign, 2*MaxRecordBytes, 4)...)

// ReadPooled is Read with the record read into a buffer of ReadBuffers,
// held, which the payload aliases: the caller gives it back
// (ReadBuffers.Put) once nothing uses the payload, or leaves it to the
// collector. A bookie serving catch-up reads or a compaction pass reads
// tens of MB/s; in fresh memory every one of those bytes costs the
// garbage collector, the scavenger that returns idle pages to the kernel
// and the page faults that bring them back. held is nil on an error.
func (j *Journal) ReadPooled(loc Location) (rec Record, held *[]byte, err error) {
	return j.read(loc, ReadBuffers)
}

// read is Read, into a buffer of pool when pool is not nil (held).
func (j *Journal) read(loc Location, pool *bufpool.Pool) (Record, *[]byte, error) {
	if loc.Offset < FileHeaderSize || loc.Length < RecordHeaderSize || loc.Length > MaxRecordBytes {
		return Record{}, nil, corruptf(loc.File, loc.Offset, "location %+v cannot hold a record", loc)
	}
	end := loc.Offset + int64(loc.Length)
	j.mu.Lock()
	closing := j.mu.closing
	size, known := j.mu.files[loc.File]
	current := loc.File == j.mu.current
	j.mu.Unlock()
	switch {
	case closing:
		return Record{}, nil, ErrClosed
	case !known:
		return Record{}, nil, fmt.Errorf("%w: file %016x", ErrNotFound, loc.File)
	case end > size && current:
		return Record{}, nil, fmt.Errorf("%w: %+v is past the durable end %d", ErrNotFound, loc, size)
	case end > size:
		return Record{}, nil, corruptf(loc.File, loc.Offset, "record of %d bytes past the end of the file (%d)", loc.Length, size)
	}
	buf, held, err := j.readBytes(loc, pool)
	if err != nil {
		return Record{}, nil, err
	}
	rec, rh, err := decodeRecord(buf, loc.File, loc.Offset)
	switch {
	case err != nil:
	case rh.length != loc.Length:
		err = corruptf(loc.File, loc.Offset, "record is %d bytes, location says %d", rh.length, loc.Length)
	case rec.Type == TypePad:
		err = corruptf(loc.File, loc.Offset, "location holds padding, not a record")
	}
	if err != nil {
		if held != nil {
			pool.Put(held)
		}
		return Record{}, nil, err
	}
	return rec, held, nil
}

// readBytes reads the bytes at loc, into a buffer of pool (held) when
// pool is not nil. A direct read covers the record's aligned blocks (a
// short one is fine once it holds the record). A file system that opened
// a file for direct reads but refuses them (EINVAL) turns direct reads off
// for the journal's life; the read is made again through the page cache.
func (j *Journal) readBytes(loc Location, pool *bufpool.Pool) (buf []byte, held *[]byte, err error) {
	f, direct, release, err := j.reader(loc.File)
	if err != nil {
		return nil, nil, err
	}
	from, skip, end := loc.Offset, int64(0), loc.Offset+int64(loc.Length)
	size := int(loc.Length)
	if direct {
		from = loc.Offset &^ (vfs.DirectAlign - 1)
		skip = loc.Offset - from
		size = int(end-from+vfs.DirectAlign-1) &^ (vfs.DirectAlign - 1)
	}
	switch {
	case pool != nil:
		held = pool.Get(size)
		buf = *held
	case direct:
		buf = vfs.AlignedBuffer(size)
	default:
		buf = make([]byte, size)
	}
	n, err := f.ReadAt(buf, from)
	release()
	if int64(n) >= end-from {
		return buf[skip : end-from], held, nil
	}
	if held != nil {
		pool.Put(held)
	}
	switch {
	case direct && errors.Is(err, syscall.EINVAL):
		if !j.directReadsRefused.Swap(true) {
			j.logger.Warn("the file system refused a direct read; reading the journal through the page cache", "err", err)
		}
		// Handles opened from now on are buffered: once the direct ones
		// are dropped, the read again is buffered.
		j.dropReaders()
		return j.readBytes(loc, pool)
	case err == nil || err == io.EOF:
		return nil, nil, corruptf(loc.File, loc.Offset, "file ends %d bytes into a %d-byte record", n-int(skip), loc.Length)
	}
	return nil, nil, fmt.Errorf("journal: reading %+v: %w", loc, err)
}

// reader returns a cached read handle on file seq, whether it reads with
// direct I/O, and a func to call when done with it. While the journal
// writes with direct I/O its files are read that way too: their blocks
// are not in the page cache anyway, and a buffered read would put them
// there, at 1.8 times the CPU of a direct read in the catch-up benchmark
// (strata bench suite, catch-up: the bookies' pread was two thirds of
// their CPU).
func (j *Journal) reader(seq uint64) (vfs.File, bool, func(), error) {
	for {
		j.readers.RLock()
		if r := j.readers.files[seq]; r.f != nil {
			return r.f, r.direct, j.readers.RUnlock, nil
		}
		j.readers.RUnlock()

		j.readers.Lock()
		if j.readers.files == nil {
			j.readers.Unlock()
			return nil, false, nil, ErrClosed
		}
		if j.readers.files[seq].f == nil {
			j.mu.Lock()
			_, known := j.mu.files[seq]
			direct := j.mu.direct && !j.directReadsRefused.Load()
			j.mu.Unlock()
			if !known {
				j.readers.Unlock()
				return nil, false, nil, fmt.Errorf("%w: file %016x", ErrNotFound, seq)
			}
			r, err := j.openReader(seq, direct)
			if err != nil {
				j.readers.Unlock()
				return nil, false, nil, fmt.Errorf("journal: %w", err)
			}
			j.readers.files[seq] = r
		}
		j.readers.Unlock()
	}
}

// readHandle is a cached read handle on a journal file.
type readHandle struct {
	f      vfs.File
	direct bool // reads must be aligned (vfs.FS.OpenDirect)
}

// openReader opens file seq for reads, with direct I/O if direct.
func (j *Journal) openReader(seq uint64, direct bool) (readHandle, error) {
	if !direct {
		f, err := j.opts.FS.Open(j.path(seq))
		return readHandle{f: f}, err
	}
	f, direct, err := j.opts.FS.OpenDirect(j.path(seq))
	return readHandle{f: f, direct: direct}, err
}

// dropReaders closes every cached read handle once no Read uses it.
func (j *Journal) dropReaders() {
	j.readers.Lock()
	defer j.readers.Unlock()
	if j.readers.files == nil {
		return
	}
	for seq, r := range j.readers.files {
		r.f.Close()
		delete(j.readers.files, seq)
	}
}

// dropReader closes the cached read handle on file seq, if any, once no
// Read uses it.
func (j *Journal) dropReader(seq uint64) {
	j.readers.Lock()
	defer j.readers.Unlock()
	if r := j.readers.files[seq]; r.f != nil {
		r.f.Close()
		delete(j.readers.files, seq)
	}
}

// Position returns the position after the last durable record: records
// before it are on disk. It is the zero Position before Replay.
func (j *Journal) Position() Position {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mu.current == 0 {
		return Position{}
	}
	return Position{File: j.mu.current, Offset: j.mu.durable}
}

// Files lists the journal's files by sequence number.
func (j *Journal) Files() []FileInfo {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]FileInfo, 0, len(j.mu.files))
	for seq, size := range j.mu.files {
		out = append(out, FileInfo{Seq: seq, Size: size})
	}
	slices.SortFunc(out, func(a, b FileInfo) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return out
}

// RemoveFile deletes file seq and syncs the directory. It refuses the file
// being written (ErrFileInUse), unknown files (ErrNotFound), and runs not
// during Replay. The caller decides that nothing in the file is needed.
//
// pace, unless nil, holds the cuts (RemoveStepBytes) to its rate. ctx ends
// a wait between cuts: the file is then no longer the journal's, and what
// is left of it is finished by RemoveLeftovers or the next Open.
func (j *Journal) RemoveFile(ctx context.Context, seq uint64, pace *ctxtime.Pacer) error {
	j.mu.Lock()
	size, known := j.mu.files[seq]
	var err error
	switch {
	case j.mu.closing:
		err = ErrClosed
	case j.mu.replaying:
		err = errors.New("journal: RemoveFile during Replay")
	case j.mu.current != 0 && seq == j.mu.current:
		err = fmt.Errorf("%w: file %016x", ErrFileInUse, seq)
	case !known:
		err = fmt.Errorf("%w: file %016x", ErrNotFound, seq)
	default:
		delete(j.mu.files, seq)
	}
	j.mu.Unlock()
	if err != nil {
		return err
	}
	j.dropReader(seq)
	if err := j.opts.FS.Rename(j.path(seq), j.path(seq)+removingSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		j.mu.Lock()
		j.mu.files[seq] = size
		j.mu.Unlock()
		return fmt.Errorf("journal: removing %s: %w", fileName(seq), err)
	}
	// The rename is durable before the first cut: a crash never leaves a
	// cut file under a journal file's name.
	if err := j.opts.FS.SyncDir(j.opts.Dir); err != nil {
		return fmt.Errorf("journal: removing %s: %w", fileName(seq), err)
	}
	if err := j.removeInSteps(ctx, fileName(seq)+removingSuffix, pace); err != nil {
		return fmt.Errorf("journal: removing %s: %w", fileName(seq), err)
	}
	return nil
}

// removingSuffix names a file RemoveFile is removing: it does not parse as
// a journal file, and Open (after a crash) or RemoveLeftovers (after a
// failed RemoveFile) finishes removing it.
const removingSuffix = ".removing"

// parseRemovingName returns the sequence number of a file RemoveFile was
// removing.
func parseRemovingName(name string) (uint64, bool) {
	seq, ok := parseFileName(strings.TrimSuffix(name, removingSuffix))
	return seq, ok && name == fileName(seq)+removingSuffix
}

// RemoveLeftovers finishes removing the files a RemoveFile that failed
// midway (an I/O error, or its ctx ended) left in Dir: they hold no
// records the journal lists, only space. It must not run at the same time
// as RemoveFile; pace as RemoveFile's.
func (j *Journal) RemoveLeftovers(ctx context.Context, pace *ctxtime.Pacer) (int, error) {
	names, err := j.opts.FS.List(j.opts.Dir)
	if err != nil {
		return 0, fmt.Errorf("journal: %w", err)
	}
	n := 0
	for _, name := range names {
		if _, ok := parseRemovingName(name); ok {
			if err := j.finishRemoval(ctx, name, pace); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

func (j *Journal) finishRemoval(ctx context.Context, name string, pace *ctxtime.Pacer) error {
	if err := j.removeInSteps(ctx, name, pace); err != nil {
		return fmt.Errorf("journal: finishing the removal of %s: %w", name, err)
	}
	j.logger.Info("finished removing a journal file", "file", name)
	return nil
}

// removeInSteps removes the file name of Dir: it cuts it down
// RemoveStepBytes at a time, syncing each cut (so each frees a bounded
// share of extents in its own file-system commit, see
// Options.RemoveStepBytes), each after pace allows it, then unlinks it and
// syncs Dir. A missing file is already removed.
func (j *Journal) removeInSteps(ctx context.Context, name string, pace *ctxtime.Pacer) error {
	path := filepath.Join(j.opts.Dir, name)
	if step := j.opts.RemoveStepBytes; step > 0 {
		f, err := j.opts.FS.OpenReadWrite(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := cutInSteps(ctx, f, step, pace); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if err := j.opts.FS.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return j.opts.FS.SyncDir(j.opts.Dir)
}

// cutInSteps truncates f to 0, step bytes at a time, each cut once pace
// allows it and synced.
func cutInSteps(ctx context.Context, f vfs.File, step int64, pace *ctxtime.Pacer) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	for size := fi.Size(); size > 0; {
		cut := min(size, step)
		if err := pace.Wait(ctx, int(cut)); err != nil {
			return err
		}
		size -= cut
		if err := f.Truncate(size); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// Close stops accepting records, waits for the writer to write and sync
// everything already queued (and complete it), and closes the files. It
// returns the journal's failure, if it failed, and ErrClosed if called
// again. Appends waiting for queue space return ErrClosed.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.mu.closing {
		j.mu.Unlock()
		return ErrClosed
	}
	j.mu.closing = true
	j.mu.cond.Broadcast()
	j.wakeWaitersLocked()
	j.mu.Unlock()
	<-j.writerDone

	var errs []error
	if j.w.f != nil {
		errs = append(errs, j.w.f.Close())
		j.w.f = nil
	}
	j.readers.Lock()
	for _, r := range j.readers.files {
		errs = append(errs, r.f.Close())
	}
	j.readers.files = nil
	j.readers.Unlock()

	j.mu.Lock()
	failErr := j.mu.failErr
	j.mu.Unlock()
	if failErr != nil {
		return failErr
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("journal: close: %w", err)
	}
	return nil
}
