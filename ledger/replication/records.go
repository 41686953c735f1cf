package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"

	"github.com/strata-log/strata/ledger/bookies"
)

// Keys in metad. The layout and the JSON values are described byte by byte
// in doc.go.
const (
	// DecommissionPrefix + bookie id holds a Decommission record.
	DecommissionPrefix = "/strata/bookies/decommissioned/"
	// MissingPrefix + escaped address holds a missingRecord.
	MissingPrefix = "/strata/replication/missing/"
	// AddressPrefix + bookie id holds an addressRecord: the last address
	// the bookie registered, so that a dead bookie can be decommissioned by
	// id.
	AddressPrefix = "/strata/replication/addresses/"
	// LeaderKey holds the elected replicator's LeaderRecord, on its lease.
	LeaderKey = "/strata/replication/leader"
)

// KeyValue is one key of a KV listing.
type KeyValue struct {
	Key   string
	Value []byte
}

// KV is the part of metad the replicator reads and writes besides ledger
// metadata: registrations, cookies and its own records. MetaKV is the real
// one; tests use a map.
type KV interface {
	// List returns every key under prefix, in key order.
	List(ctx context.Context, prefix string) ([]KeyValue, error)
	// Put writes key.
	Put(ctx context.Context, key string, value []byte) error
	// Delete removes key; a missing key is no error.
	Delete(ctx context.Context, key string) error
}

// MetaKV is KV over a metad client.
func MetaKV(meta *metaclient.Client) KV { return metaKV{meta} }

type metaKV struct{ meta *metaclient.Client }

func (m metaKV) List(ctx context.Context, prefix string) ([]KeyValue, error) {
	kvs, _, err := m.meta.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = KeyValue{Key: kv.GetKey(), Value: kv.GetValue()}
	}
	return out, nil
}

func (m metaKV) Put(ctx context.Context, key string, value []byte) error {
	_, err := m.meta.Put(ctx, key, value)
	return err
}

func (m metaKV) Delete(ctx context.Context, key string) error {
	_, err := m.meta.Delete(ctx, key)
	return err
}

// Decommission is an operator's request to drain a bookie, kept at
// DecommissionPrefix + BookieID until the operator withdraws it.
type Decommission struct {
	BookieID string `json:"bookie_id"`
	// Address is the bookie's address when the request was made: what
	// ledger fragments name it by.
	Address       string `json:"address"`
	RequestedAtMs int64  `json:"requested_at_ms"`
}

// missingRecord is kept at MissingPrefix + url.PathEscape(Address) while a
// bookie that some ledger references has no live registration, so that a
// new leader keeps counting the grace period from when the bookie went.
type missingRecord struct {
	Address string `json:"address"`
	SinceMs int64  `json:"since_ms"`
}

// addressRecord is kept at AddressPrefix + BookieID.
type addressRecord struct {
	BookieID string `json:"bookie_id"`
	Address  string `json:"address"`
}

// LeaderRecord is the elected replicator's record at LeaderKey.
type LeaderRecord struct {
	ID      string `json:"id"`
	SinceMs int64  `json:"since_ms"`
}

// DecommissionKey is the key of a bookie's decommission record.
func DecommissionKey(bookieID string) string { return DecommissionPrefix + bookieID }

func missingKey(addr string) string { return MissingPrefix + url.PathEscape(addr) }

// snapshot is what a round reads from metad besides ledger metadata.
type snapshot struct {
	registered    []*bookiepb.BookieInfo
	decommissions []Decommission
	missing       map[string]time.Time
	addresses     map[string]string // bookie id -> last registered address
}

// loadSnapshot reads the registrations and the replicator's records. A
// record it cannot decode is an error, not skipped: something other than
// this package writes there.
func loadSnapshot(ctx context.Context, kv KV) (snapshot, error) {
	var s snapshot
	var err error
	if s.registered, err = listRegistered(ctx, kv); err != nil {
		return s, err
	}
	if s.decommissions, err = listDecommissions(ctx, kv); err != nil {
		return s, err
	}
	kvs, err := kv.List(ctx, MissingPrefix)
	if err != nil {
		return s, fmt.Errorf("replication: list missing bookies: %w", err)
	}
	s.missing = make(map[string]time.Time, len(kvs))
	for _, e := range kvs {
		var r missingRecord
		if err := json.Unmarshal(e.Value, &r); err != nil || r.Address == "" {
			return s, fmt.Errorf("replication: record %s is unreadable: %v", e.Key, err)
		}
		s.missing[r.Address] = time.UnixMilli(r.SinceMs)
	}
	if s.addresses, err = listAddresses(ctx, kv); err != nil {
		return s, err
	}
	return s, nil
}

func listRegistered(ctx context.Context, kv KV) ([]*bookiepb.BookieInfo, error) {
	kvs, err := kv.List(ctx, bookies.RegistryPrefix)
	if err != nil {
		return nil, fmt.Errorf("replication: list bookies: %w", err)
	}
	out := make([]*bookiepb.BookieInfo, 0, len(kvs))
	for _, e := range kvs {
		info := &bookiepb.BookieInfo{}
		if err := proto.Unmarshal(e.Value, info); err != nil {
			return nil, fmt.Errorf("replication: bookie registration %s is unreadable: %w", e.Key, err)
		}
		out = append(out, info)
	}
	return out, nil
}

func listDecommissions(ctx context.Context, kv KV) ([]Decommission, error) {
	kvs, err := kv.List(ctx, DecommissionPrefix)
	if err != nil {
		return nil, fmt.Errorf("replication: list decommissioned bookies: %w", err)
	}
	out := make([]Decommission, 0, len(kvs))
	for _, e := range kvs {
		var d Decommission
		if err := json.Unmarshal(e.Value, &d); err != nil || d.BookieID == "" {
			return nil, fmt.Errorf("replication: decommission record %s is unreadable: %v", e.Key, err)
		}
		out = append(out, d)
	}
	return out, nil
}

func listAddresses(ctx context.Context, kv KV) (map[string]string, error) {
	kvs, err := kv.List(ctx, AddressPrefix)
	if err != nil {
		return nil, fmt.Errorf("replication: list bookie addresses: %w", err)
	}
	out := make(map[string]string, len(kvs))
	for _, e := range kvs {
		var r addressRecord
		if err := json.Unmarshal(e.Value, &r); err != nil || r.BookieID == "" {
			return nil, fmt.Errorf("replication: record %s is unreadable: %v", e.Key, err)
		}
		out[r.BookieID] = r.Address
	}
	return out, nil
}

// view builds the auditor's View from a snapshot.
func (s snapshot) view(now time.Time, grace time.Duration) View {
	return View{
		Now: now, Grace: grace,
		Live:           s.live(),
		Decommissioned: s.decommissionedAddresses(),
		MissingSince:   s.missing,
	}
}

func (s snapshot) live() map[string]bool {
	live := make(map[string]bool, len(s.registered))
	for _, info := range s.registered {
		if info.GetAddress() != "" {
			live[info.GetAddress()] = true
		}
	}
	return live
}

// decommissionedAddresses maps every address a decommissioned bookie is
// known by to the request time: the address of its live registration, and
// the address in the record unless another bookie now registers there (a
// new bookie on a retired bookie's address is not decommissioned).
func (s snapshot) decommissionedAddresses() map[string]time.Time {
	byID := map[string]string{}
	byAddr := map[string]string{}
	for _, info := range s.registered {
		byID[info.GetId()] = info.GetAddress()
		byAddr[info.GetAddress()] = info.GetId()
	}
	out := map[string]time.Time{}
	for _, d := range s.decommissions {
		at := time.UnixMilli(d.RequestedAtMs)
		if addr := byID[d.BookieID]; addr != "" {
			out[addr] = at
		}
		if other, ok := byAddr[d.Address]; d.Address != "" && (!ok || other == d.BookieID) {
			out[d.Address] = at
		}
	}
	return out
}

// syncMissing writes the records of newly missing bookies and deletes the
// records of bookies that came back (or that no ledger references).
func syncMissing(ctx context.Context, kv KV, old, cur map[string]time.Time) error {
	var errs []error
	for addr, since := range cur {
		if prev, ok := old[addr]; ok && prev.Equal(since) {
			continue
		}
		value, _ := json.Marshal(missingRecord{Address: addr, SinceMs: since.UnixMilli()})
		if err := kv.Put(ctx, missingKey(addr), value); err != nil {
			errs = append(errs, err)
		}
	}
	for addr := range old {
		if _, ok := cur[addr]; !ok {
			if err := kv.Delete(ctx, missingKey(addr)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("replication: record missing bookies: %w", err)
	}
	return nil
}

// syncAddresses records the address of every registered bookie whose
// address changed since the last record.
func syncAddresses(ctx context.Context, kv KV, s snapshot) error {
	var errs []error
	for _, info := range s.registered {
		id, addr := info.GetId(), info.GetAddress()
		if id == "" || addr == "" || s.addresses[id] == addr {
			continue
		}
		value, _ := json.Marshal(addressRecord{BookieID: id, Address: addr})
		if err := kv.Put(ctx, AddressPrefix+id, value); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("replication: record bookie addresses: %w", err)
	}
	return nil
}
