package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/metad/metaclient"
)

// Elector picks the one replicator that runs at a time. Leadership is an
// efficiency, not a safety, device: every repair is a compare-and-set that
// re-checks the metadata, and concurrent recoveries converge, so two
// replicators that briefly both believe they lead (a lease that expired
// before its holder noticed) only duplicate work.
type Elector interface {
	// Campaign blocks until the caller leads, and returns a channel that
	// is closed when the leadership is lost and a function that gives it
	// up (idempotent). It fails only with ctx's error or when the
	// elector cannot work at all (e.g. its client is closed).
	Campaign(ctx context.Context) (lost <-chan struct{}, resign func(), err error)
}

// MetadElector elects through metad: the leader holds LeaderKey, written
// create-only (expected version 0) and attached to a session lease. It
// vanishes when the leader resigns (the lease is revoked) or dies (the
// lease expires after TTL), and a candidate that polls the key every
// TTL/2 takes over.
type MetadElector struct {
	Meta *metaclient.Client
	// ID names the candidate in the LeaderRecord.
	ID string
	// TTL of the lease; a dead leader is replaced within about 1.5 TTL.
	TTL    time.Duration
	Logger *slog.Logger
}

// Campaign implements Elector.
func (e *MetadElector) Campaign(ctx context.Context) (<-chan struct{}, func(), error) {
	log := e.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	poll := max(e.TTL/2, 100*time.Millisecond)
	var sess *metaclient.Session
	defer func() {
		if sess != nil {
			sess.Close()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if sess != nil && isDone(sess.Done()) {
			sess.Close()
			sess = nil
		}
		leading, err := e.attempt(ctx, &sess)
		switch {
		case leading:
			s := sess
			sess = nil // the caller owns it now
			log.Info("elected replication leader", "key", LeaderKey, "lease", s.Lease())
			return s.Done(), func() { s.Close() }, nil
		case errors.Is(err, metaclient.ErrClosed):
			return nil, nil, err
		case err != nil:
			log.Debug("replication leader campaign", "err", err)
		}
		if err := ctxtime.Sleep(ctx, poll); err != nil {
			return nil, nil, err
		}
	}
}

// attempt makes one try at the leader key, creating a session if needed.
func (e *MetadElector) attempt(ctx context.Context, sess **metaclient.Session) (bool, error) {
	// A read first: candidates that find a leader write nothing.
	kv, err := e.Meta.Get(ctx, LeaderKey)
	switch {
	case err == nil:
		if *sess == nil || kv.GetLease() != (*sess).Lease() {
			return false, nil
		}
		return true, nil // our own earlier put, whose answer was lost
	case !errors.Is(err, metaclient.ErrNotFound):
		return false, err
	}
	if *sess == nil {
		s, err := e.Meta.NewSession(ctx, e.TTL)
		if err != nil {
			return false, fmt.Errorf("replication: leader session: %w", err)
		}
		*sess = s
	}
	value, _ := json.Marshal(LeaderRecord{ID: e.ID, SinceMs: time.Now().UnixMilli()})
	_, err = e.Meta.Put(ctx, LeaderKey, value, metaclient.WithExpectedVersion(0), metaclient.WithLease((*sess).Lease()))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, metaclient.ErrVersionConflict):
		return false, nil
	case errors.Is(err, metaclient.ErrLeaseNotFound):
		(*sess).Close()
		*sess = nil
		return false, err
	}
	return false, err // unknown outcome: the next Get decides
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Leader returns the current leader's record, or nil when no replicator
// leads.
func Leader(ctx context.Context, kv KV) (*LeaderRecord, error) {
	kvs, err := kv.List(ctx, LeaderKey)
	if err != nil {
		return nil, err
	}
	for _, e := range kvs {
		if e.Key != LeaderKey {
			continue
		}
		var r LeaderRecord
		if err := json.Unmarshal(e.Value, &r); err != nil {
			return nil, fmt.Errorf("replication: %s is unreadable: %w", LeaderKey, err)
		}
		return &r, nil
	}
	return nil, nil
}
