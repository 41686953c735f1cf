package metaclient

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/proto/metadpb"
)

// listPageSize is the page size List asks for.
const listPageSize = 1000

// ReadOption modifies Get and List.
type ReadOption func(*readOptions)

type readOptions struct {
	stale    bool
	keysOnly bool
}

// Stale serves the read from whichever member answers, without confirming
// leadership: faster and available without a leader, but possibly behind.
func Stale() ReadOption { return func(o *readOptions) { o.stale = true } }

// KeysOnly makes List leave values out. Get ignores it.
func KeysOnly() ReadOption { return func(o *readOptions) { o.keysOnly = true } }

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WriteOption modifies Put and Delete.
type WriteOption func(*writeOptions)

type writeOptions struct {
	lease           int64
	hasLease        bool
	expectedVersion int64
	hasExpected     bool
	prefix          bool
}

// WithLease attaches the key to a lease (Put only): the key is deleted when
// the lease expires or is revoked.
func WithLease(id int64) WriteOption {
	return func(o *writeOptions) { o.lease, o.hasLease = id, true }
}

// WithExpectedVersion makes Put or Delete a compare-and-set: it applies
// only if the key's version is v (0: the key must not exist), and fails with
// ErrVersionConflict otherwise.
func WithExpectedVersion(v int64) WriteOption {
	return func(o *writeOptions) { o.expectedVersion, o.hasExpected = v, true }
}

// WithPrefix makes Delete remove every key that starts with the key
// (Delete only).
func WithPrefix() WriteOption { return func(o *writeOptions) { o.prefix = true } }

func writeOpts(opts []WriteOption) writeOptions {
	var o writeOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Get returns the key's current value. It fails with ErrNotFound when the
// key does not exist.
func (c *Client) Get(ctx context.Context, key string, opts ...ReadOption) (*metadpb.KeyValue, error) {
	ro := readOpts(opts)
	var resp *metadpb.GetResponse
	o := op{name: "get", key: key, kind: kindRead}
	err := c.call(ctx, o, func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
		var err error
		resp, err = mc.Get(ctx, &metadpb.GetRequest{Key: key, Stale: ro.stale}, co...)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !resp.GetFound() {
		return nil, &callError{op: o.name, key: key, kinds: []error{ErrNotFound}}
	}
	return resp.GetKv(), nil
}

// List returns every key under prefix in key order, following pages to the
// end, and the store revision at which the first page was read. Each page is
// a separate (linearizable, unless Stale) read, so a long listing is not one
// snapshot: a key changed while listing shows its later state. Watching from
// the returned revision+1 delivers every change after the first page, so
// list-then-watch converges on the current state.
func (c *Client) List(ctx context.Context, prefix string, opts ...ReadOption) ([]*metadpb.KeyValue, int64, error) {
	ro := readOpts(opts)
	var (
		kvs      []*metadpb.KeyValue
		revision int64
		after    string
	)
	for page := 0; ; page++ {
		var resp *metadpb.ListResponse
		req := &metadpb.ListRequest{Prefix: prefix, StartAfter: after, Limit: listPageSize, Stale: ro.stale, KeysOnly: ro.keysOnly}
		err := c.call(ctx, op{name: "list", key: prefix, kind: kindRead},
			func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
				var err error
				resp, err = mc.List(ctx, req, co...)
				return err
			})
		if err != nil {
			return nil, 0, err
		}
		if page == 0 {
			revision = resp.GetRevision()
		}
		kvs = append(kvs, resp.GetKvs()...)
		if !resp.GetMore() {
			return kvs, revision, nil
		}
		if len(resp.GetKvs()) == 0 {
			// A server that says "more" without progress would loop us forever.
			return nil, 0, &callError{op: "list", key: prefix,
				err: fmt.Errorf("server reported more keys after %q but returned none", after)}
		}
		after = resp.GetKvs()[len(resp.GetKvs())-1].GetKey()
	}
}

// Put writes key and returns it as stored (its mod_revision is the write's
// revision). With WithExpectedVersion it is a compare-and-set that fails with
// ErrVersionConflict; with WithLease on a missing lease it fails with
// ErrLeaseNotFound.
func (c *Client) Put(ctx context.Context, key string, value []byte, opts ...WriteOption) (*metadpb.KeyValue, error) {
	wo := writeOpts(opts)
	o := op{name: "put", key: key, kind: kindWrite, lease: true}
	if wo.prefix {
		return nil, &callError{op: o.name, key: key, err: fmt.Errorf("WithPrefix does not apply to Put")}
	}
	req := &metadpb.PutRequest{Key: key, Value: value, Lease: wo.lease,
		HasExpectedVersion: wo.hasExpected, ExpectedVersion: wo.expectedVersion}
	var resp *metadpb.PutResponse
	err := c.call(ctx, o, func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
		var err error
		resp, err = mc.Put(ctx, req, co...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetKv(), nil
}

// Delete removes key (or, WithPrefix, every key under it) and returns how
// many keys it removed; deleting a missing key removes 0 and is no error.
// With WithExpectedVersion it is a compare-and-set that fails with
// ErrVersionConflict.
func (c *Client) Delete(ctx context.Context, key string, opts ...WriteOption) (int64, error) {
	wo := writeOpts(opts)
	o := op{name: "delete", key: key, kind: kindWrite}
	if wo.hasLease {
		return 0, &callError{op: o.name, key: key, err: fmt.Errorf("WithLease does not apply to Delete")}
	}
	req := &metadpb.DeleteRequest{Key: key, Prefix: wo.prefix,
		HasExpectedVersion: wo.hasExpected, ExpectedVersion: wo.expectedVersion}
	var resp *metadpb.DeleteResponse
	err := c.call(ctx, o, func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
		var err error
		resp, err = mc.Delete(ctx, req, co...)
		return err
	})
	if err != nil {
		return 0, err
	}
	return resp.GetDeleted(), nil
}

// DeleteKeys deletes keys (absent ones are no error) in one transaction,
// or one by one when metad refuses a transaction that large (its
// --max-txn-ops is below len(keys)).
func (c *Client) DeleteKeys(ctx context.Context, keys []string) error {
	ops := make([]*metadpb.Op, len(keys))
	for i, k := range keys {
		ops[i] = &metadpb.Op{Op: &metadpb.Op_Delete{Delete: &metadpb.DeleteOp{Key: k}}}
	}
	_, err := c.Txn(ctx, nil, ops)
	if status.Code(err) != codes.InvalidArgument || len(keys) < 2 {
		return err
	}
	for _, k := range keys {
		if _, err := c.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// Txn applies ops atomically, at one revision, if every compare holds. A
// compare that fails is not an error: the response has succeeded=false and
// the compared keys' current state. A put op on a missing lease fails with
// ErrLeaseNotFound.
func (c *Client) Txn(ctx context.Context, compares []*metadpb.Compare, ops []*metadpb.Op) (*metadpb.TxnResponse, error) {
	req := &metadpb.TxnRequest{Compares: compares, Ops: ops}
	var resp *metadpb.TxnResponse
	err := c.call(ctx, op{name: "txn", kind: kindWrite, lease: true},
		func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
			var err error
			resp, err = mc.Txn(ctx, req, co...)
			return err
		})
	if err != nil {
		return nil, err
	}
	return resp, nil
}
