package kv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/metadpb"
)

// Bounds on what clients can make every member hold:
// the watch history by bytes, List pages, and quotas on keys, data bytes
// and leases carried in the command.

func limited(l *metadpb.Limits, cmd *metadpb.Command) *metadpb.Command {
	cmd.Limits = l
	return cmd
}

// TestHistoryBoundedByBytes: many large values for one key keep at most
// HistoryBytes of history (plus the newest revision, which always stays),
// the compact revision follows, and the revisions kept are served.
func TestHistoryBoundedByBytes(t *testing.T) {
	const value = 1000
	for _, tc := range []struct {
		name            string
		opts            Options
		puts            int
		valueBytes      int
		wantKept        int
		wantHistoryByte int64
	}{
		{name: "bytes bind", opts: Options{HistoryRevisions: 1000, HistoryBytes: 10_000}, puts: 50, valueBytes: value,
			wantKept: 9, wantHistoryByte: 9 * (value + 1 + eventOverheadBytes)},
		{name: "revisions bind", opts: Options{HistoryRevisions: 5, HistoryBytes: 1 << 20}, puts: 50, valueBytes: value,
			wantKept: 5, wantHistoryByte: 5 * (value + 1 + eventOverheadBytes)},
		{name: "one revision over the bound stays", opts: Options{HistoryRevisions: 10, HistoryBytes: 100}, puts: 3, valueBytes: value,
			wantKept: 1, wantHistoryByte: value + 1 + eventOverheadBytes},
		{name: "defaults", opts: Options{}, puts: 20, valueBytes: value, wantKept: 20,
			wantHistoryByte: 20 * (value + 1 + eventOverheadBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t, tc.opts)
			for i := range tc.puts {
				a.must(ops(put("k", strings.Repeat(fmt.Sprint(i%10), tc.valueBytes))))
			}
			s := a.s
			if got := s.HistoryBytes(); got != tc.wantHistoryByte {
				t.Fatalf("history bytes %d, want %d", got, tc.wantHistoryByte)
			}
			compact := int64(tc.puts - tc.wantKept)
			if got := s.CompactRevision(); got != compact {
				t.Fatalf("compact revision %d, want %d", got, compact)
			}
			if _, _, err := s.Events("", compact, 0); compact > 0 && !errors.Is(err, ErrCompacted) {
				t.Fatalf("events from the compact revision: %v, want ErrCompacted", err)
			}
			resp, _, err := s.Events("", compact+1, 0)
			if err != nil || len(resp) != tc.wantKept || resp[len(resp)-1].Revision != int64(tc.puts) {
				t.Fatalf("events from %d: %d responses, %v; want %d ending at %d", compact+1, len(resp), err, tc.wantKept, tc.puts)
			}
			// A snapshot restored elsewhere keeps the same bounds.
			other := New(tc.opts)
			other.Restore(s.Snapshot(), a.index)
			if other.HistoryBytes() != s.HistoryBytes() || other.CompactRevision() != s.CompactRevision() {
				t.Fatalf("restored: history %d bytes from %d; original %d from %d",
					other.HistoryBytes(), other.CompactRevision(), s.HistoryBytes(), s.CompactRevision())
			}
		})
	}
	// Restoring into a store with a tighter bound trims the history.
	a := newApplier(t, Options{})
	for i := range 10 {
		a.must(ops(put("k", strings.Repeat(fmt.Sprint(i), value))))
	}
	tight := New(Options{HistoryBytes: 3 * (value + 1 + eventOverheadBytes)})
	tight.Restore(a.s.Snapshot(), a.index)
	if got := tight.CompactRevision(); got != 7 {
		t.Fatalf("restored with a 3-revision byte bound: compact revision %d, want 7", got)
	}
}

// TestListPageBounds: List never returns more than MaxListLimit keys or
// (beyond the first key) MaxListBytes of keys and values, and says more;
// paging with start_after reaches every key.
func TestListPageBounds(t *testing.T) {
	a := newApplier(t, Options{})
	big := strings.Repeat("v", 512<<10)
	for i := range 20 {
		a.must(ops(put(fmt.Sprintf("/big/%02d", i), big)))
	}
	for i := range MaxListLimit + 5 {
		a.must(ops(put(fmt.Sprintf("/small/%06d", i), "x")))
	}
	for _, tc := range []struct {
		name     string
		prefix   string
		limit    int
		keysOnly bool
		want     int
	}{
		{"limit above the cap", "/small/", MaxListLimit * 10, false, MaxListLimit},
		{"default limit", "/small/", 0, false, DefaultListLimit},
		{"values past the byte cap", "/big/", 100, false, MaxListBytes / (len(big) + len("/big/00"))},
		{"keys only: no value bytes", "/big/", 100, true, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kvs, more, _ := a.s.List(tc.prefix, "", tc.limit, tc.keysOnly)
			if len(kvs) != tc.want || more != (tc.want < 20 || tc.prefix == "/small/") {
				t.Fatalf("page of %d keys, more=%v; want %d", len(kvs), more, tc.want)
			}
		})
	}
	var all int
	for after, more := "", true; more; {
		var kvs []*metadpb.KeyValue
		kvs, more, _ = a.s.List("/big/", after, 0, false)
		if len(kvs) == 0 {
			t.Fatal("an empty page")
		}
		all += len(kvs)
		after = kvs[len(kvs)-1].Key
	}
	if all != 20 {
		t.Fatalf("paged %d keys, want 20", all)
	}
	// One value larger than the byte cap still comes, alone.
	a.must(ops(put("/huge", strings.Repeat("h", MaxValueBytes))))
	if kvs, _, _ := a.s.List("/huge", "", 0, false); len(kvs) != 1 {
		t.Fatalf("a key over the page's byte cap: %d keys", len(kvs))
	}
}

// TestQuota: a txn over the limits in its command is refused as a whole,
// counting exactly what it adds; writes that do not grow the quantity over
// its quota go through; no limits, no quota.
func TestQuota(t *testing.T) {
	keys3 := &metadpb.Limits{MaxKeys: 3}
	bytes10 := &metadpb.Limits{MaxDataBytes: 10} // key and value bytes
	for _, tc := range []struct {
		name   string
		limits *metadpb.Limits
		before []*metadpb.Command
		cmd    *metadpb.Command
		want   error
	}{
		{name: "no limits", cmd: ops(put("a", "1"), put("b", "1"), put("c", "1"), put("d", "1"))},
		{name: "keys: up to the quota", limits: keys3, cmd: ops(put("a", "1"), put("b", "1"), put("c", "1"))},
		{name: "keys: one over", limits: keys3, cmd: ops(put("a", "1"), put("b", "1"), put("c", "1"), put("d", "1")),
			want: ErrQuotaExceeded},
		{name: "keys: the same key twice counts once", limits: keys3, before: []*metadpb.Command{ops(put("a", "1"), put("b", "1"))},
			cmd: ops(put("c", "1"), put("c", "2"))},
		{name: "keys: overwrite at the quota", limits: keys3, before: []*metadpb.Command{ops(put("a", "1"), put("b", "1"), put("c", "1"))},
			cmd: ops(put("a", "22"))},
		{name: "keys: delete and put at the quota", limits: keys3, before: []*metadpb.Command{ops(put("a", "1"), put("b", "1"), put("c", "1"))},
			cmd: ops(del("a"), put("d", "1"))},
		{name: "keys: prefix delete credited", limits: keys3, before: []*metadpb.Command{ops(put("p/a", "1"), put("p/b", "1"), put("c", "1"))},
			cmd: ops(put("p/c", "1"), delPrefix("p/"), put("d", "1"), put("e", "1"))},
		{name: "keys: put after delete in one txn", limits: keys3, before: []*metadpb.Command{ops(put("a", "1"), put("b", "1"), put("c", "1"))},
			cmd: ops(del("a"), put("a", "1"), put("d", "1")), want: ErrQuotaExceeded},
		{name: "keys: delete while over a lowered quota", limits: &metadpb.Limits{MaxKeys: 1},
			before: []*metadpb.Command{ops(put("a", "1"), put("b", "1"), put("c", "1"))}, cmd: ops(del("a"))},
		{name: "bytes: up to the quota", limits: bytes10, cmd: ops(put("a", "123456789"))},
		{name: "bytes: one over", limits: bytes10, cmd: ops(put("a", "1234567890")), want: ErrQuotaExceeded},
		{name: "bytes: shrinking while over", limits: &metadpb.Limits{MaxDataBytes: 4},
			before: []*metadpb.Command{ops(put("a", "123456789"))}, cmd: ops(put("a", "12345"))},
		{name: "bytes: growing while over", limits: &metadpb.Limits{MaxDataBytes: 4},
			before: []*metadpb.Command{ops(put("a", "1234"))}, cmd: ops(put("a", "12345")), want: ErrQuotaExceeded},
		{name: "leases: up to the quota", limits: &metadpb.Limits{MaxLeases: 2},
			before: []*metadpb.Command{grant(5, 1000)}, cmd: grant(6, 1000)},
		{name: "leases: one over", limits: &metadpb.Limits{MaxLeases: 2},
			before: []*metadpb.Command{grant(5, 1000), grant(6, 1000)}, cmd: grant(7, 1000), want: ErrQuotaExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t, Options{})
			for _, c := range tc.before {
				a.must(c)
			}
			before := a.s.Snapshot()
			resp, err := a.apply(limited(tc.limits, tc.cmd))
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("apply: %v, %v; want %v", resp, err, tc.want)
			}
			if tc.want != nil && !proto.Equal(a.s.Snapshot(), before) {
				t.Fatal("a refused command changed the state")
			}
			// The tracked total stays the sum over the live keys.
			var sum int64
			for _, kv := range a.s.Snapshot().Kvs {
				sum += int64(len(kv.Key) + len(kv.Value))
			}
			if got := a.s.DataBytes(); got != sum {
				t.Fatalf("DataBytes %d, the keys hold %d", got, sum)
			}
		})
	}
	// Failing compares are not a quota error, even over the quota.
	a := newApplier(t, Options{})
	a.must(ops(put("a", "1"), put("b", "1")))
	resp, err := a.apply(limited(&metadpb.Limits{MaxKeys: 1}, txn(cmps("a", 7), put("c", "1"))))
	if err != nil || resp.(*metadpb.TxnResponse).Succeeded {
		t.Fatalf("failed compare over the quota: %v, %v", resp, err)
	}
}
