package kv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-log/strata/proto/metadpb"
	"google.golang.org/protobuf/proto"
)

// Command builders, so that tests read like the scenario they describe.

func txn(compares []*metadpb.Compare, ops ...*metadpb.Op) *metadpb.Command {
	return &metadpb.Command{Command: &metadpb.Command_Txn{Txn: &metadpb.TxnRequest{Compares: compares, Ops: ops}}}
}

func ops(ops ...*metadpb.Op) *metadpb.Command { return txn(nil, ops...) }

func cmps(kv ...any) []*metadpb.Compare {
	var out []*metadpb.Compare
	for i := 0; i < len(kv); i += 2 {
		out = append(out, &metadpb.Compare{Key: kv[i].(string), Version: int64(kv[i+1].(int))})
	}
	return out
}

func put(key, value string) *metadpb.Op { return putL(key, value, 0) }

func putL(key, value string, lease int64) *metadpb.Op {
	return &metadpb.Op{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: key, Value: []byte(value), Lease: lease}}}
}

func del(key string) *metadpb.Op {
	return &metadpb.Op{Op: &metadpb.Op_Delete{Delete: &metadpb.DeleteOp{Key: key}}}
}

func delPrefix(key string) *metadpb.Op {
	return &metadpb.Op{Op: &metadpb.Op_Delete{Delete: &metadpb.DeleteOp{Key: key, Prefix: true}}}
}

func grant(id, ttlMs int64) *metadpb.Command {
	return &metadpb.Command{Command: &metadpb.Command_LeaseGrant{LeaseGrant: &metadpb.LeaseGrantCommand{Id: id, TtlMs: ttlMs}}}
}

func revoke(id int64) *metadpb.Command {
	return &metadpb.Command{Command: &metadpb.Command_LeaseRevoke{LeaseRevoke: &metadpb.LeaseRevokeCommand{Id: id}}}
}

func member(id, client, admin string) *metadpb.Command {
	return &metadpb.Command{Command: &metadpb.Command_MemberInfo{MemberInfo: &metadpb.MemberInfo{Id: id, ClientAddress: client, AdminAddress: admin}}}
}

// kv builds an expected KeyValue.
func kv(key, value string, create, mod, version, lease int64) *metadpb.KeyValue {
	out := &metadpb.KeyValue{Key: key, CreateRevision: create, ModRevision: mod, Version: version, Lease: lease}
	if value != "" {
		out.Value = []byte(value)
	}
	return out
}

func txnOK(rev int64, results ...*metadpb.OpResult) *metadpb.TxnResponse {
	return &metadpb.TxnResponse{Succeeded: true, Revision: rev, Results: results}
}

func txnFailed(rev int64, current ...*metadpb.KeyValue) *metadpb.TxnResponse {
	return &metadpb.TxnResponse{Revision: rev, Current: current}
}

func putResult(kv *metadpb.KeyValue) *metadpb.OpResult { return &metadpb.OpResult{Kv: kv} }

func delResult(n int64) *metadpb.OpResult { return &metadpb.OpResult{Deleted: n} }

// applier applies commands at increasing log indexes.
type applier struct {
	t     testing.TB
	s     *Store
	index uint64
}

func newApplier(t testing.TB, opts Options) *applier {
	return &applier{t: t, s: New(opts)}
}

func (a *applier) apply(cmd *metadpb.Command) (proto.Message, error) {
	a.index++
	return a.s.Apply(a.index, cmd)
}

// must applies cmd and fails the test on error.
func (a *applier) must(cmd *metadpb.Command) proto.Message {
	a.t.Helper()
	resp, err := a.apply(cmd)
	if err != nil {
		a.t.Fatalf("apply %v: %v", cmd, err)
	}
	return resp
}

// checkResponse compares an Apply result with the expected one.
func checkResponse(t testing.TB, what string, got proto.Message, gotErr error, want proto.Message, wantErr error) {
	t.Helper()
	if wantErr != nil {
		if !errors.Is(gotErr, wantErr) {
			t.Fatalf("%s: error %v, want %v", what, gotErr, wantErr)
		}
		if got != nil {
			t.Fatalf("%s: response %v with error", what, got)
		}
		return
	}
	if gotErr != nil {
		t.Fatalf("%s: unexpected error %v", what, gotErr)
	}
	if want == nil {
		if got != nil {
			t.Fatalf("%s: response %v, want nil", what, got)
		}
		return
	}
	if got == nil || !proto.Equal(got, want) {
		t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
	}
}

// dumpKVs renders the key space, one key a line:
// key=value v<version> c<create> m<mod> [l<lease>].
func dumpKVs(s *Store) string {
	kvs, _, _ := s.List("", "", 1<<30, false)
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%s=%s v%d c%d m%d", kv.Key, kv.Value, kv.Version, kv.CreateRevision, kv.ModRevision)
		if kv.Lease != 0 {
			fmt.Fprintf(&b, " l%d", kv.Lease)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// dumpEvents renders watch responses, one revision a line:
// rev N: PUT key=value vV | DELETE key.
func dumpEvents(resps []*metadpb.WatchResponse) string {
	var b strings.Builder
	for _, r := range resps {
		fmt.Fprintf(&b, "rev %d:", r.Revision)
		for _, e := range r.Events {
			switch e.Type {
			case metadpb.Event_PUT:
				fmt.Fprintf(&b, " PUT %s=%s v%d", e.Kv.Key, e.Kv.Value, e.Kv.Version)
			case metadpb.Event_DELETE:
				fmt.Fprintf(&b, " DELETE %s", e.Kv.Key)
				if e.Kv.ModRevision != r.Revision {
					fmt.Fprintf(&b, "(mod %d!)", e.Kv.ModRevision)
				}
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// checkInvariants verifies what the store promises about itself: the key
// index agrees with the key map, leases hold exactly the keys attached to
// them, the history covers (compact, revision] without gaps, and replaying
// the history (when it reaches back to revision 1) rebuilds the key space.
func checkInvariants(t testing.TB, s *Store) {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := &s.mu.state

	checkIndex(t, &st.index)
	if st.index.len() != len(st.kvs) {
		t.Fatalf("index has %d keys, map %d", st.index.len(), len(st.kvs))
	}
	for key := range st.index.ascend("") {
		kv, ok := st.kvs[key]
		if !ok {
			t.Fatalf("index key %q not in map", key)
		}
		if kv.Key != key || kv.Version < 1 || kv.CreateRevision > kv.ModRevision || kv.ModRevision > st.revision {
			t.Fatalf("bad kv %v at revision %d", kv, st.revision)
		}
		if kv.Lease != 0 {
			l, ok := st.leases[kv.Lease]
			if !ok {
				t.Fatalf("key %q has lease %d, which does not exist", key, kv.Lease)
			}
			if _, ok := l.keys[key]; !ok {
				t.Fatalf("key %q has lease %d but the lease does not hold it", key, kv.Lease)
			}
		}
	}
	for id, l := range st.leases {
		for key := range l.keys {
			if kv, ok := st.kvs[key]; !ok || kv.Lease != id {
				t.Fatalf("lease %d holds %q, which is %v", id, key, kv)
			}
		}
	}

	h := &st.history
	want := h.compactRevision + 1
	for _, r := range h.all() {
		if r.Revision != want || len(r.Events) == 0 {
			t.Fatalf("history entry %d (%d events), want revision %d", r.Revision, len(r.Events), want)
		}
		want++
	}
	if want-1 != st.revision {
		t.Fatalf("history ends at %d, revision is %d", want-1, st.revision)
	}
	if h.compactRevision == 0 {
		replayed := make(map[string]*metadpb.KeyValue)
		for _, r := range h.all() {
			for _, e := range r.Events {
				if e.Type == metadpb.Event_PUT {
					replayed[e.Kv.Key] = e.Kv
				} else {
					delete(replayed, e.Kv.Key)
				}
			}
		}
		if len(replayed) != len(st.kvs) {
			t.Fatalf("replayed history has %d keys, store %d", len(replayed), len(st.kvs))
		}
		for key, kv := range replayed {
			if !proto.Equal(kv, st.kvs[key]) {
				t.Fatalf("replayed %v, store has %v", kv, st.kvs[key])
			}
		}
	}
}
