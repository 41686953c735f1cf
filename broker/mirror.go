package broker

import (
	"context"
	"errors"
	"log/slog"
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
}

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
	m.kvs = make(map[string]*metadpb.KeyValue, len(kvs))
	for _, kv := range kvs {
		m.kvs[kv.Key] = kv
	}
	m.rev = rev
	m.notifyLocked()
	if !m.loaded {
		m.loaded = true
		close(m.ready)
	}
	m.mu.Unlock()
	for res := range m.meta.Watch(ctx, m.prefix, rev+1) {
		if res.Err != nil {
			return res.Err
		}
		m.mu.Lock()
		for _, ev := range res.Events {
			if ev.Type == metadpb.Event_DELETE {
				delete(m.kvs, ev.Kv.Key)
			} else {
				m.kvs[ev.Kv.Key] = ev.Kv
			}
		}
		m.rev = res.Revision
		if len(res.Events) > 0 {
			m.notifyLocked()
		}
		m.mu.Unlock()
	}
	return ctx.Err()
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
