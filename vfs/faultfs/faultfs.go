package faultfs

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/strata-log/strata/vfs"
)

// DefaultPollInterval is how often the control file is read.
const DefaultPollInterval = 50 * time.Millisecond

// Options configure New. Zero fields take defaults.
type Options struct {
	// PollInterval is the time between reads of the control file.
	// Default DefaultPollInterval.
	PollInterval time.Duration
	// Logger hears of every change of the faults. Default: discard.
	Logger *slog.Logger
}

// FS is a vfs.FS that injects the faults its control file asks for (see
// doc.go). Operations it does not fault go to the wrapped FS unchanged.
type FS struct {
	vfs.FS // the wrapped file system: Remove, Rename, Stat, ... pass through

	path     string
	interval time.Duration
	log      *slog.Logger

	// current is what every operation loads once.
	current atomic.Pointer[state]

	// mu serializes reloads (the poller's and Reload's).
	mu struct {
		sync.Mutex
		content string // the control file's content at the last read
		readErr string // the last error reading it, logged once
		closed  bool
	}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	// stalling, when set (by tests), is called as a stall begins.
	stalling func()
}

// state is one set of faults in force.
type state struct {
	faults Faults
	// changed is closed when the faults are replaced or the FS closes,
	// which ends the stalls in progress.
	changed chan struct{}
}

// New wraps inner with the faults of the control file at path, which it
// reads before returning and then every opts.PollInterval until Close.
func New(inner vfs.FS, path string, opts Options) *FS {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f := &FS{
		FS: inner, path: path, interval: opts.PollInterval,
		log:  opts.Logger.With("component", "faultfs", "control_file", path),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	f.current.Store(&state{changed: make(chan struct{})})
	f.log.Warn("disk fault injection enabled (a test seam: " + EnvVar + " is set)")
	f.Reload()
	go f.poll()
	return f
}

// FromEnv returns inner wrapped by New when EnvVar names a control file,
// with the wrapper's Close; otherwise inner itself, unwrapped, and a
// close that does nothing.
func FromEnv(inner vfs.FS, opts Options) (vfs.FS, func() error) {
	path := os.Getenv(EnvVar)
	if path == "" {
		return inner, func() error { return nil }
	}
	f := New(inner, path, opts)
	return f, f.Close
}

// Faults returns the faults in force.
func (f *FS) Faults() Faults { return f.current.Load().faults }

// Reload reads the control file now, without waiting for the next poll.
func (f *FS) Reload() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return
	}
	b, err := os.ReadFile(f.path)
	switch {
	case err == nil:
		f.mu.readErr = ""
	case errors.Is(err, fs.ErrNotExist):
		f.mu.readErr = ""
		b = nil
	default:
		// Unreadable counts as healthy, as a missing file does; say why
		// once rather than at every poll.
		if err.Error() != f.mu.readErr {
			f.mu.readErr = err.Error()
			f.log.Error("reading the control file; no faults until it can be read", "err", err)
		}
		b = nil
	}
	content := string(b)
	if content == f.mu.content {
		return
	}
	f.mu.content = content
	faults, perr := Parse(content)
	if perr != nil {
		f.log.Error("control file lines ignored", "err", perr)
	}
	f.setLocked(faults)
}

// setLocked puts faults in force.
// REQUIRES: f.mu held.
func (f *FS) setLocked(faults Faults) {
	old := f.current.Load()
	if old.faults == faults {
		return
	}
	f.current.Store(&state{faults: faults, changed: make(chan struct{})})
	close(old.changed)
	f.log.Warn("disk faults changed", "faults", faults.String())
}

// poll reloads the control file every interval until Close.
func (f *FS) poll() {
	defer close(f.done)
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
			f.Reload()
		}
	}
}

// Close stops reading the control file and ends the stalls in progress;
// from then on the file system is healthy. It always returns nil.
func (f *FS) Close() error {
	f.closeOnce.Do(func() {
		close(f.stop)
		<-f.done
		f.mu.Lock()
		f.setLocked(Faults{})
		f.mu.closed = true
		close(f.current.Load().changed) // later stalls: none (healthy)
		f.mu.Unlock()
	})
	return nil
}

// beforeSync applies the sync faults: the stall, then EIO.
func (f *FS) beforeSync(op, name string) error {
	st := f.current.Load()
	if d := st.faults.SyncStall; d > 0 {
		t := time.NewTimer(d)
		if f.stalling != nil {
			f.stalling()
		}
		select {
		case <-t.C:
		case <-st.changed:
			t.Stop()
		}
		st = f.current.Load() // the faults may have changed meanwhile
	}
	if st.faults.SyncEIO {
		return eio(op, name)
	}
	return nil
}

func eio(op, name string) error { return &fs.PathError{Op: op, Path: name, Err: syscall.EIO} }

func (f *FS) wrap(file vfs.File, name string, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f, name: name}, nil
}

func (f *FS) Create(name string) (vfs.File, error) {
	file, err := f.FS.Create(name)
	return f.wrap(file, name, err)
}

func (f *FS) CreateDirect(name string) (vfs.File, bool, error) {
	file, direct, err := f.FS.CreateDirect(name)
	file, err = f.wrap(file, name, err)
	return file, direct, err
}

func (f *FS) OpenReadWrite(name string) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name)
	return f.wrap(file, name, err)
}

func (f *FS) Open(name string) (vfs.File, error) {
	file, err := f.FS.Open(name)
	return f.wrap(file, name, err)
}

func (f *FS) OpenDirect(name string) (vfs.File, bool, error) {
	file, direct, err := f.FS.OpenDirect(name)
	file, err = f.wrap(file, name, err)
	return file, direct, err
}

// SyncDir stalls and fails as File.Sync does.
func (f *FS) SyncDir(dir string) error {
	if err := f.beforeSync("fsync", dir); err != nil {
		return err
	}
	return f.FS.SyncDir(dir)
}

// faultyFile is an open file of an FS: writes, reads and syncs check the
// faults in force at the time of the call.
type faultyFile struct {
	vfs.File
	fs   *FS
	name string
}

func (f *faultyFile) Write(p []byte) (int, error) {
	if f.fs.current.Load().faults.WriteEIO {
		return 0, eio("write", f.name)
	}
	return f.File.Write(p)
}

func (f *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fs.current.Load().faults.ReadEIO {
		return 0, eio("read", f.name)
	}
	return f.File.ReadAt(p, off)
}

func (f *faultyFile) Sync() error {
	if err := f.fs.beforeSync("fdatasync", f.name); err != nil {
		return err
	}
	return f.File.Sync()
}
