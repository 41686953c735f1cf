package kv

import (
	"slices"
	"sort"
	"strings"

	"github.com/strata-log/strata/proto/metadpb"
)

// history is the watch history: one WatchResponse per revision, holding
// every event of that revision, for the most recent revisions. It keeps at
// most maxRevisions entries and, beyond the newest one, at most maxBytes of
// events (eventBytes): a few large values must not pin gigabytes on every
// member. Dropping the oldest entry makes its revision
// the compact revision.
//
// Invariants: entries are in strictly increasing revision order and, since
// every revision bump records its events, cover exactly the revisions
// (compactRevision, store revision]. Entries are immutable once appended.
// bytes is the sum of eventBytes over the entries.
type history struct {
	maxRevisions int
	maxBytes     int64
	buf          []*metadpb.WatchResponse // buf[head:] are the entries, oldest first
	head         int
	bytes        int64
	// compactRevision is the newest revision no longer in the history.
	compactRevision int64
}

func newHistory(maxRevisions int, maxBytes int64) history {
	return history{maxRevisions: maxRevisions, maxBytes: maxBytes}
}

// eventOverheadBytes approximates what an event costs besides its key and
// value bytes (the Event, KeyValue and slice headers).
const eventOverheadBytes = 96

// responseBytes is what a history entry is charged.
func responseBytes(r *metadpb.WatchResponse) int64 {
	n := int64(0)
	for _, e := range r.GetEvents() {
		n += eventOverheadBytes + int64(len(e.GetKv().GetKey())+len(e.GetKv().GetValue()))
	}
	return n
}

func (h *history) len() int { return len(h.buf) - h.head }

// at returns the i-th oldest entry.
func (h *history) at(i int) *metadpb.WatchResponse {
	return h.buf[h.head+i]
}

// append records the events of a new, higher revision, then drops the
// oldest entries while there are more than maxRevisions, or more than
// maxBytes and more than one: the newest revision always stays, so a
// watcher that is up to date never has to re-list.
func (h *history) append(r *metadpb.WatchResponse) {
	h.buf = append(h.buf, r)
	h.bytes += responseBytes(r)
	for h.len() > h.maxRevisions || (h.bytes > h.maxBytes && h.len() > 1) {
		old := h.buf[h.head]
		h.compactRevision = old.Revision
		h.bytes -= responseBytes(old)
		h.buf[h.head] = nil
		h.head++
	}
	// Reclaim the dropped prefix once it is half the slice: amortised O(1).
	if h.head > 0 && h.head >= len(h.buf)/2 {
		n := copy(h.buf, h.buf[h.head:])
		clear(h.buf[n:])
		h.buf, h.head = h.buf[:n], 0
	}
}

// all returns the entries, oldest first, in a new slice.
func (h *history) all() []*metadpb.WatchResponse {
	return slices.Clone(h.buf[h.head:])
}

func (h *history) firstRevision() (int64, bool) {
	if h.len() == 0 {
		return 0, false
	}
	return h.at(0).Revision, true
}

// lastRevision returns the newest revision in the history, or the compact
// revision when it is empty.
func (h *history) lastRevision() int64 {
	if h.len() == 0 {
		return h.compactRevision
	}
	return h.at(h.len() - 1).Revision
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
