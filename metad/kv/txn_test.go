package kv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-log/strata/proto/metadpb"
	"google.golang.org/protobuf/proto"
)

// step is one command of a scripted test and what Apply must answer.
type step struct {
	cmd     *metadpb.Command
	want    proto.Message // nil for member records and errors
	wantErr error
}

// runSteps applies the steps to a fresh store and returns it.
func runSteps(t *testing.T, steps []step) *Store {
	t.Helper()
	a := newApplier(t, Options{})
	for i, st := range steps {
		got, err := a.apply(st.cmd)
		checkResponse(t, fmt.Sprintf("step %d", i), got, err, st.want, st.wantErr)
	}
	checkInvariants(t, a.s)
	return a.s
}

func TestTxn(t *testing.T) {
	tests := []struct {
		name    string
		steps   []step
		wantKVs string
		wantRev int64
	}{{
		name: "versions count puts and keep create revision",
		steps: []step{
			{cmd: ops(put("a", "1")), want: txnOK(1, putResult(kv("a", "1", 1, 1, 1, 0)))},
			{cmd: ops(put("b", "1")), want: txnOK(2, putResult(kv("b", "1", 2, 2, 1, 0)))},
			{cmd: ops(put("a", "2")), want: txnOK(3, putResult(kv("a", "2", 1, 3, 2, 0)))},
		},
		wantKVs: "a=2 v2 c1 m3\nb=1 v1 c2 m2\n",
		wantRev: 3,
	}, {
		name: "one revision for all ops of a txn, later ops see earlier ones",
		steps: []step{
			{cmd: ops(put("a", "1"), put("a", "2"), put("b", "1")), want: txnOK(1,
				putResult(kv("a", "1", 1, 1, 1, 0)),
				putResult(kv("a", "2", 1, 1, 2, 0)),
				putResult(kv("b", "1", 1, 1, 1, 0)))},
			{cmd: ops(del("a"), put("a", "3")), want: txnOK(2,
				delResult(1),
				putResult(kv("a", "3", 2, 2, 1, 0)))},
		},
		wantKVs: "a=3 v1 c2 m2\nb=1 v1 c1 m1\n",
		wantRev: 2,
	}, {
		name: "txn that changes nothing keeps the revision",
		steps: []step{
			{cmd: ops(put("a", "1")), want: txnOK(1, putResult(kv("a", "1", 1, 1, 1, 0)))},
			{cmd: ops(), want: txnOK(1)},
			{cmd: ops(del("zz"), delPrefix("q")), want: txnOK(1, delResult(0), delResult(0))},
			{cmd: txn(cmps("a", 1)), want: txnOK(1)},
		},
		wantKVs: "a=1 v1 c1 m1\n",
		wantRev: 1,
	}, {
		name: "compare and set",
		steps: []step{
			// Create only if absent.
			{cmd: txn(cmps("a", 0), put("a", "1")), want: txnOK(1, putResult(kv("a", "1", 1, 1, 1, 0)))},
			{cmd: txn(cmps("a", 0), put("a", "x")), want: txnFailed(1, kv("a", "1", 1, 1, 1, 0))},
			// Update at the right version.
			{cmd: txn(cmps("a", 1), put("a", "2")), want: txnOK(2, putResult(kv("a", "2", 1, 2, 2, 0)))},
			{cmd: txn(cmps("a", 1), put("a", "x")), want: txnFailed(2, kv("a", "2", 1, 2, 2, 0))},
			// All compares must hold; Current reports each compared key in
			// order, absent keys with version 0.
			{cmd: txn(cmps("a", 2, "b", 1, "a", 2), put("c", "x")), want: txnFailed(2,
				kv("a", "2", 1, 2, 2, 0), &metadpb.KeyValue{Key: "b"}, kv("a", "2", 1, 2, 2, 0))},
			{cmd: txn(cmps("a", 2, "b", 0), del("a"), put("b", "1")), want: txnOK(3, delResult(1), putResult(kv("b", "1", 3, 3, 1, 0)))},
			{cmd: txn(cmps("a", 0, "b", 1)), want: txnOK(3)},
		},
		wantKVs: "b=1 v1 c3 m3\n",
		wantRev: 3,
	}, {
		name: "delete and re-create starts a new life",
		steps: []step{
			{cmd: ops(put("a", "1")), want: txnOK(1, putResult(kv("a", "1", 1, 1, 1, 0)))},
			{cmd: ops(put("a", "2")), want: txnOK(2, putResult(kv("a", "2", 1, 2, 2, 0)))},
			{cmd: ops(del("a")), want: txnOK(3, delResult(1))},
			{cmd: ops(del("a")), want: txnOK(3, delResult(0))},
			{cmd: ops(put("a", "3")), want: txnOK(4, putResult(kv("a", "3", 4, 4, 1, 0)))},
		},
		wantKVs: "a=3 v1 c4 m4\n",
		wantRev: 4,
	}, {
		name: "prefix delete removes exactly the keys under the prefix",
		steps: []step{
			{cmd: ops(put("t/a", ""), put("t/b", ""), put("t/b/c", ""), put("t", ""), put("t0", ""), put("s", ""), put("u", "")),
				want: txnOK(1,
					putResult(kv("t/a", "", 1, 1, 1, 0)), putResult(kv("t/b", "", 1, 1, 1, 0)),
					putResult(kv("t/b/c", "", 1, 1, 1, 0)), putResult(kv("t", "", 1, 1, 1, 0)),
					putResult(kv("t0", "", 1, 1, 1, 0)), putResult(kv("s", "", 1, 1, 1, 0)),
					putResult(kv("u", "", 1, 1, 1, 0)))},
			{cmd: ops(delPrefix("t/")), want: txnOK(2, delResult(3))},
			{cmd: ops(delPrefix("t")), want: txnOK(3, delResult(2))},
			{cmd: ops(delPrefix("t")), want: txnOK(3, delResult(0))},
		},
		wantKVs: "s= v1 c1 m1\nu= v1 c1 m1\n",
		wantRev: 3,
	}, {
		name: "empty value",
		steps: []step{
			{cmd: ops(put("a", "")), want: txnOK(1, putResult(kv("a", "", 1, 1, 1, 0)))},
		},
		wantKVs: "a= v1 c1 m1\n",
		wantRev: 1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := runSteps(t, tt.steps)
			if got := dumpKVs(s); got != tt.wantKVs {
				t.Errorf("kvs:\n%s\nwant:\n%s", got, tt.wantKVs)
			}
			if got := s.Revision(); got != tt.wantRev {
				t.Errorf("revision %d, want %d", got, tt.wantRev)
			}
			if got := s.AppliedIndex(); got != uint64(len(tt.steps)) {
				t.Errorf("applied index %d, want %d", got, len(tt.steps))
			}
		})
	}
}

// TestInvalidChangesNothing applies invalid commands to a populated store
// and checks that each returns the right error and leaves every part of the
// state (and the Changed channel) alone, whatever its compares, while the
// applied index still advances.
func TestInvalidChangesNothing(t *testing.T) {
	long := strings.Repeat("k", MaxKeyBytes+1)
	big := strings.Repeat("v", MaxValueBytes+1)
	noOp := &metadpb.Op{}
	tests := []struct {
		name    string
		cmd     *metadpb.Command
		wantErr error
	}{
		{"nil command", nil, ErrInvalidCommand},
		{"empty command", &metadpb.Command{}, ErrInvalidCommand},
		{"nil txn", &metadpb.Command{Command: &metadpb.Command_Txn{}}, ErrInvalidCommand},
		{"nil op", ops(put("x", "1"), nil), ErrInvalidCommand},
		{"empty op", ops(put("x", "1"), noOp), ErrInvalidCommand},
		{"nil put", ops(&metadpb.Op{Op: &metadpb.Op_Put{}}), ErrInvalidCommand},
		{"nil delete", ops(&metadpb.Op{Op: &metadpb.Op_Delete{}}), ErrInvalidCommand},
		{"nil compare", txn([]*metadpb.Compare{nil}, put("x", "1")), ErrInvalidCommand},
		{"negative compare version", txn(cmps("a", -1), put("x", "1")), ErrInvalidCommand},
		{"empty compare key", txn(cmps("", 0), put("x", "1")), ErrInvalidKey},
		{"empty put key", ops(put("x", "1"), put("", "1")), ErrInvalidKey},
		{"long put key", ops(put("x", "1"), put(long, "1")), ErrInvalidKey},
		{"put key not UTF-8", ops(put("x", "1"), put("a\xff", "1")), ErrInvalidKey},
		{"empty delete key", ops(put("x", "1"), del("")), ErrInvalidKey},
		{"empty delete prefix", ops(put("x", "1"), delPrefix("")), ErrInvalidKey},
		{"long delete key", ops(del(long)), ErrInvalidKey},
		{"value too large", ops(put("x", "1"), put("y", big)), ErrValueTooLarge},
		{"unknown lease", ops(del("a"), putL("x", "1", 99)), ErrLeaseNotFound},
		{"unknown lease with failing compare", txn(cmps("a", 5), putL("x", "1", 99)), ErrLeaseNotFound},
		{"negative lease", ops(putL("x", "1", -1)), ErrLeaseNotFound},
		{"nil lease grant", &metadpb.Command{Command: &metadpb.Command_LeaseGrant{}}, ErrInvalidCommand},
		{"lease ttl zero", grant(5, 0), ErrInvalidCommand},
		{"lease ttl negative", grant(5, -1), ErrInvalidCommand},
		{"lease id negative", grant(-5, 1000), ErrInvalidCommand},
		{"lease id exists", grant(7, 1000), ErrInvalidCommand},
		{"nil lease revoke", &metadpb.Command{Command: &metadpb.Command_LeaseRevoke{}}, ErrInvalidCommand},
		{"revoke unknown lease", revoke(99), ErrLeaseNotFound},
		{"nil member", &metadpb.Command{Command: &metadpb.Command_MemberInfo{}}, ErrInvalidCommand},
		{"member without id", member("", "c:1", "a:1"), ErrInvalidCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newApplier(t, Options{})
			a.must(grant(7, 1000))
			a.must(ops(put("a", "1"), putL("b", "1", 7), put("c/1", "1")))
			a.must(member("m1", "c:1", "a:1"))
			before := a.s.Snapshot()
			changed := a.s.Changed()

			got, err := a.s.Apply(100, tt.cmd)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if got != nil {
				t.Fatalf("response %v with error", got)
			}
			if !strings.HasPrefix(err.Error(), "metad: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			if after := a.s.Snapshot(); !proto.Equal(before, after) {
				t.Fatalf("state changed:\nbefore %v\nafter  %v", before, after)
			}
			if a.s.AppliedIndex() != 100 {
				t.Errorf("applied index %d, want 100", a.s.AppliedIndex())
			}
			select {
			case <-changed:
				t.Error("Changed fired for a rejected command")
			default:
			}
			checkInvariants(t, a.s)
		})
	}
}

func TestLimits(t *testing.T) {
	a := newApplier(t, Options{})
	maxKey := strings.Repeat("k", MaxKeyBytes)
	maxValue := strings.Repeat("v", MaxValueBytes)
	a.must(ops(put(maxKey, maxValue), put("日本語", "x")))
	if got, ok, _ := a.s.Get(maxKey); !ok || len(got.Value) != MaxValueBytes {
		t.Fatalf("largest key and value not stored")
	}
}

// TestApplyCopiesInput checks that the store keeps no reference to the
// caller's command buffers, and that callers cannot reach the stored state
// through returned messages.
func TestApplyCopiesInput(t *testing.T) {
	a := newApplier(t, Options{})
	value := []byte("hello")
	cmd := ops(&metadpb.Op{Op: &metadpb.Op_Put{Put: &metadpb.PutOp{Key: "a", Value: value}}})
	resp := a.must(cmd).(*metadpb.TxnResponse)
	copy(value, "XXXXX")
	resp.Results[0].Kv.Version = 42
	got, _, _ := a.s.Get("a")
	got.ModRevision = 42
	if again, _, _ := a.s.Get("a"); string(again.Value) != "hello" || again.Version != 1 || again.ModRevision != 1 {
		t.Fatalf("stored kv changed through caller's messages: %v", again)
	}
}

func TestGetAndList(t *testing.T) {
	a := newApplier(t, Options{})
	if _, found, rev := a.s.Get("a"); found || rev != 0 {
		t.Fatalf("empty store: found %v revision %d", found, rev)
	}
	for i := range 25 {
		a.must(ops(put(fmt.Sprintf("p/%02d", i), "v"), put(fmt.Sprintf("q/%02d", i), "w")))
	}
	a.must(ops(put("p", "x"), put("p0", "y"), put("o", "z")))
	if got, found, rev := a.s.Get("p/03"); !found || rev != 26 || !proto.Equal(got, kv("p/03", "v", 4, 4, 1, 0)) {
		t.Fatalf("Get = %v %v %d", got, found, rev)
	}
	if n := a.s.KeyCount(); n != 53 {
		t.Fatalf("KeyCount %d, want 53", n)
	}

	keys := func(kvs []*metadpb.KeyValue) string {
		var out []string
		for _, kv := range kvs {
			out = append(out, kv.Key)
		}
		return strings.Join(out, ",")
	}
	allP := "p"
	for i := range 25 {
		allP += fmt.Sprintf(",p/%02d", i)
	}
	allP += ",p0"
	tests := []struct {
		prefix, startAfter string
		limit              int
		want               string
		wantMore           bool
	}{
		{"p/", "", 3, "p/00,p/01,p/02", true},
		{"p/", "p/02", 3, "p/03,p/04,p/05", true},
		{"p/", "p/21", 3, "p/22,p/23,p/24", false},
		{"p/", "p/24", 3, "", false},
		{"p/", "p/2", 2, "p/20,p/21", true}, // startAfter need not be a key
		{"p/", "a", 2, "p/00,p/01", true},   // startAfter before the prefix
		{"p/", "zzz", 2, "", false},         // startAfter after the prefix
		{"p", "", 0, allP, false},           // default limit
		{"", "p/24", 2, "p0,q/00", true},
		{"", "", 3, "o,p,p/00", true},
		{"r", "", 10, "", false},
		{"q/1", "", 100, "q/10,q/11,q/12,q/13,q/14,q/15,q/16,q/17,q/18,q/19", false},
	}
	for _, tt := range tests {
		got, more, rev := a.s.List(tt.prefix, tt.startAfter, tt.limit, false)
		if keys(got) != tt.want || more != tt.wantMore || rev != 26 {
			t.Errorf("List(%q, %q, %d) = %s more=%v rev=%d, want %s more=%v",
				tt.prefix, tt.startAfter, tt.limit, keys(got), more, rev, tt.want, tt.wantMore)
		}
	}

	got, _, _ := a.s.List("p/", "", 1, true)
	if len(got) != 1 || got[0].Value != nil || got[0].Version != 1 {
		t.Errorf("keys-only list = %v", got)
	}

	// Paging through everything with small pages sees each key once.
	var paged []string
	after := ""
	for {
		page, more, _ := a.s.List("", after, 4, true)
		for _, kv := range page {
			paged = append(paged, kv.Key)
		}
		if !more {
			break
		}
		after = page[len(page)-1].Key
	}
	if len(paged) != 53 {
		t.Fatalf("paging saw %d keys, want 53", len(paged))
	}
}

func TestDefaultListLimit(t *testing.T) {
	a := newApplier(t, Options{})
	var batch []*metadpb.Op
	for i := range DefaultListLimit + 1 {
		batch = append(batch, put(fmt.Sprintf("k%05d", i), ""))
	}
	a.must(ops(batch...))
	got, more, _ := a.s.List("", "", 0, true)
	if len(got) != DefaultListLimit || !more {
		t.Fatalf("List with limit 0: %d keys, more %v", len(got), more)
	}
}

// TestCompareModRevisionSurvivesRecreation: a key deleted and created
// again is back at version 1, so a compare on the version alone holds for
// the new key too (the ABA that let a broker delete its successor's
// ownership record); a compare that also names the mod revision does not.
func TestCompareModRevisionSurvivesRecreation(t *testing.T) {
	a := newApplier(t, Options{})
	first := a.must(ops(put("/owner", "k1"))).(*metadpb.TxnResponse).Results[0].Kv
	a.must(ops(del("/owner")))
	second := a.must(ops(put("/owner", "k2"))).(*metadpb.TxnResponse).Results[0].Kv
	if first.Version != second.Version || first.ModRevision == second.ModRevision {
		t.Fatalf("versions %d, %d and mod revisions %d, %d", first.Version, second.Version, first.ModRevision, second.ModRevision)
	}
	stale := &metadpb.Compare{Key: "/owner", Version: first.Version, ModRevision: first.ModRevision}
	if r := a.must(txn([]*metadpb.Compare{stale}, del("/owner"))).(*metadpb.TxnResponse); r.Succeeded {
		t.Fatalf("a compare on the first record's mod revision held for the second")
	}
	current := &metadpb.Compare{Key: "/owner", Version: second.Version, ModRevision: second.ModRevision}
	if r := a.must(txn([]*metadpb.Compare{current}, del("/owner"))).(*metadpb.TxnResponse); !r.Succeeded {
		t.Fatalf("a compare on the current record did not hold: %v", r)
	}
	if _, err := a.apply(txn([]*metadpb.Compare{{Key: "/owner", ModRevision: -1}})); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("negative mod revision: %v", err)
	}
	checkInvariants(t, a.s)
}
