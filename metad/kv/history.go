package kv

import (
	"slices"
	"sort"
	"strings"

	"github.com/strata-log/strata/proto/metadpb"
)

// history is the watch history: one WatchResponse per revision, holding
// every event of that revision, for the most recent revisions. It is a ring
// buffer that grows up to maxRevisions entries and then overwrites the
// oldest.
//
// Invariants: entries are in strictly increasing revision order and, since
// every revision bump records its events, cover exactly the revisions
// (compactRevision, store revision]. Entries are immutable once appended.
type history struct {
	maxRevisions int
	buf          []*metadpb.WatchResponse
	start        int // index in buf of the oldest entry; 0 until buf is full
	// compactRevision is the newest revision no longer in the history.
	compactRevision int64
}

func newHistory(maxRevisions int) history {
	return history{maxRevisions: maxRevisions}
}

func (h *history) len() int { return len(h.buf) }

// at returns the i-th oldest entry.
func (h *history) at(i int) *metadpb.WatchResponse {
	return h.buf[(h.start+i)%len(h.buf)]
}

// append records the events of a new, higher revision, dropping the oldest
// revision when the history is full.
func (h *history) append(r *metadpb.WatchResponse) {
	if len(h.buf) < h.maxRevisions {
		h.buf = append(h.buf, r)
		return
	}
	h.compactRevision = h.buf[h.start].Revision
	h.buf[h.start] = r
	h.start = (h.start + 1) % len(h.buf)
}

// all returns the entries, oldest first, in a new slice.
func (h *history) all() []*metadpb.WatchResponse {
	out := make([]*metadpb.WatchResponse, 0, len(h.buf))
	out = append(out, h.buf[h.start:]...)
	return append(out, h.buf[:h.start]...)
}

func (h *history) firstRevision() (int64, bool) {
	if len(h.buf) == 0 {
		return 0, false
	}
	return h.at(0).Revision, true
}

// lastRevision returns the newest revision in the history, or the compact
// revision when it is empty.
func (h *history) lastRevision() int64 {
	if len(h.buf) == 0 {
		return h.compactRevision
	}
	return h.at(len(h.buf) - 1).Revision
}

// Events returns the watch history of keys starting with prefix ("" for
// all keys) from revision from on, inclusive: one WatchResponse per revision
// that has matching events, in revision order, each holding every matching
// event of its revision and never more than one revision. It returns at most
// maxRevisions responses (DefaultEventsMaxRevisions when <= 0); a caller
// continues from the last response's Revision+1. current is the store's
// revision at the time of the read, so a caller that got fewer than
// maxRevisions responses has seen everything up to current.
//
// If from <= CompactRevision() the history no longer reaches back far
// enough and Events returns a *CompactedError (errors.Is(err,
// ErrCompacted)). If from > current it returns no responses and no error.
//
// The responses are new, but the Events and KeyValues inside them are shared
// with the store's history and with other callers: treat them as read-only.
func (s *Store) Events(prefix string, from int64, maxRevisions int) (resp []*metadpb.WatchResponse, current int64, err error) {
	if maxRevisions <= 0 {
		maxRevisions = DefaultEventsMaxRevisions
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	current = s.mu.revision
	h := &s.mu.history
	if from <= h.compactRevision {
		return nil, current, &CompactedError{CompactRevision: h.compactRevision}
	}
	if from > current {
		return nil, current, nil
	}
	i := sort.Search(h.len(), func(i int) bool { return h.at(i).Revision >= from })
	for ; i < h.len() && len(resp) < maxRevisions; i++ {
		r := h.at(i)
		var events []*metadpb.Event
		if prefix == "" {
			// Clip so that a caller's append cannot write into the history.
			events = slices.Clip(r.Events)
		} else {
			for _, e := range r.Events {
				if strings.HasPrefix(e.Kv.Key, prefix) {
					events = append(events, e)
				}
			}
		}
		if len(events) > 0 {
			resp = append(resp, &metadpb.WatchResponse{Events: events, Revision: r.Revision})
		}
	}
	return resp, current, nil
}
