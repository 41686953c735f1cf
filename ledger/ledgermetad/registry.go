package ledgermetad

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
)

// Registry is the ledger.BookieRegistry kept in metad: every BookieInfo
// registered under bookies.RegistryPrefix.
type Registry struct {
	meta *metaclient.Client
}

var _ ledger.BookieRegistry = (*Registry)(nil)

// NewRegistry returns the registry over meta.
func NewRegistry(meta *metaclient.Client) *Registry {
	return &Registry{meta: meta}
}

// Writable lists the registrations and keeps the WRITABLE ones. An
// unreadable registration is an error rather than silently skipped: it
// means something other than a bookie writes under the prefix.
func (r *Registry) Writable(ctx context.Context) ([]*bookiepb.BookieInfo, error) {
	kvs, _, err := r.meta.List(ctx, bookies.RegistryPrefix)
	if err != nil {
		return nil, fmt.Errorf("ledgermetad: list bookies: %w", err)
	}
	out := make([]*bookiepb.BookieInfo, 0, len(kvs))
	for _, kv := range kvs {
		info := &bookiepb.BookieInfo{}
		if err := proto.Unmarshal(kv.GetValue(), info); err != nil {
			return nil, fmt.Errorf("ledgermetad: bookie registration %s is unreadable: %w", kv.GetKey(), err)
		}
		if info.GetState() == bookiepb.BookieState_WRITABLE {
			out = append(out, info)
		}
	}
	return out, nil
}
