package storage

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	pebblevfs "github.com/cockroachdb/pebble/vfs"
	"go.uber.org/goleak"

	"github.com/strata-log/strata/vfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testDir = "/data"

// env is a storage on crashable in-memory file systems: the journal on a
// vfs.MemFS, the index on Pebble's strict MemFS behind cutFS.
type env struct {
	t       *testing.T
	mem     *vfs.MemFS
	indexFS *pebblevfs.MemFS
	cut     *sync.RWMutex
	opts    Options
	s       *Storage
}

// newEnv returns an environment with the background loops off; tweak
// changes the options before each Open.
func newEnv(t *testing.T, tweak func(*Options)) *env {
	t.Helper()
	e := &env{t: t, mem: vfs.NewMem(), indexFS: pebblevfs.NewStrictMem(), cut: &sync.RWMutex{}}
	e.opts = Options{
		Dir:                   testDir,
		JournalMaxFileBytes:   64 << 10,
		DiskCheckInterval:     -1,
		CheckpointInterval:    -1,
		GCInterval:            -1,
		CompactBelowLiveRatio: 0.5,
		OnFatal:               func(error) {},
	}
	if tweak != nil {
		tweak(&e.opts)
	}
	e.open()
	t.Cleanup(func() {
		if e.s != nil {
			e.s.Close()
		}
	})
	return e
}

func (e *env) open() {
	e.t.Helper()
	if err := e.tryOpen(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) tryOpen() error {
	o := e.opts
	o.FS = e.mem
	o.IndexFS = cutFS{FS: e.indexFS, cut: e.cut}
	s, err := Open(context.Background(), o)
	if err != nil {
		return err
	}
	e.s = s
	return nil
}

// reopen closes cleanly and opens again.
func (e *env) reopen() {
	e.t.Helper()
	if err := e.s.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.s = nil
	e.open()
}

// crash cuts both file systems at one instant: the index keeps what it had
// synced, the journal what it had synced (plus, with torn, a garbled part
// of its unsynced tail). The running storage keeps going on the old state
// until stopCrashed. Safe to call from a vfs injector.
func (e *env) crash(torn bool, r *rand.Rand, before func()) *vfs.MemFS {
	e.cut.Lock()
	defer e.cut.Unlock()
	if before != nil {
		before()
	}
	e.indexFS.SetIgnoreSyncs(true)
	return e.mem.Crash(vfs.CrashOptions{TornTail: torn, Rand: r})
}

// restartAfterCrash closes the crashed storage and opens the crashed state:
// crashed is the journal's, and the index is reset to its synced state (or
// wiped).
func (e *env) restartAfterCrash(crashed *vfs.MemFS, wipeIndex bool) error {
	if e.s != nil {
		e.s.Close() // its writes after the cut go nowhere durable
		e.s = nil
	}
	e.indexFS.ResetToSyncedState()
	e.indexFS.SetIgnoreSyncs(false)
	if wipeIndex {
		e.indexFS = pebblevfs.NewStrictMem()
	}
	e.mem = crashed
	return e.tryOpen()
}

// cutFS makes each index sync atomic with respect to env.crash, so a crash
// is one instant across the journal and the index.
type cutFS struct {
	pebblevfs.FS
	cut *sync.RWMutex
}

func (c cutFS) wrap(f pebblevfs.File, err error) (pebblevfs.File, error) {
	if err != nil {
		return nil, err
	}
	return cutFile{File: f, cut: c.cut}, nil
}

func (c cutFS) Create(name string) (pebblevfs.File, error) { return c.wrap(c.FS.Create(name)) }
func (c cutFS) Open(name string, opts ...pebblevfs.OpenOption) (pebblevfs.File, error) {
	return c.wrap(c.FS.Open(name, opts...))
}
func (c cutFS) OpenReadWrite(name string, opts ...pebblevfs.OpenOption) (pebblevfs.File, error) {
	return c.wrap(c.FS.OpenReadWrite(name, opts...))
}
func (c cutFS) OpenDir(name string) (pebblevfs.File, error) { return c.wrap(c.FS.OpenDir(name)) }
func (c cutFS) ReuseForWrite(oldname, newname string) (pebblevfs.File, error) {
	return c.wrap(c.FS.ReuseForWrite(oldname, newname))
}

type cutFile struct {
	pebblevfs.File
	cut *sync.RWMutex
}

func (f cutFile) Sync() error {
	f.cut.RLock()
	defer f.cut.RUnlock()
	return f.File.Sync()
}

func (f cutFile) SyncData() error {
	f.cut.RLock()
	defer f.cut.RUnlock()
	return f.File.SyncData()
}

func (f cutFile) SyncTo(length int64) (bool, error) {
	f.cut.RLock()
	defer f.cut.RUnlock()
	return f.File.SyncTo(length)
}

// add adds an entry and waits for its acknowledgement.
func add(s *Storage, ledgerID, entryID uint64, lac int64, payload []byte, recovery bool) error {
	done := make(chan error, 1)
	if err := s.Add(context.Background(), ledgerID, entryID, lac, payload, recovery, func(err error) { done <- err }); err != nil {
		return err
	}
	return <-done
}

func mustAdd(t *testing.T, s *Storage, ledgerID, entryID uint64, lac int64, payload []byte) {
	t.Helper()
	if err := add(s, ledgerID, entryID, lac, payload, false); err != nil {
		t.Fatalf("add %d/%d: %v", ledgerID, entryID, err)
	}
}

// payloadFor is the deterministic content of an entry, 1..maxLen bytes.
func payloadFor(seed, ledgerID, entryID uint64, maxLen int) []byte {
	r := rand.New(rand.NewPCG(seed^ledgerID*0x9e3779b97f4a7c15, entryID))
	b := make([]byte, 1+r.IntN(maxLen))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustRead(t *testing.T, s *Storage, ledgerID, entryID uint64, want []byte) {
	t.Helper()
	e, err := s.Read(ledgerID, entryID)
	if err != nil {
		t.Fatalf("read %d/%d: %v", ledgerID, entryID, err)
	}
	if string(e.Payload) != string(want) {
		t.Fatalf("read %d/%d: payload differs", ledgerID, entryID)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

// waitTimeout bounds every wait for something another goroutine does.
const waitTimeout = 10 * time.Second
