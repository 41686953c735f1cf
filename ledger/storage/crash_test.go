package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/vfs"
)

// ledgerModel is what the test knows about one ledger. "Acked" means
// acknowledged before the crash, or seen after a restart (then durable).
type ledgerModel struct {
	maxAttempted    int64 // highest entry id an Add was tried for
	acked           map[uint64]bool
	maxAcked        int64
	lacAcked        int64
	fenceAttempted  bool
	fenceAcked      bool
	deleteAttempted bool
	deleteAcked     bool
}

type crashModel struct {
	seed    uint64
	crashed atomic.Bool
	acks    atomic.Int64
	kick    chan struct{}
	// Coverage, logged per seed.
	midCrashes, wipes, removedFiles, compactedFiles, fences, deletes atomic.Int64

	mu      sync.Mutex
	ledgers map[uint64]*ledgerModel
}

func (m *crashModel) ledger(id uint64) *ledgerModel {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.ledgers[id]
	if l == nil {
		l = &ledgerModel{maxAttempted: -1, acked: map[uint64]bool{}, maxAcked: -1, lacAcked: -1}
		m.ledgers[id] = l
	}
	return l
}

// ack records an acknowledgement, if it came before the crash.
func (m *crashModel) ack(fn func()) {
	if m.crashed.Load() {
		return
	}
	m.mu.Lock()
	fn()
	m.mu.Unlock()
	m.acks.Add(1)
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *crashModel) payload(ledgerID, entryID uint64) []byte {
	return payloadFor(m.seed, ledgerID, entryID, 200)
}

// TestCrashProperty: concurrent adds over several ledgers, fences, explicit
// LACs, deletes and GC; a power cut at a random journal operation (torn
// tails, the index back to its last sync, sometimes the whole index lost);
// restart; every acknowledged add of a ledger not deleted reads back
// intact, every acknowledged fence holds, deleted ledgers stay deleted, and
// Read never returns anything but the exact payload or ErrNoEntry for an
// entry never acknowledged. Three crashes per seed.
func TestCrashProperty(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCrashSeed(t, seed) })
	}
}

func runCrashSeed(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 42))
	withGC := seed%2 == 0 // without GC, a crash may also lose the whole index
	e := newEnv(t, func(o *Options) {
		o.JournalMaxFileBytes = 8 << 10
		o.JournalPreallocateBytes = 4 << 10
		o.CompactBelowLiveRatio = 0.7
		if r.IntN(2) == 0 {
			o.CheckpointInterval = time.Millisecond
		}
	})
	m := &crashModel{seed: seed, ledgers: map[uint64]*ledgerModel{}, kick: make(chan struct{}, 1)}
	for round := range uint64(3) {
		var ops atomic.Int64
		crashAt := int64(20 + r.IntN(200))
		crashed := make(chan *vfs.MemFS, 1)
		tornRand := rand.New(rand.NewPCG(seed, round))
		m.crashed.Store(false)
		e.mem.InjectError(func(vfs.Op, string) error {
			if ops.Add(1) == crashAt {
				crashed <- e.crash(true, tornRand, func() { m.crashed.Store(true) })
			}
			return nil
		})
		runCrashRound(t, e.s, m, r, round, withGC)
		var fs *vfs.MemFS
		select {
		case fs = <-crashed:
			m.midCrashes.Add(1)
		default:
			e.mem.InjectError(nil)
			fs = e.crash(true, tornRand, func() { m.crashed.Store(true) })
		}
		wipe := !withGC && r.IntN(3) == 0
		if wipe {
			m.wipes.Add(1)
		}
		if err := e.restartAfterCrash(fs, wipe); err != nil {
			t.Fatalf("round %d: reopen after crash: %v", round, err)
		}
		if e.s.rebuilt != (wipe && withGC) {
			t.Fatalf("round %d: index rebuilt %v, wiped %v", round, e.s.rebuilt, wipe)
		}
		verifyCrashModel(t, e.s, m, round)
	}
	t.Logf("seed %d: %d acks, %d of 3 crashes mid-round, %d index wipes, %d fences, %d deletes, "+
		"GC removed %d files (%d compacted)", seed, m.acks.Load(), m.midCrashes.Load(), m.wipes.Load(),
		m.fences.Load(), m.deletes.Load(), m.removedFiles.Load(), m.compactedFiles.Load())
}

// runCrashRound runs writers and a controller until they finish or the
// crash happens.
func runCrashRound(t *testing.T, s *Storage, m *crashModel, r *rand.Rand, round uint64, withGC bool) {
	ctx := context.Background()
	const ledgersPerRound = 5
	type writer struct {
		id   uint64
		stop chan struct{}
		done chan struct{}
	}
	var writers []*writer
	for i := range uint64(ledgersPerRound) {
		w := &writer{id: round*100 + i + 1, stop: make(chan struct{}), done: make(chan struct{})}
		writers = append(writers, w)
		entries := uint64(20 + r.IntN(60))
		go func() {
			defer close(w.done)
			window := make(chan struct{}, 8)
			defer func() {
				for range cap(window) {
					window <- struct{}{} // wait for outstanding adds
				}
			}()
			l := m.ledger(w.id)
			for entry := range entries {
				select {
				case <-w.stop:
					return
				default:
				}
				if m.crashed.Load() {
					return
				}
				window <- struct{}{}
				m.mu.Lock()
				l.maxAttempted = int64(entry)
				m.mu.Unlock()
				lac := int64(entry) - 1
				err := s.Add(ctx, w.id, entry, lac, m.payload(w.id, entry), false, func(err error) {
					<-window
					if err != nil {
						t.Errorf("add %d/%d: done(%v)", w.id, entry, err)
						return
					}
					m.ack(func() {
						l.acked[entry] = true
						l.maxAcked = max(l.maxAcked, int64(entry))
						l.lacAcked = max(l.lacAcked, lac)
					})
				})
				if err != nil {
					<-window
					if !errors.Is(err, ErrFenced) {
						t.Errorf("add %d/%d: %v", w.id, entry, err)
					}
					return
				}
			}
		}()
	}
	writersDone := make(chan struct{})
	go func() {
		for _, w := range writers {
			<-w.done
		}
		close(writersDone)
	}()

	for range 4 + r.IntN(10) {
		// Let some adds through between actions.
		target := m.acks.Load() + int64(r.IntN(30))
	wait:
		for m.acks.Load() < target && !m.crashed.Load() {
			select {
			case <-m.kick:
			case <-writersDone:
				break wait
			}
		}
		if m.crashed.Load() {
			break
		}
		w := writers[r.IntN(len(writers))]
		l := m.ledger(w.id)
		m.mu.Lock()
		deleted := l.deleteAttempted
		m.mu.Unlock()
		if deleted {
			continue
		}
		switch n := r.IntN(100); {
		case n < 25:
			m.mu.Lock()
			l.fenceAttempted = true
			m.mu.Unlock()
			if _, err := s.Fence(ctx, w.id); err != nil {
				t.Errorf("fence %d: %v", w.id, err)
			}
			m.ack(func() { l.fenceAcked = true })
			m.fences.Add(1)
			// The new writer rewrites what it found, with recovery adds.
			m.mu.Lock()
			last := l.maxAcked
			m.mu.Unlock()
			for entry := max(last-3, 0); entry <= last; entry++ {
				if err := add(s, w.id, uint64(entry), entry-1, m.payload(w.id, uint64(entry)), true); err != nil {
					t.Errorf("recovery add: %v", err)
				}
			}
		case n < 45:
			lac := int64(r.IntN(100)) - 1
			// The bookie keeps a LAC only up to the highest entry it
			// holds (H1): entries acknowledged before the call are held.
			m.mu.Lock()
			held := l.maxAcked
			m.mu.Unlock()
			if err := s.WriteLAC(ctx, w.id, lac); err != nil {
				t.Errorf("write LAC: %v", err)
			}
			m.ack(func() { l.lacAcked = max(l.lacAcked, min(lac, held)) })
		case n < 60:
			close(w.stop)
			<-w.done
			m.mu.Lock()
			l.deleteAttempted = true
			m.mu.Unlock()
			if err := s.Delete(ctx, w.id); err != nil {
				t.Errorf("delete %d: %v", w.id, err)
			}
			m.ack(func() { l.deleteAcked = true })
			m.deletes.Add(1)
		default:
			if withGC {
				res, err := s.GC(ctx)
				if err != nil {
					t.Errorf("GC: %v", err)
				}
				m.removedFiles.Add(int64(res.RemovedFiles))
				m.compactedFiles.Add(int64(res.CompactedFiles))
			}
		}
	}
	for _, w := range writers {
		select {
		case <-w.stop:
		default:
			close(w.stop)
		}
	}
	<-writersDone
}

// verifyCrashModel checks the restarted storage against the model and
// promotes what it finds (now durable) into the model.
func verifyCrashModel(t *testing.T, s *Storage, m *crashModel, round uint64) {
	t.Helper()
	if s.Limbo() {
		t.Fatalf("round %d: limbo after a crash that only tore unsynced tails", round)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, l := range m.ledgers {
		st, exists := s.State(id)
		if l.deleteAttempted && !exists {
			l.deleteAcked = true
		}
		if l.deleteAcked {
			if exists {
				t.Fatalf("round %d: deleted ledger %d has state %+v", round, id, st)
			}
			for entry := range uint64(l.maxAttempted + 1) {
				if _, err := s.Read(id, entry); !errors.Is(err, ErrNoEntry) {
					t.Fatalf("round %d: deleted ledger %d entry %d: %v", round, id, entry, err)
				}
			}
			if l.fenceAcked { // F1: the fence outlives the delete
				err := add(s, id, uint64(l.maxAttempted+1), -1, []byte("zombie"), false)
				if !st.Fenced || !errors.Is(err, ErrFenced) {
					t.Fatalf("round %d: deleted fenced ledger %d: state %+v, zombie add: %v", round, id, st, err)
				}
			}
			continue
		}
		l.deleteAttempted = false // the delete did not survive: the ledger lives on
		if (l.maxAcked >= 0 || l.fenceAcked || l.lacAcked >= 0) && !exists {
			t.Fatalf("round %d: ledger %d lost its state", round, id)
		}
		for entry := range uint64(l.maxAttempted + 1) {
			got, err := s.Read(id, entry)
			switch {
			case err == nil:
				if string(got.Payload) != string(m.payload(id, entry)) || got.LAC != int64(entry)-1 {
					t.Fatalf("round %d: ledger %d entry %d: wrong data returned", round, id, entry)
				}
				l.acked[entry] = true
				l.maxAcked = max(l.maxAcked, int64(entry))
			case errors.Is(err, ErrNoEntry):
				if l.acked[entry] {
					t.Fatalf("round %d: acknowledged entry %d/%d lost", round, id, entry)
				}
			default:
				t.Fatalf("round %d: ledger %d entry %d: %v", round, id, entry, err)
			}
		}
		if st.LastEntryID < l.maxAcked || st.LAC < l.lacAcked {
			t.Fatalf("round %d: ledger %d state %+v, acknowledged last entry %d LAC %d",
				round, id, st, l.maxAcked, l.lacAcked)
		}
		l.lacAcked = max(l.lacAcked, st.LAC)
		if st.Fenced {
			l.fenceAcked = true
		}
		if l.fenceAcked {
			if !st.Fenced {
				t.Fatalf("round %d: acknowledged fence of ledger %d lost", round, id)
			}
			err := add(s, id, uint64(l.maxAttempted+1), -1, []byte("zombie"), false)
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("round %d: add to fenced ledger %d: %v", round, id, err)
			}
		}
	}
}
