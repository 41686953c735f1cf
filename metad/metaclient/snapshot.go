package metaclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/proto/metadpb"
)

// ErrSnapshotCorrupt means a snapshot's bytes do not match its checksum or do
// not decode.
// Marked (internal/corruption): corruption.Is holds for it and for
// every error that wraps it.
var ErrSnapshotCorrupt = corruption.Mark(errors.New("metaclient: snapshot corrupt"))

// Snapshot returns a consistent copy of the cluster's state (keys, leases,
// members; no watch history), at least as fresh as the call, as the
// marshalled metadpb.Snapshot and its revision. The whole transfer is one
// attempt bounded by the client's RequestTimeout; it is retried like a
// read.
func (c *Client) Snapshot(ctx context.Context) (data []byte, revision int64, err error) {
	err = c.call(ctx, op{name: "snapshot", kind: kindRead},
		func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) error {
			data, revision = nil, 0
			stream, err := mc.Snapshot(ctx, &metadpb.SnapshotRequest{}, co...)
			if err != nil {
				return err
			}
			var sum []byte
			for first := true; ; first = false {
				chunk, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					return err
				}
				if first {
					revision = chunk.Revision
					data = make([]byte, 0, min(chunk.TotalBytes, 1<<30))
				}
				data = append(data, chunk.Data...)
				sum = chunk.Sha256
			}
			if want := sha256.Sum256(data); !bytes.Equal(sum, want[:]) {
				return fmt.Errorf("%w: %d bytes received, checksum does not match", ErrSnapshotCorrupt, len(data))
			}
			return nil
		})
	return data, revision, err
}

// DecodeSnapshot decodes what Snapshot returned.
func DecodeSnapshot(data []byte) (*metadpb.Snapshot, error) {
	snap := &metadpb.Snapshot{}
	if err := proto.Unmarshal(data, snap); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshotCorrupt, err)
	}
	return snap, nil
}

// Snapshot files (strata meta snapshot save|restore): the magic
// "STRATSNP", a version byte (1), the marshalled Snapshot and the
// SHA-256 of the marshalled Snapshot.
var snapshotMagic = []byte("STRATSNP\x01")

// EncodeSnapshotFile frames a marshalled Snapshot as a snapshot file.
func EncodeSnapshotFile(data []byte) []byte {
	sum := sha256.Sum256(data)
	out := make([]byte, 0, len(snapshotMagic)+len(data)+len(sum))
	return append(append(append(out, snapshotMagic...), data...), sum[:]...)
}

// DecodeSnapshotFile checks a snapshot file and decodes its Snapshot.
func DecodeSnapshotFile(file []byte) (*metadpb.Snapshot, error) {
	if len(file) < len(snapshotMagic)+sha256.Size || !bytes.Equal(file[:len(snapshotMagic)], snapshotMagic) {
		return nil, fmt.Errorf("%w: not a Strata metad snapshot file (version 1)", ErrSnapshotCorrupt)
	}
	data, sum := file[len(snapshotMagic):len(file)-sha256.Size], file[len(file)-sha256.Size:]
	if want := sha256.Sum256(data); !bytes.Equal(sum, want[:]) {
		return nil, fmt.Errorf("%w: checksum does not match (truncated or damaged file)", ErrSnapshotCorrupt)
	}
	return DecodeSnapshot(data)
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// Merge allows a target that already holds keys: keys it holds are
	// kept as they are, the others written. Without it, a target with any
	// key is refused (ErrRestoreTargetNotEmpty).
	Merge bool
	// BatchBytes bounds one transaction's values (default 4 MiB);
	// BatchOps its operations (default 64).
	BatchBytes int
	BatchOps   int
	// Progress, when set, is called after every batch.
	Progress func(done, total int)
}

// RestoreResult counts what Restore did.
type RestoreResult struct {
	Written, Existing, Leased int
}

// ErrRestoreTargetNotEmpty means Restore without Merge found keys in the
// target cluster.
var ErrRestoreTargetNotEmpty = errors.New("metaclient: restore target holds keys")

// Restore writes the keys of snap into the cluster, each only if it does
// not exist (so nothing the target holds is ever overwritten). Keys that
// were attached to a lease are skipped and counted: they are liveness
// records (registrations, ownership) that their owners write again when
// they start, and the leases themselves are not restored. Revisions and
// versions restart in the target: a restore is for an empty cluster
// before any broker or bookie uses it (docs/operations.md).
func (c *Client) Restore(ctx context.Context, snap *metadpb.Snapshot, opts RestoreOptions) (RestoreResult, error) {
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 4 << 20
	}
	if opts.BatchOps <= 0 {
		opts.BatchOps = 64
	}
	var res RestoreResult
	if !opts.Merge {
		var page *metadpb.ListResponse
		err := c.call(ctx, op{name: "list", kind: kindRead},
			func(ctx context.Context, mc metadpb.MetadClient, co ...grpc.CallOption) (err error) {
				page, err = mc.List(ctx, &metadpb.ListRequest{Limit: 1, KeysOnly: true}, co...)
				return err
			})
		if err != nil {
			return res, err
		}
		if len(page.Kvs) > 0 {
			return res, fmt.Errorf("%w (%q, ...): restore into an empty cluster, or merge", ErrRestoreTargetNotEmpty, page.Kvs[0].Key)
		}
	}
	var batch []*metadpb.KeyValue
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		written, existing, err := c.restoreBatch(ctx, batch)
		res.Written, res.Existing = res.Written+written, res.Existing+existing
		batch = batch[:0]
		if opts.Progress != nil {
			opts.Progress(res.Written+res.Existing+res.Leased, len(snap.Kvs))
		}
		return err
	}
	size := 0
	for _, kv := range snap.Kvs {
		if kv.Lease != 0 {
			res.Leased++
			continue
		}
		if len(batch) == opts.BatchOps || (len(batch) > 0 && size+len(kv.Key)+len(kv.Value) > opts.BatchBytes) {
			if err := flush(); err != nil {
				return res, err
			}
			size = 0
		}
		batch = append(batch, kv)
		size += len(kv.Key) + len(kv.Value)
	}
	return res, flush()
}

// restoreBatch writes the absent keys of batch in one transaction that
// holds only while they are still absent; keys that exist are left alone.
func (c *Client) restoreBatch(ctx context.Context, batch []*metadpb.KeyValue) (written, existing int, err error) {
	for {
		var compares []*metadpb.Compare
		var ops []*metadpb.Op
		for _, kv := range batch {
			compares = append(compares, &metadpb.Compare{Key: kv.Key, Version: 0})
			ops = append(ops, &metadpb.Op{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: kv.Key, Value: kv.Value}}})
		}
		resp, err := c.Txn(ctx, compares, ops)
		if err != nil {
			return written, existing, err
		}
		if resp.Succeeded {
			return written + len(batch), existing, nil
		}
		// Some keys exist (a merge, or a retried batch that had been
		// applied): leave them and write the rest.
		present := map[string]bool{}
		for _, kv := range resp.Current {
			if kv.GetVersion() > 0 {
				present[kv.Key] = true
			}
		}
		if len(present) == 0 {
			return written, existing, fmt.Errorf("metaclient: restore: a batch's compares failed with no key present")
		}
		var rest []*metadpb.KeyValue
		for _, kv := range batch {
			if present[kv.Key] {
				existing++
			} else {
				rest = append(rest, kv)
			}
		}
		if batch = rest; len(batch) == 0 {
			return written, existing, nil
		}
	}
}
