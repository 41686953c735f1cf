package broker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/metadpb"
)

// mirror keeps an in-memory copy of every key under a metad prefix: a
// linearizable list, then a watch from the list's revision, re-listing when
// the watch falls behind metad's history. Readers get a consistent snapshot
// and a channel that is closed at every change.
type mirror struct {
	meta   *metaclient.Client
	prefix string
	log    *slog.Logger

	mu      sync.Mutex
	kvs     map[string]*metadpb.KeyValue
	rev     int64
	loaded  bool
	changed chan struct{}
	ready   chan struct{}
	// journal is the keys changed since the last listing, in order:
	// journal[i] is change journalBase+i of listing number listing. It
	// lets a follower (delta) read what changed instead of every key, and
	// keeps at most maxMirrorJournal keys.
	journal     []string
	journalBase uint64
	listing     uint64
}

// maxMirrorJournal bounds a mirror's journal of changed keys; a follower
// that fell further behind reads every key (delta's all).
const maxMirrorJournal = 1 << 16

// mirrorCursor is a follower's place in a mirror's changes; the zero
// cursor is before everything.
type mirrorCursor struct{ listing, pos uint64 }

func newMirror(meta *metaclient.Client, prefix string, log *slog.Logger) *mirror {
	return &mirror{meta: meta, prefix: prefix, log: log.With("mirror", prefix),
		kvs: map[string]*metadpb.KeyValue{}, changed: make(chan struct{}), ready: make(chan struct{})}
}

// run keeps the mirror current until ctx ends.
func (m *mirror) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := m.sync(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, metaclient.ErrCompacted) {
			m.log.Info("watch fell behind metad's history; listing again")
			continue
		}
		m.log.Warn("mirror stream ended; listing again", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (m *mirror) sync(ctx context.Context) error {
	kvs, rev, err := m.meta.List(ctx, m.prefix)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.loadLocked(kvs, rev)
	m.mu.Unlock()
	for res := range m.meta.Watch(ctx, m.prefix, rev+1) {
		if res.Err != nil {
			return res.Err
		}
		m.mu.Lock()
		m.applyLocked(res.Events, res.Revision)
		m.mu.Unlock()
	}
	return ctx.Err()
}

// loadLocked replaces the mirror's records with a listing's: a new
// listing, so every follower reads every key next (delta's all).
func (m *mirror) loadLocked(kvs []*metadpb.KeyValue, rev int64) {
	m.kvs = make(map[string]*metadpb.KeyValue, len(kvs))
	for _, kv := range kvs {
		m.kvs[kv.Key] = kv
	}
	m.rev = rev
	m.listing++
	m.journal, m.journalBase = nil, 0
	m.notifyLocked()
	if !m.loaded {
		m.loaded = true
		close(m.ready)
	}
}

// applyLocked applies a watch answer's events, up to revision rev.
func (m *mirror) applyLocked(events []*metadpb.Event, rev int64) {
	for _, ev := range events {
		if ev.Type == metadpb.Event_DELETE {
			delete(m.kvs, ev.Kv.Key)
		} else {
			m.kvs[ev.Kv.Key] = ev.Kv
		}
		m.journal = append(m.journal, ev.Kv.Key)
	}
	if n := len(m.journal); n > maxMirrorJournal {
		drop := n - maxMirrorJournal/2
		m.journal = slices.Clone(m.journal[drop:])
		m.journalBase += uint64(drop)
	}
	m.rev = rev
	if len(events) > 0 {
		m.notifyLocked()
	}
}

// delta returns the keys changed since cur (a key may repeat; its
// record is what get returns now), the cursor to pass next time, and a
// channel closed at the next change. all reports that the changes since
// cur are not kept (the zero cursor, a listing since, or a follower more
// than maxMirrorJournal changes behind): any key may have changed.
func (m *mirror) delta(cur mirrorCursor) (keys []string, next mirrorCursor, all bool, changed <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	next = mirrorCursor{listing: m.listing, pos: m.journalBase + uint64(len(m.journal))}
	if cur.listing == 0 || cur.listing != m.listing || cur.pos < m.journalBase {
		return nil, next, true, m.changed
	}
	return slices.Clone(m.journal[cur.pos-m.journalBase:]), next, false, m.changed
}

func (m *mirror) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// snapshot returns the keys and a channel closed at the next change.
func (m *mirror) snapshot() (map[string]*metadpb.KeyValue, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*metadpb.KeyValue, len(m.kvs))
	for k, v := range m.kvs {
		out[k] = v
	}
	return out, m.changed
}

// each calls fn with every record, holding the mirror's lock: fn must not
// call the mirror.
func (m *mirror) each(fn func(kv *metadpb.KeyValue)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, kv := range m.kvs {
		fn(kv)
	}
}

// mirrorAwaitMax bounds how long a writer waits for the mirror to show its
// own write: when the watch is down the write has still happened, and the
// mirror catches up when the watch is back.
const mirrorAwaitMax = 5 * time.Second

// await returns once the mirror holds metad's state at revision rev or
// later (a write this broker made, so that what it answers next includes
// it), when ctx ends, or after mirrorAwaitMax.
func (m *mirror) await(ctx context.Context, rev int64) {
	timeout := time.NewTimer(mirrorAwaitMax)
	defer timeout.Stop()
	for {
		m.mu.Lock()
		caughtUp, changed := m.rev >= rev, m.changed
		m.mu.Unlock()
		if caughtUp {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-timeout.C:
			m.log.Warn("mirror did not reach a written revision", "revision", rev, "in", mirrorAwaitMax)
			return
		}
	}
}

// get returns one key, or nil.
func (m *mirror) get(key string) *metadpb.KeyValue {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kvs[key]
}

// size is how many records the mirror holds.
func (m *mirror) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.kvs)
}

// changes returns a channel closed at the next change.
func (m *mirror) changes() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *mirror) isLoaded() bool {
	select {
	case <-m.ready:
		return true
	default:
		return false
	}
}
