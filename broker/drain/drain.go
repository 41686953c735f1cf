package drain

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Prefix + broker id holds a BrokerDrain record.
const Prefix = "/strata/broker-drains/"

// The broker's own keys that a drain reads (broker/keys.go owns them; a
// test there checks that these agree).
const (
	BrokersPrefix     = "/strata/brokers/"
	AssignmentsPrefix = "/strata/assignments/"
	OwnersPrefix      = "/strata/owners/"
)

// Errors of Request and Progress.
var (
	// ErrUnknownBroker: no broker by that id is registered, named by an
	// assignment or drained.
	ErrUnknownBroker = errors.New("drain: no such broker")
	// ErrNoOtherBroker: no other ACTIVE, undrained broker is registered,
	// so the broker's partitions would have nowhere to go.
	ErrNoOtherBroker = errors.New("drain: no other active broker to move the partitions to")
	// ErrNotDrained: Progress of a broker without a drain record.
	ErrNotDrained = errors.New("drain: broker is not drained")
)

// Key is the drain record's key of broker id.
func Key(id string) string { return Prefix + id }

// Request records that broker id is to be drained (D1-D3). The broker must
// be known to metad (registered, or named by an assignment) and another
// ACTIVE, undrained broker must be registered. Asking again returns the
// first request, with its time. Errors: ErrUnknownBroker,
// ErrNoOtherBroker, or metad's.
func Request(ctx context.Context, meta *metaclient.Client, id string, now time.Time) (*brokerpb.BrokerDrain, error) {
	if old, err := get(ctx, meta, id); err != nil || old != nil {
		return old, err
	}
	registered, err := registrations(ctx, meta)
	if err != nil {
		return nil, err
	}
	drained, err := drainedIDs(ctx, meta)
	if err != nil {
		return nil, err
	}
	_, known := registered[id]
	if !known {
		n, err := count(ctx, meta, AssignmentsPrefix, id, assignedTo)
		if err != nil {
			return nil, err
		}
		known = n > 0
	}
	if !known {
		return nil, fmt.Errorf("%w: %q (registered: %s)", ErrUnknownBroker, id, names(registered))
	}
	others := 0
	for other, info := range registered {
		if other != id && info.State == brokerpb.BrokerState_BROKER_ACTIVE && !drained[other] {
			others++
		}
	}
	if others == 0 {
		return nil, fmt.Errorf("%w: draining %s would leave none (registered: %s; drained: %s)", ErrNoOtherBroker, id, names(registered), names(drained))
	}
	rec := &brokerpb.BrokerDrain{BrokerId: id, RequestedAtMs: now.UnixMilli()}
	value, err := proto.Marshal(rec)
	if err != nil {
		return nil, err
	}
	_, err = meta.Put(ctx, Key(id), value, metaclient.WithExpectedVersion(0))
	if errors.Is(err, metaclient.ErrVersionConflict) {
		return get(ctx, meta, id) // a concurrent request won: report it
	}
	if err != nil {
		return nil, fmt.Errorf("drain: record the drain of broker %s: %w", id, err)
	}
	return rec, nil
}

// Withdraw deletes broker id's drain record: it is an ordinary ACTIVE
// broker again and balancing gives it partitions. It reports whether
// there was one.
func Withdraw(ctx context.Context, meta *metaclient.Client, id string) (bool, error) {
	n, err := meta.Delete(ctx, Key(id))
	if err != nil {
		return false, fmt.Errorf("drain: withdraw the drain of broker %s: %w", id, err)
	}
	return n > 0, nil
}

// Status is how far a drain got.
type Status struct {
	Request *brokerpb.BrokerDrain
	// Registered: the broker runs (has a live registration).
	Registered bool
	// Assigned counts the partitions assigned to the broker, Owned the
	// ownership records naming it (it still serves them, or hands them
	// over).
	Assigned, Owned int
	// OtherActive counts the other ACTIVE, undrained brokers: with none,
	// nothing can move.
	OtherActive int
}

// Drained reports whether the broker holds nothing any more.
func (s Status) Drained() bool { return s.Assigned == 0 && s.Owned == 0 }

// String renders the progress as one line.
func (s Status) String() string {
	id := s.Request.GetBrokerId()
	if s.Drained() {
		return fmt.Sprintf("broker %s drained: no partition assigned to it or owned by it", id)
	}
	line := fmt.Sprintf("broker %s: %s still assigned, %s owned", id, plural(s.Assigned, "partition"), plural(s.Owned, "partition"))
	if s.OtherActive == 0 {
		line += "; no other active broker to move them to"
	}
	return line
}

// Progress reports how far the drain of broker id got. Errors:
// ErrNotDrained, or metad's.
func Progress(ctx context.Context, meta *metaclient.Client, id string) (Status, error) {
	req, err := get(ctx, meta, id)
	if err != nil {
		return Status{}, err
	}
	if req == nil {
		return Status{}, fmt.Errorf("%w: %q (strata broker drain %s first)", ErrNotDrained, id, id)
	}
	s := Status{Request: req}
	registered, err := registrations(ctx, meta)
	if err != nil {
		return Status{}, err
	}
	drained, err := drainedIDs(ctx, meta)
	if err != nil {
		return Status{}, err
	}
	_, s.Registered = registered[id]
	for other, info := range registered {
		if other != id && info.State == brokerpb.BrokerState_BROKER_ACTIVE && !drained[other] {
			s.OtherActive++
		}
	}
	if s.Assigned, err = count(ctx, meta, AssignmentsPrefix, id, assignedTo); err != nil {
		return Status{}, err
	}
	if s.Owned, err = count(ctx, meta, OwnersPrefix, id, ownedBy); err != nil {
		return Status{}, err
	}
	return s, nil
}

// get reads broker id's drain record, nil when there is none.
func get(ctx context.Context, meta *metaclient.Client, id string) (*brokerpb.BrokerDrain, error) {
	kv, err := meta.Get(ctx, Key(id))
	if errors.Is(err, metaclient.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec := &brokerpb.BrokerDrain{}
	if err := proto.Unmarshal(kv.Value, rec); err != nil {
		return nil, fmt.Errorf("drain: record %s: %w", kv.Key, err)
	}
	return rec, nil
}

// registrations lists the live brokers by id.
func registrations(ctx context.Context, meta *metaclient.Client) (map[string]*brokerpb.BrokerInfo, error) {
	kvs, _, err := meta.List(ctx, BrokersPrefix)
	if err != nil {
		return nil, err
	}
	out := map[string]*brokerpb.BrokerInfo{}
	for _, kv := range kvs {
		info := &brokerpb.BrokerInfo{}
		if proto.Unmarshal(kv.Value, info) == nil {
			out[strings.TrimPrefix(kv.Key, BrokersPrefix)] = info
		}
	}
	return out, nil
}

// drainedIDs lists the brokers with a drain record.
func drainedIDs(ctx context.Context, meta *metaclient.Client) (map[string]bool, error) {
	kvs, _, err := meta.List(ctx, Prefix, metaclient.KeysOnly())
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, kv := range kvs {
		out[strings.TrimPrefix(kv.Key, Prefix)] = true
	}
	return out, nil
}

// IDs returns the ids of the drain records among kvs (a listing of
// Prefix, as the controller's mirror holds it).
func IDs(keys []string) map[string]bool {
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		if id, ok := strings.CutPrefix(k, Prefix); ok && id != "" {
			out[id] = true
		}
	}
	return out
}

func assignedTo(value []byte) string {
	a := &brokerpb.Assignment{}
	if proto.Unmarshal(value, a) != nil {
		return ""
	}
	return a.BrokerId
}

func ownedBy(value []byte) string {
	o := &brokerpb.Ownership{}
	if proto.Unmarshal(value, o) != nil {
		return ""
	}
	return o.BrokerId
}

// count counts the records under prefix whose broker (as decode reads it)
// is id.
func count(ctx context.Context, meta *metaclient.Client, prefix, id string, decode func([]byte) string) (int, error) {
	kvs, _, err := meta.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kv := range kvs {
		if decode(kv.Value) == id {
			n++
		}
	}
	return n, nil
}

// names lists a map's keys, sorted, or says "none".
func names[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
