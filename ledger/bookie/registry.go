package bookie

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
)

// registrar keeps the bookie's BookieInfo in metad on a lease, re-creating
// the lease when it is lost, and rewriting the record when what it says
// changes (state, or free space by more than refreshFreeBytes).
type registrar struct {
	meta       *metaclient.Client
	id         string
	ttl        time.Duration
	info       func() *bookiepb.BookieInfo
	changed    <-chan struct{} // signalled when the state changes
	log        *slog.Logger
	registered atomic.Bool
}

// refreshFreeBytes: free space changes smaller than this are not worth a
// metadata write.
const refreshFreeBytes = 256 << 20

// run registers and keeps the registration until ctx ends, then revokes the
// lease so the registration vanishes at once.
func (r *registrar) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := r.session(ctx)
		r.registered.Store(false)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("registration lost; registering again", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// session holds one lease until it is lost or ctx ends.
func (r *registrar) session(ctx context.Context) error {
	sess, err := r.meta.NewSession(ctx, r.ttl)
	if err != nil {
		return err
	}
	// Close revokes the lease (best effort), so a clean stop deregisters at
	// once instead of after the TTL.
	defer sess.Close()
	var last *bookiepb.BookieInfo
	put := func() error {
		info := r.info()
		if last != nil && !worthRefresh(last, info) {
			return nil
		}
		value, err := proto.Marshal(info)
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, r.ttl)
		defer cancel()
		if _, err := r.meta.Put(pctx, bookies.RegistryPrefix+r.id, value, metaclient.WithLease(sess.Lease())); err != nil {
			return err
		}
		if last == nil {
			r.log.Info("registered in metad", "key", bookies.RegistryPrefix+r.id, "lease", sess.Lease(), "state", info.State.String())
		}
		last = info
		r.registered.Store(true)
		return nil
	}
	if err := put(); err != nil {
		return err
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
			return errLeaseLost
		case <-r.changed:
		case <-ticker.C:
		}
		if err := put(); err != nil {
			r.log.Warn("registration refresh failed", "err", err)
		}
	}
}

var errLeaseLost = errors.New("bookie: registration lease lost")

func worthRefresh(old, cur *bookiepb.BookieInfo) bool {
	if old.State != cur.State || old.Address != cur.Address || old.TotalBytes != cur.TotalBytes {
		return true
	}
	diff := int64(old.FreeBytes) - int64(cur.FreeBytes)
	return diff > refreshFreeBytes || -diff > refreshFreeBytes
}
