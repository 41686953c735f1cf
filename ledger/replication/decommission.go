package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/strata-log/strata/internal/ctxtime"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/metadpb"

	"github.com/strata-log/strata/ledger/bookies"
)

// Errors of MarkDecommissioned and Progress.
var (
	// ErrUnknownBookie: metad knows no bookie by that id (no cookie, no
	// registration, no recorded address).
	ErrUnknownBookie = errors.New("replication: no such bookie")
	// ErrAddressUnknown: the bookie is not running and its address was
	// never recorded; the caller must give it.
	ErrAddressUnknown = errors.New("replication: the bookie's address is unknown")
)

// MarkDecommissioned marks a bookie decommissioned: the replicator copies every
// fragment that names it to other bookies (at once for closed ledgers;
// open ledgers are recovered after the grace period), and the bookie, if
// it runs, registers as read-only so no new ledger lands on it. address may
// be empty: it is then the bookie's live registration's, or the last one
// the replicator recorded. Marking an already decommissioned bookie keeps
// its original request time. Errors: ErrUnknownBookie, ErrAddressUnknown,
// or metad's.
func MarkDecommissioned(ctx context.Context, kv KV, id, address string, now time.Time) (Decommission, error) {
	snap, err := loadSnapshot(ctx, kv)
	if err != nil {
		return Decommission{}, err
	}
	known := snap.addresses[id] != ""
	registered := ""
	for _, info := range snap.registered {
		if info.GetId() == id {
			known, registered = true, info.GetAddress()
		}
	}
	cookies, err := kv.List(ctx, bookies.CookiePrefix+id)
	if err != nil {
		return Decommission{}, fmt.Errorf("replication: list bookie cookies: %w", err)
	}
	for _, c := range cookies {
		known = known || c.Key == bookies.CookiePrefix+id
	}
	if !known && address == "" {
		return Decommission{}, fmt.Errorf("%w: %q (metad has no cookie, registration or address for it)", ErrUnknownBookie, id)
	}
	switch {
	case address != "":
	case registered != "":
		address = registered
	case snap.addresses[id] != "":
		address = snap.addresses[id]
	default:
		return Decommission{}, fmt.Errorf("%w: bookie %s is not running and no address was ever recorded for it; give its address", ErrAddressUnknown, id)
	}
	d := Decommission{BookieID: id, Address: address, RequestedAtMs: now.UnixMilli()}
	for _, old := range snap.decommissions {
		if old.BookieID == id && old.Address == address {
			return old, nil
		}
	}
	value, _ := json.Marshal(d)
	if err := kv.Put(ctx, DecommissionKey(id), value); err != nil {
		return Decommission{}, fmt.Errorf("replication: record the decommission of bookie %s: %w", id, err)
	}
	return d, nil
}

// Recommission withdraws a decommission: the bookie takes new data again
// and fragments that still name it stay. It reports whether there was one.
func Recommission(ctx context.Context, kv KV, id string) (bool, error) {
	ds, err := listDecommissions(ctx, kv)
	if err != nil {
		return false, err
	}
	if !slices.ContainsFunc(ds, func(d Decommission) bool { return d.BookieID == id }) {
		return false, nil
	}
	if err := kv.Delete(ctx, DecommissionKey(id)); err != nil {
		return false, fmt.Errorf("replication: withdraw the decommission of bookie %s: %w", id, err)
	}
	return true, nil
}

// Report is the replication state of the cluster, for people.
type Report struct {
	// Ledgers counts every ledger; UnderReplicated those with a fragment
	// on a missing or decommissioned bookie (AuditResult.UnderReplicated).
	Ledgers, UnderReplicated int
	// LedgersOn and FragmentsOn count, per address, the ledgers and
	// fragments that name it.
	LedgersOn, FragmentsOn map[string]int
	// Decommissions are the decommission records.
	Decommissions []Decommission
	// Registered are the live registrations.
	Registered []*bookiepb.BookieInfo
	// MissingSince are the replicator's missing-bookie records.
	MissingSince map[string]time.Time
	// Leader is the elected replicator, nil when none runs.
	Leader *LeaderRecord
}

// Inspect reads the replication state of the cluster.
func Inspect(ctx context.Context, kv KV, store ledger.MetadataStore, now time.Time) (*Report, error) {
	mds, err := ledger.ListAll(ctx, store)
	if err != nil {
		return nil, err
	}
	snap, err := loadSnapshot(ctx, kv)
	if err != nil {
		return nil, err
	}
	leader, err := Leader(ctx, kv)
	if err != nil {
		return nil, err
	}
	audit := Audit(mds, snap.view(now, DefaultGrace))
	r := &Report{Ledgers: len(mds), UnderReplicated: audit.UnderReplicated, Decommissions: snap.decommissions,
		Registered: snap.registered, MissingSince: snap.missing, Leader: leader}
	r.LedgersOn, r.FragmentsOn = References(mds)
	return r, nil
}

// Drain is the progress of a decommission.
type Drain struct {
	Decommission Decommission
	// Addresses are the addresses the bookie is known by (its record's
	// and its live registration's).
	Addresses []string
	// Ledgers and Fragments still name the bookie; it is drained at zero.
	Ledgers, Fragments int
	// Leader is the elected replicator, nil when none runs (then nothing
	// drains).
	Leader *LeaderRecord
}

// Drained reports whether no ledger names the bookie any more.
func (d Drain) Drained() bool { return d.Ledgers == 0 && d.Fragments == 0 }

// Progress reports how far the decommission of bookie id got. It fails
// with ErrUnknownBookie when the bookie is not decommissioned.
func Progress(ctx context.Context, kv KV, store ledger.MetadataStore, id string) (Drain, error) {
	r, err := Inspect(ctx, kv, store, time.Now())
	if err != nil {
		return Drain{}, err
	}
	i := slices.IndexFunc(r.Decommissions, func(d Decommission) bool { return d.BookieID == id })
	if i < 0 {
		return Drain{}, fmt.Errorf("%w: bookie %q is not decommissioned", ErrUnknownBookie, id)
	}
	d := Drain{Decommission: r.Decommissions[i], Leader: r.Leader, Addresses: []string{r.Decommissions[i].Address}}
	for _, info := range r.Registered {
		if info.GetId() == id && !slices.Contains(d.Addresses, info.GetAddress()) {
			d.Addresses = append(d.Addresses, info.GetAddress())
		}
	}
	for _, a := range d.Addresses {
		d.Ledgers += r.LedgersOn[a]
		d.Fragments += r.FragmentsOn[a]
	}
	return d, nil
}

// WatchDecommission calls fn with whether bookie id is decommissioned: once
// at the start, and at every change, until ctx ends. It lists the record,
// then watches it from the listing's revision, listing again when the
// watch ends (compaction, errors). The bookie runs it to register as
// read-only while decommissioned.
func WatchDecommission(ctx context.Context, meta *metaclient.Client, id string, fn func(bool)) {
	key := DecommissionKey(id)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		kvs, rev, err := meta.List(ctx, key, metaclient.KeysOnly())
		if err != nil {
			if ctxtime.Sleep(ctx, backoff) != nil {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		fn(slices.ContainsFunc(kvs, func(kv *metadpb.KeyValue) bool { return kv.GetKey() == key }))
		for res := range meta.Watch(ctx, key, rev+1) {
			for _, ev := range res.Events {
				if ev.GetKv().GetKey() == key {
					fn(ev.GetType() == metadpb.Event_PUT)
				}
			}
		}
		if ctxtime.Sleep(ctx, backoff) != nil {
			return
		}
	}
}

// String renders a drain's progress as one line.
func (d Drain) String() string {
	return fmt.Sprintf("bookie %s (%s): %s, %s still to re-replicate",
		d.Decommission.BookieID, strings.Join(d.Addresses, ","), plural(d.Ledgers, "ledger"), plural(d.Fragments, "fragment"))
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
