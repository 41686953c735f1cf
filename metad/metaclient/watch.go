package metaclient

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/metadpb"
)

// WatchResult is one delivery of a watch.
type WatchResult struct {
	// Events are the changes of one or more whole revisions, in revision
	// order. Empty for a progress notification.
	Events []*metadpb.Event
	// Revision is the highest revision this result covers: every change
	// under the prefix up to Revision has been delivered. To resume
	// elsewhere, watch from Revision+1.
	Revision int64
	// Err is set on the final result only, just before the channel closes:
	// a *CompactedError (errors.Is ErrCompacted), a request the server
	// rejects (e.g. codes.InvalidArgument), or ErrClosed.
	Err error
}

// errStreamEnded stands for a watch stream the server ended without an
// error; the watch resubscribes.
var errStreamEnded = errors.New("metaclient: watch stream ended by the server")

// Watch streams every change under prefix from fromRevision on (0: from
// now, that is after the store's current revision, read linearizably when
// the watch starts). The channel delivers each revision exactly once and in
// order, including progress notifications (results without events) whenever
// the covered revision advances. When a stream breaks, the watch
// resubscribes, on the next endpoint and with backoff, from the last
// delivered revision+1, dropping anything the server repeats. It ends, and
// closes the channel, when ctx is done or the client is closed, or after
// sending a final result with Err (see WatchResult.Err). The caller must
// keep receiving until the channel closes or ctx is done; a slow receiver
// slows the stream, it does not grow a buffer.
func (c *Client) Watch(ctx context.Context, prefix string, fromRevision int64) <-chan WatchResult {
	ch := make(chan WatchResult)
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	err := c.goAttach(func() {
		defer close(ch)
		defer cancel()
		defer stop()
		c.watch(wctx, prefix, fromRevision, ch)
	})
	if err != nil {
		stop()
		cancel()
		closed := make(chan WatchResult, 1)
		closed <- WatchResult{Err: &callError{op: "watch", key: prefix, kinds: []error{ErrClosed}}}
		close(closed)
		return closed
	}
	return ch
}

// watch runs one watch until ctx ends or a terminal error.
func (c *Client) watch(ctx context.Context, prefix string, next int64, ch chan<- WatchResult) {
	o := op{name: "watch", key: prefix, kind: kindRead}
	log := c.log.With("prefix", prefix)
	if next <= 0 {
		// "From now" must mean the same revision across resubscriptions,
		// so pin it before the first stream.
		rev, err := c.revision(ctx, prefix)
		if err != nil {
			if ctx.Err() == nil {
				deliver(ctx, ch, WatchResult{Err: err})
			}
			return
		}
		next = rev + 1
	}
	b := newBackoff()
	ep := c.preferred()
	for {
		progressed, err := c.watchStream(ctx, ep, prefix, &next, ch)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			b.reset()
		}
		if watchTerminal(err) {
			log.Debug("watch failed", "endpoint", ep, "next", next, "err", err)
			deliver(ctx, ch, WatchResult{Err: translate(&o, err, false)})
			return
		}
		wait := b.next()
		nextEp := c.next(ep)
		log.Debug("watch resubscribing", "endpoint", ep, "next_endpoint", nextEp, "from", next, "wait", wait, "err", err)
		ep = nextEp
		if !c.sleep(ctx, wait) {
			return
		}
	}
}

// watchStream runs one Watch stream at ep from *next, delivering to ch and
// advancing *next past every delivered revision. It returns whether it
// delivered anything and the error that ended the stream.
func (c *Client) watchStream(ctx context.Context, ep, prefix string, next *int64, ch chan<- WatchResult) (bool, error) {
	mc, err := c.stub(ep)
	if err != nil {
		return false, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := mc.Watch(sctx, &metadpb.WatchRequest{Prefix: prefix, StartRevision: *next, ProgressNotify: true})
	if err != nil {
		return false, err
	}
	progressed := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errStreamEnded
			}
			return progressed, err
		}
		rev := resp.GetRevision()
		var events []*metadpb.Event
		for _, ev := range resp.GetEvents() {
			r := ev.GetKv().GetModRevision()
			if r < *next {
				continue // already delivered before a resubscription
			}
			events = append(events, ev)
			rev = max(rev, r)
		}
		if rev < *next {
			continue // nothing new
		}
		if !deliver(ctx, ch, WatchResult{Events: events, Revision: rev}) {
			return progressed, ctx.Err()
		}
		*next = rev + 1
		progressed = true
	}
}

// watchTerminal reports whether a watch error will not go away by
// resubscribing.
func watchTerminal(err error) bool {
	if errors.Is(err, ErrClosed) {
		return true
	}
	info := rpcerror.Info(err)
	if info != nil {
		if info.Reason == rpcerror.ReasonCompacted {
			return true
		}
		if info.Retryable {
			return false
		}
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated,
		codes.Unimplemented, codes.FailedPrecondition, codes.OutOfRange:
		return true
	}
	return false
}

// revision returns the store's current revision, read linearizably.
func (c *Client) revision(ctx context.Context, prefix string) (int64, error) {
	var rev int64
	err := c.call(ctx, op{name: "watch", key: prefix, kind: kindRead},
		func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
			resp, err := mc.List(ctx, &metadpb.ListRequest{Prefix: prefix, Limit: 1, KeysOnly: true}, co...)
			rev = resp.GetRevision()
			return err
		})
	return rev, err
}

// deliver sends r on ch unless ctx ends first.
func deliver(ctx context.Context, ch chan<- WatchResult, r WatchResult) bool {
	select {
	case ch <- r:
		return true
	case <-ctx.Done():
		return false
	}
}
