// Package bookies is what metad knows of the bookies: the keys under which
// they register (on their lease, while they run) and keep their cookies
// (for good), and List, which reads both. The bookie server writes these
// keys; the ledger client, the re-replication worker and the CLI read them
// through this package, which links no storage engine.
package bookies

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
)

// Metadata keys of bookies.
const (
	// RegistryPrefix + id holds a live bookie's BookieInfo, on its lease.
	RegistryPrefix = "/strata/bookies/registry/"
	// CookiePrefix + id holds the bookie's Cookie.
	CookiePrefix = "/strata/bookies/cookies/"
)

// Known is a bookie metad knows of: by its cookie, and by its registration
// while it runs.
type Known struct {
	ID     string
	Cookie *bookiepb.Cookie     // nil for a registration without a cookie (should not happen)
	Info   *bookiepb.BookieInfo // nil when the bookie is not running (no live registration)
}

// List returns every bookie known to metad, sorted by id.
func List(ctx context.Context, meta *metaclient.Client) ([]Known, error) {
	byID := map[string]*Known{}
	get := func(id string) *Known {
		if k, ok := byID[id]; ok {
			return k
		}
		k := &Known{ID: id}
		byID[id] = k
		return k
	}
	cookies, _, err := meta.List(ctx, CookiePrefix)
	if err != nil {
		return nil, err
	}
	for _, kv := range cookies {
		c := &bookiepb.Cookie{}
		if err := proto.Unmarshal(kv.Value, c); err != nil {
			return nil, fmt.Errorf("bookies: cookie %s: %w", kv.Key, err)
		}
		get(strings.TrimPrefix(kv.Key, CookiePrefix)).Cookie = c
	}
	regs, _, err := meta.List(ctx, RegistryPrefix)
	if err != nil {
		return nil, err
	}
	for _, kv := range regs {
		info := &bookiepb.BookieInfo{}
		if err := proto.Unmarshal(kv.Value, info); err != nil {
			return nil, fmt.Errorf("bookies: registration %s: %w", kv.Key, err)
		}
		get(strings.TrimPrefix(kv.Key, RegistryPrefix)).Info = info
	}
	out := make([]Known, 0, len(byID))
	for _, k := range byID {
		out = append(out, *k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// State is "writable", "read-only" or "down".
func (k Known) State() string {
	switch {
	case k.Info == nil:
		return "down"
	case k.Info.State == bookiepb.BookieState_READ_ONLY:
		return "read-only"
	}
	return "writable"
}
