package ledgertest

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"
)

// FakeRegistry is an in-memory ledger.BookieRegistry. Bookies are listed in
// the order they were added. Safe for concurrent use.
type FakeRegistry struct {
	mu          sync.Mutex
	bookies     []*bookiepb.BookieInfo
	unavailable bool
}

var _ ledger.BookieRegistry = (*FakeRegistry)(nil)

// NewFakeRegistry registers writable bookies at addrs (id = address).
func NewFakeRegistry(addrs ...string) *FakeRegistry {
	r := &FakeRegistry{}
	for _, a := range addrs {
		r.Register(&bookiepb.BookieInfo{Id: a, Address: a, State: bookiepb.BookieState_WRITABLE})
	}
	return r
}

// Register adds or replaces (by address) a registration.
func (r *FakeRegistry) Register(info *bookiepb.BookieInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	info = proto.Clone(info).(*bookiepb.BookieInfo)
	if i := slices.IndexFunc(r.bookies, func(b *bookiepb.BookieInfo) bool { return b.Address == info.Address }); i >= 0 {
		r.bookies[i] = info
		return
	}
	r.bookies = append(r.bookies, info)
}

// Deregister removes a bookie (its lease expired).
func (r *FakeRegistry) Deregister(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bookies = slices.DeleteFunc(r.bookies, func(b *bookiepb.BookieInfo) bool { return b.Address == addr })
}

// SetState changes a registered bookie's state.
func (r *FakeRegistry) SetState(addr string, state bookiepb.BookieState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bookies {
		if b.Address == addr {
			b.State = state
		}
	}
}

// SetUnavailable makes Writable fail with ErrUnavailable.
func (r *FakeRegistry) SetUnavailable(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unavailable = on
}

// Writable implements ledger.BookieRegistry.
func (r *FakeRegistry) Writable(ctx context.Context) ([]*bookiepb.BookieInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.unavailable {
		return nil, ErrUnavailable
	}
	var out []*bookiepb.BookieInfo
	for _, b := range r.bookies {
		if b.State == bookiepb.BookieState_WRITABLE {
			out = append(out, proto.Clone(b).(*bookiepb.BookieInfo))
		}
	}
	return out, nil
}
