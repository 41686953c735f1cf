package journal

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/strata-log/strata/vfs"
)

// CorruptRange is a stretch of a journal file whose bytes are not valid
// records although valid records follow it: data the journal once synced
// (so may have acknowledged) that is now damaged. Its records are not
// returned. A range covering a file's header has Offset 0 and Length
// FileHeaderSize, even if the file is shorter.
type CorruptRange struct {
	File   uint64
	Offset int64
	Length int64
}

// ReplayResult summarises a Replay.
type ReplayResult struct {
	// Records is the number of records passed to fn.
	Records int
	// TruncatedBytes counts the bytes cut from the end of the journal: the
	// torn tail of the last group that was being written at the crash,
	// never acknowledged (and whole files whose creation never completed).
	TruncatedBytes int64
	// Corrupt lists damaged ranges with valid records after them. Replay
	// does not fail for them; the caller decides what to distrust.
	Corrupt []CorruptRange
}

// Replay passes every valid record at or after from to fn, in journal order,
// with its location, then repairs the torn tail and starts a new file for
// Append. It must complete (once) before the first Append, and must not run
// concurrently with Close or RemoveFile.
//
// from must be the zero Position, a value returned by Position, or the end of
// a record (Location.Offset + Length); files before from.File are skipped.
//
// rec.Payload aliases Replay's read buffer: it is valid only during fn;
// copy it to keep it. An error from fn stops Replay, which returns it; the
// journal then stays unreplayed and Replay may be called again.
//
// Damage is classified as doc.go explains: bytes after the last valid
// record, or inside the last commit group, are a torn tail, cut off
// (TruncatedBytes); damage followed by a valid record of a later group is
// corruption (Corrupt), skipped without failing. I/O errors fail Replay
// without repairing anything.
func (j *Journal) Replay(from Position, fn func(rec Record, loc Location) error) (ReplayResult, error) {
	j.mu.Lock()
	var err error
	switch {
	case j.mu.closing:
		err = ErrClosed
	case j.mu.replayed:
		err = errors.New("journal: Replay already completed")
	case j.mu.replaying:
		err = errors.New("journal: Replay already running")
	}
	if err != nil {
		j.mu.Unlock()
		return ReplayResult{}, err
	}
	j.mu.replaying = true
	r := &replayer{j: j, truncate: map[int]int64{}}
	for _, seq := range slices.Sorted(maps.Keys(j.mu.files)) {
		if seq >= from.File {
			r.files = append(r.files, replayFile{seq: seq, size: j.mu.files[seq]})
		}
	}
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.mu.replaying = false
		j.mu.Unlock()
	}()

	err = r.scan(from, fn)
	r.close()
	if err != nil {
		return r.res, err
	}
	if err := r.repair(); err != nil {
		return r.res, err
	}

	seq := j.nextSeq
	j.nextSeq++ // a retry after a failure here must not collide with a half-made file
	f, reserved, err := j.createFile(seq, true)
	if err != nil {
		return r.res, fmt.Errorf("journal: creating %s: %w", fileName(seq), err)
	}
	j.mu.Lock()
	if j.mu.closing {
		j.mu.Unlock()
		f.Close()
		return r.res, ErrClosed
	}
	// The writer reads these fields only after it receives a record, which
	// happens after replayed is set below under j.mu.
	j.w.f, j.w.seq, j.w.off, j.w.preallocEnd = f, seq, j.dataStart(), reserved
	j.mu.files[seq] = j.dataStart()
	j.mu.current = seq
	j.mu.durable = j.dataStart()
	j.mu.replayed = true
	j.mu.Unlock()

	j.logger.Info("replayed", "from", fmt.Sprintf("%016x:%d", from.File, from.Offset), "records", r.res.Records,
		"truncated_bytes", r.res.TruncatedBytes, "corrupt_ranges", len(r.res.Corrupt), "new_file", fileName(seq))
	return r.res, nil
}

// replayFile is a file Replay scans.
type replayFile struct {
	seq  uint64
	size int64
	main *scanner // the scan that calls fn
	look *scanner // look-ahead after damage
}

// replayer holds one Replay's state.
type replayer struct {
	j        *Journal
	files    []replayFile
	res      ReplayResult
	truncate map[int]int64 // file index → size to cut it to
	remove   []int         // file indexes to remove
	handles  []vfs.File
}

// scan reads the files in order, calls fn for valid records and decides
// what is corrupt and what is the torn tail to repair. A cut of the torn
// tail ends the scan: nothing valid follows it.
func (r *replayer) scan(from Position, fn func(Record, Location) error) error {
	for i := range r.files {
		sc, err := r.scanner(i, false)
		if err != nil {
			return err
		}
		if cut, err := r.checkHeader(i, sc); err != nil || cut {
			return err
		}
		start, skipBefore, ok, err := r.startOf(i, sc, from)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if cut, err := r.scanRecords(i, sc, start, skipBefore, fn); err != nil || cut {
			return err
		}
	}
	return nil
}

// checkHeader checks file i's header. A damaged header followed by a
// valid record is corruption; with nothing valid after it the file's
// creation never completed (its header is synced before any record is
// written), and it and everything after it are the torn tail: cut
// reports that the scan ends there.
func (r *replayer) checkHeader(i int, sc *scanner) (cut bool, err error) {
	h, err := sc.peek(0, FileHeaderSize)
	if err != nil {
		return false, err
	}
	if _, _, ok := decodeFileHeader(h); ok {
		return false, nil
	}
	_, _, _, found, err := r.nextValid(i, FileHeaderSize)
	if err != nil {
		return false, err
	}
	if !found {
		return true, r.cutTail(i, -1)
	}
	r.corrupt(r.files[i].seq, 0, FileHeaderSize)
	return false, nil
}

// startOf is where the scan of file i starts (start), and before which
// offset its records are not handed to fn (skipBefore), given the replay's
// from. ok is false when the file is skipped: from lies past its end (the
// caller has consumed records that are no longer here: corruption).
func (r *replayer) startOf(i int, sc *scanner, from Position) (start, skipBefore int64, ok bool, err error) {
	rf := &r.files[i]
	start = FileHeaderSize
	if rf.seq != from.File || from.Offset <= start {
		return start, 0, true, nil
	}
	switch {
	case from.Offset > rf.size:
		r.corrupt(rf.seq, rf.size, from.Offset-rf.size)
		return 0, 0, false, nil
	case from.Offset == rf.size:
		return rf.size, 0, true, nil
	}
	_, _, err = sc.record(from.Offset)
	switch {
	case err == nil:
		return from.Offset, 0, true, nil
	case !isCorrupt(err):
		return 0, 0, false, err
	}
	// Not a record boundary, or damaged: scan the whole file so damage is
	// classified from known boundaries, but hand fn only what is at or
	// after from.
	return start, from.Offset, true, nil
}

// scanRecords reads file i's records from start, hands fn the valid ones
// at or after skipBefore (pads excepted) and classifies the damage it
// meets (skipDamage). cut reports that the torn tail was cut: the scan ends.
func (r *replayer) scanRecords(i int, sc *scanner, start, skipBefore int64, fn func(Record, Location) error) (cut bool, err error) {
	rf := &r.files[i]
	for off := start; off < rf.size; {
		rec, rh, err := sc.record(off)
		if err == nil {
			if off >= skipBefore && rec.Type != TypePad {
				if err := fn(rec, Location{File: rf.seq, Offset: off, Length: rh.length}); err != nil {
					return false, err
				}
				r.res.Records++
			}
			off += int64(rh.length)
			continue
		}
		if !isCorrupt(err) {
			return false, err
		}
		if off, cut, err = r.skipDamage(i, off); err != nil || cut {
			return cut, err
		}
	}
	return false, nil
}

// skipDamage classifies the damaged bytes at off in file i and returns the
// offset where the scan of the file goes on. Damage with no valid record
// after it, or inside the journal's last commit group, is the torn tail:
// it is cut (cut true, the scan ends). Damage followed by a valid record
// of a later group is corruption: skipped, up to that record or to the
// end of the file when the record is in a later file.
func (r *replayer) skipDamage(i int, off int64) (next int64, cut bool, err error) {
	rf := &r.files[i]
	fi, next, nh, found, err := r.nextValid(i, off+1)
	if err != nil {
		return 0, false, err
	}
	switch {
	case !found:
		return 0, true, r.cutTail(i, off)
	case fi == i:
		if group := next - int64(nh.groupOffset); group <= off {
			last, err := r.lastGroup(i, next, group)
			if err != nil {
				return 0, false, err
			}
			if last {
				// A hole in the group that was being synced at the
				// crash: none of it was acknowledged.
				return 0, true, r.cutTail(i, off)
			}
		}
		r.corrupt(rf.seq, off, next-off)
		return next, false, nil
	default:
		r.corrupt(rf.seq, off, rf.size-off)
		return rf.size, false, nil
	}
}

// nextValid finds the first valid record at or after off in file i, or
// failing that in a later file.
func (r *replayer) nextValid(i int, off int64) (int, int64, recordHeader, bool, error) {
	for ; i < len(r.files); i++ {
		sc, err := r.scanner(i, true)
		if err != nil {
			return 0, 0, recordHeader{}, false, err
		}
		p, rh, found, err := sc.findValid(max(off, FileHeaderSize))
		if err != nil || found {
			return i, p, rh, found, err
		}
		off = FileHeaderSize
	}
	return 0, 0, recordHeader{}, false, nil
}

// lastGroup reports whether the record at offset at of file i, whose commit
// group starts at group, belongs to the last group of the journal: every
// valid record from at on is in that group.
func (r *replayer) lastGroup(i int, at, group int64) (bool, error) {
	fi, off := i, at
	for {
		fj, q, rh, found, err := r.nextValid(fi, off)
		if err != nil || !found {
			return !found, err
		}
		if fj != i || q-int64(rh.groupOffset) != group {
			return false, nil
		}
		fi, off = fj, q+int64(rh.length)
	}
}

// cutTail records that file i ends at off (-1: remove the whole file) and
// that every later file, which holds no valid record, is emptied: cut to its
// header, or removed if the header is not intact.
func (r *replayer) cutTail(i int, off int64) error {
	rf := &r.files[i]
	switch {
	case off < 0:
		r.remove = append(r.remove, i)
		r.res.TruncatedBytes += rf.size
	case off < rf.size:
		r.truncate[i] = off
		r.res.TruncatedBytes += rf.size - off
	}
	for k := i + 1; k < len(r.files); k++ {
		sc, err := r.scanner(k, false)
		if err != nil {
			return err
		}
		h, err := sc.peek(0, FileHeaderSize)
		if err != nil {
			return err
		}
		if _, _, ok := decodeFileHeader(h); ok {
			if r.files[k].size > FileHeaderSize {
				r.truncate[k] = FileHeaderSize
				r.res.TruncatedBytes += r.files[k].size - FileHeaderSize
			}
			continue
		}
		r.remove = append(r.remove, k)
		r.res.TruncatedBytes += r.files[k].size
	}
	return nil
}

func (r *replayer) corrupt(file uint64, off, length int64) {
	r.res.Corrupt = append(r.res.Corrupt, CorruptRange{File: file, Offset: off, Length: length})
	r.j.logger.Warn("corrupt journal range: not replayed", "file", fileName(file), "offset", off, "length", length)
}

// repair applies the cuts decided by scan: each truncation is synced and
// removals are followed by a directory sync, before any new file exists.
func (r *replayer) repair() error {
	j := r.j
	for _, i := range slices.Sorted(maps.Keys(r.truncate)) {
		rf, size := r.files[i], r.truncate[i]
		if err := truncateFile(j.opts.FS, j.path(rf.seq), size); err != nil {
			return fmt.Errorf("journal: cutting the torn tail of %s: %w", fileName(rf.seq), err)
		}
		j.logger.Info("cut torn tail", "file", fileName(rf.seq), "offset", size, "bytes", rf.size-size)
		j.mu.Lock()
		j.mu.files[rf.seq] = size
		j.mu.Unlock()
	}
	if len(r.remove) == 0 {
		return nil
	}
	for _, i := range r.remove {
		seq := r.files[i].seq
		j.dropReader(seq)
		if err := j.opts.FS.Remove(j.path(seq)); err != nil {
			return fmt.Errorf("journal: removing the incomplete %s: %w", fileName(seq), err)
		}
		j.logger.Info("removed a file with no intact header or record", "file", fileName(seq), "bytes", r.files[i].size)
		j.mu.Lock()
		delete(j.mu.files, seq)
		j.mu.Unlock()
	}
	if err := j.opts.FS.SyncDir(j.opts.Dir); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

func truncateFile(fsys vfs.FS, name string, size int64) error {
	f, err := fsys.OpenReadWrite(name)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// scanner returns file i's main or look-ahead scanner, opening it once.
func (r *replayer) scanner(i int, look bool) (*scanner, error) {
	rf := &r.files[i]
	slot := &rf.main
	if look {
		slot = &rf.look
	}
	if *slot == nil {
		f, err := r.j.opts.FS.Open(r.j.path(rf.seq))
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		r.handles = append(r.handles, f)
		*slot = &scanner{f: f, seq: rf.seq, size: rf.size}
	}
	return *slot, nil
}

func (r *replayer) close() {
	for _, f := range r.handles {
		f.Close()
	}
	r.handles = nil
}

func isCorrupt(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce)
}

// windowBytes is how much a scanner reads at a time.
const windowBytes = 1 << 20

// scanner reads one file through a window, for sequential scans.
type scanner struct {
	f    vfs.File
	seq  uint64
	size int64 // as listed when the journal was opened
	base int64 // file offset of buf[0]
	buf  []byte
}

// peek returns bytes [off, off+n) of the file, fewer if the file ends
// first. The slice is valid until the next call.
func (s *scanner) peek(off int64, n int) ([]byte, error) {
	if off >= s.size {
		return nil, nil
	}
	n = int(min(int64(n), s.size-off))
	if off >= s.base && off+int64(n) <= s.base+int64(len(s.buf)) {
		return s.buf[off-s.base : off-s.base+int64(n)], nil
	}
	want := int(min(max(int64(n), windowBytes), s.size-off))
	buf := s.buf[:0]
	if cap(buf) < want {
		buf = make([]byte, want) // at most max(window, MaxRecordBytes)
	}
	buf = buf[:want]
	if m, err := s.f.ReadAt(buf, off); m < want {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF // the file shrank under Replay
		}
		s.buf = nil
		return nil, fmt.Errorf("journal: reading %s at %d: %w", fileName(s.seq), off, err)
	}
	s.base, s.buf = off, buf
	return buf[:n], nil
}

// record decodes the record at off. A *CorruptError means the bytes there
// are not a valid record; any other error is I/O.
func (s *scanner) record(off int64) (Record, recordHeader, error) {
	h, err := s.peek(off, RecordHeaderSize)
	if err != nil {
		return Record{}, recordHeader{}, err
	}
	rh, err := decodeHeader(h, s.seq, off)
	if err != nil {
		return Record{}, rh, err
	}
	if int64(rh.length) > s.size-off {
		return Record{}, rh, corruptf(s.seq, off, "record of %d bytes runs past the end of the file", rh.length)
	}
	b, err := s.peek(off, int(rh.length))
	if err != nil {
		return Record{}, rh, err
	}
	return decodeRecord(b, s.seq, off)
}

// findValid returns the first offset at or after from where a valid record
// starts. Candidates are filtered cheaply before any checksum, so damaged
// stretches are searched at memory speed.
func (s *scanner) findValid(from int64) (int64, recordHeader, bool, error) {
	for p := from; p+RecordHeaderSize <= s.size; p++ {
		h, err := s.peek(p, RecordHeaderSize)
		if err != nil {
			return 0, recordHeader{}, false, err
		}
		if !plausibleHeader(h, s.size-p) {
			continue
		}
		_, rh, err := s.record(p)
		if err == nil {
			return p, rh, true, nil
		}
		if !isCorrupt(err) {
			return 0, recordHeader{}, false, err
		}
	}
	return 0, recordHeader{}, false, nil
}
