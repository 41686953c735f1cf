package kv

import (
	"testing"

	"github.com/strata-log/strata/proto/metadpb"
	"google.golang.org/protobuf/proto"
)

func TestLeases(t *testing.T) {
	tests := []struct {
		name       string
		steps      []step
		wantKVs    string
		wantLeases []*metadpb.Lease
		wantRev    int64
	}{{
		name: "grant with an id and with the log index",
		steps: []step{
			{cmd: grant(100, 5000), want: &metadpb.LeaseGrantResponse{Id: 100, TtlMs: 5000}},
			{cmd: grant(0, 3000), want: &metadpb.LeaseGrantResponse{Id: 2, TtlMs: 3000}},
		},
		wantLeases: []*metadpb.Lease{{Id: 2, TtlMs: 3000}, {Id: 100, TtlMs: 5000}},
	}, {
		name: "revoke deletes the attached keys at one revision",
		steps: []step{
			{cmd: grant(7, 1000), want: &metadpb.LeaseGrantResponse{Id: 7, TtlMs: 1000}},
			{cmd: ops(putL("b", "1", 7), putL("a", "1", 7), put("c", "1")), want: txnOK(1,
				putResult(kv("b", "1", 1, 1, 1, 7)), putResult(kv("a", "1", 1, 1, 1, 7)), putResult(kv("c", "1", 1, 1, 1, 0)))},
			{cmd: revoke(7), want: &metadpb.LeaseRevokeResponse{Revision: 2}},
			{cmd: revoke(7), wantErr: ErrLeaseNotFound},
		},
		wantKVs: "c=1 v1 c1 m1\n",
		wantRev: 2,
	}, {
		name: "revoking a lease without keys keeps the revision",
		steps: []step{
			{cmd: ops(put("a", "1")), want: txnOK(1, putResult(kv("a", "1", 1, 1, 1, 0)))},
			{cmd: grant(7, 1000), want: &metadpb.LeaseGrantResponse{Id: 7, TtlMs: 1000}},
			{cmd: revoke(7), want: &metadpb.LeaseRevokeResponse{Revision: 1}},
		},
		wantKVs: "a=1 v1 c1 m1\n",
		wantRev: 1,
	}, {
		name: "put with lease 0 detaches, put with another lease moves",
		steps: []step{
			{cmd: grant(7, 1000), want: &metadpb.LeaseGrantResponse{Id: 7, TtlMs: 1000}},
			{cmd: grant(8, 1000), want: &metadpb.LeaseGrantResponse{Id: 8, TtlMs: 1000}},
			{cmd: ops(putL("a", "1", 7), putL("b", "1", 7)), want: txnOK(1,
				putResult(kv("a", "1", 1, 1, 1, 7)), putResult(kv("b", "1", 1, 1, 1, 7)))},
			{cmd: ops(put("a", "2"), putL("b", "2", 8)), want: txnOK(2,
				putResult(kv("a", "2", 1, 2, 2, 0)), putResult(kv("b", "2", 1, 2, 2, 8)))},
			{cmd: revoke(7), want: &metadpb.LeaseRevokeResponse{Revision: 2}},
			{cmd: revoke(8), want: &metadpb.LeaseRevokeResponse{Revision: 3}},
		},
		wantKVs: "a=2 v2 c1 m2\n",
		wantRev: 3,
	}, {
		name: "deleted keys leave their lease",
		steps: []step{
			{cmd: grant(7, 1000), want: &metadpb.LeaseGrantResponse{Id: 7, TtlMs: 1000}},
			{cmd: ops(putL("a", "1", 7), putL("b/1", "1", 7), putL("b/2", "1", 7)), want: txnOK(1,
				putResult(kv("a", "1", 1, 1, 1, 7)), putResult(kv("b/1", "1", 1, 1, 1, 7)), putResult(kv("b/2", "1", 1, 1, 1, 7)))},
			{cmd: ops(delPrefix("b/")), want: txnOK(2, delResult(2))},
			// b/1 is recreated without a lease: the revoke must not touch it.
			{cmd: ops(put("b/1", "2")), want: txnOK(3, putResult(kv("b/1", "2", 3, 3, 1, 0)))},
			{cmd: revoke(7), want: &metadpb.LeaseRevokeResponse{Revision: 4}},
		},
		wantKVs: "b/1=2 v1 c3 m3\n",
		wantRev: 4,
	}, {
		name: "a failed txn does not attach",
		steps: []step{
			{cmd: grant(7, 1000), want: &metadpb.LeaseGrantResponse{Id: 7, TtlMs: 1000}},
			{cmd: txn(cmps("a", 1), putL("a", "1", 7)), want: txnFailed(0, &metadpb.KeyValue{Key: "a"})},
			{cmd: revoke(7), want: &metadpb.LeaseRevokeResponse{Revision: 0}},
		},
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
			got := s.Leases()
			if len(got) != len(tt.wantLeases) {
				t.Fatalf("leases %v, want %v", got, tt.wantLeases)
			}
			for i := range got {
				if !proto.Equal(got[i], tt.wantLeases[i]) {
					t.Fatalf("leases %v, want %v", got, tt.wantLeases)
				}
				if !s.HasLease(got[i].Id) {
					t.Errorf("HasLease(%d) false", got[i].Id)
				}
			}
		})
	}
}

func TestLeaseRevokeEvents(t *testing.T) {
	a := newApplier(t, Options{})
	a.must(grant(7, 1000))
	a.must(ops(putL("z", "1", 7), putL("m", "1", 7), putL("a", "1", 7), put("x", "1")))
	a.must(revoke(7))
	resps, _, err := a.s.Events("", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dumpEvents(resps), "rev 2: DELETE a DELETE m DELETE z\n"; got != want {
		t.Fatalf("events:\n%swant:\n%s", got, want)
	}
	if a.s.HasLease(7) {
		t.Fatal("lease 7 survived its revoke")
	}
}

func TestMembers(t *testing.T) {
	a := newApplier(t, Options{})
	if got := a.s.Members(); len(got) != 0 {
		t.Fatalf("fresh store has members %v", got)
	}
	steps := []struct {
		cmd         *metadpb.Command
		wantChanged bool
		want        string // Members() rendered as id=client/admin
	}{
		{member("n2", "c2", "a2"), true, "n2=c2/a2"},
		{member("n1", "c1", "a1"), true, "n1=c1/a1 n2=c2/a2"},
		{member("n1", "c1", "a1"), false, "n1=c1/a1 n2=c2/a2"},
		{member("n1", "c1b", ""), true, "n1=c1b/ n2=c2/a2"},
		{member("n2", "", "a2"), true, "n1=c1b/"},
		{member("n3", "", ""), false, "n1=c1b/"},
	}
	for i, st := range steps {
		changed := a.s.Changed()
		rev := a.s.Revision()
		resp, err := a.apply(st.cmd)
		if err != nil || resp != nil {
			t.Fatalf("step %d: Apply = %v, %v; want nil, nil", i, resp, err)
		}
		var got string
		for j, m := range a.s.Members() {
			if j > 0 {
				got += " "
			}
			got += m.Id + "=" + m.ClientAddress + "/" + m.AdminAddress
		}
		if got != st.want {
			t.Errorf("step %d: members %q, want %q", i, got, st.want)
		}
		select {
		case <-changed:
			if !st.wantChanged {
				t.Errorf("step %d: Changed fired", i)
			}
		default:
			if st.wantChanged {
				t.Errorf("step %d: Changed did not fire", i)
			}
		}
		if a.s.Revision() != rev {
			t.Errorf("step %d: member record moved the revision", i)
		}
	}
	m, ok := a.s.Member("n1")
	if !ok || m.ClientAddress != "c1b" {
		t.Fatalf("Member(n1) = %v, %v", m, ok)
	}
	m.ClientAddress = "changed by caller"
	if m, _ := a.s.Member("n1"); m.ClientAddress != "c1b" {
		t.Fatal("caller changed the stored member record")
	}
	if _, ok := a.s.Member("n2"); ok {
		t.Fatal("deleted member still found")
	}
}

// LeaseKey finds a key of a lease matching a predicate: keys moved to
// another lease or deleted are no longer the lease's.
func TestLeaseKey(t *testing.T) {
	a := newApplier(t, Options{})
	a.must(grant(7, 1000))
	a.must(grant(8, 1000))
	a.must(ops(putL("/a", "1", 7), putL("/b", "1", 7), putL("/c", "1", 8)))
	a.must(ops(putL("/b", "2", 8), del("/c")))
	all := func(string) bool { return true }
	for _, tc := range []struct {
		lease int64
		match func(string) bool
		want  string
	}{
		{7, all, "/a"},
		{7, func(k string) bool { return k == "/b" }, ""},
		{8, all, "/b"},
		{9, all, ""},
	} {
		got, found := a.s.LeaseKey(tc.lease, tc.match)
		if got != tc.want || found != (tc.want != "") {
			t.Errorf("lease %d: %q, %t; want %q", tc.lease, got, found, tc.want)
		}
	}
}
