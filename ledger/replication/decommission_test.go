package replication

import (
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/bookiepb"

	"github.com/strata-log/strata/ledger/bookies"
)

func putInfo(kv *memKV, id, address string) {
	value, _ := proto.Marshal(&bookiepb.BookieInfo{Id: id, Address: address})
	kv.data[bookies.RegistryPrefix+id] = value
}

// A bookie is decommissioned by id: a running one at its registered
// address, a dead one at the address the replicator recorded, an unknown
// address only when given.
func TestMarkDecommissioned(t *testing.T) {
	ctx := testCtx(t)
	kv := newMemKV()
	putInfo(kv, "live", "10.0.0.1:1")
	kv.data[bookies.CookiePrefix+"live"] = []byte("cookie")
	kv.data[bookies.CookiePrefix+"dead"] = []byte("cookie")
	kv.data[bookies.CookiePrefix+"forgotten"] = []byte("cookie")
	kv.data[bookies.CookiePrefix+"dead-longer-name"] = []byte("cookie")
	snap, err := loadSnapshot(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	// The leader records addresses; "dead" was seen at 10.0.0.2:1.
	snap.registered = append(snap.registered, &bookiepb.BookieInfo{Id: "dead", Address: "10.0.0.2:1"})
	if err := syncAddresses(ctx, kv, snap); err != nil {
		t.Fatal(err)
	}

	d, err := MarkDecommissioned(ctx, kv, "live", "", t0)
	if err != nil || d.Address != "10.0.0.1:1" || d.RequestedAtMs != t0.UnixMilli() {
		t.Fatalf("live: %+v, %v", d, err)
	}
	// Again, later: the original request stands.
	if d, err := MarkDecommissioned(ctx, kv, "live", "", t0.Add(time.Hour)); err != nil || d.RequestedAtMs != t0.UnixMilli() {
		t.Fatalf("again: %+v, %v", d, err)
	}
	if d, err := MarkDecommissioned(ctx, kv, "dead", "", t0); err != nil || d.Address != "10.0.0.2:1" {
		t.Fatalf("dead: %+v, %v", d, err)
	}
	if _, err := MarkDecommissioned(ctx, kv, "forgotten", "", t0); !errors.Is(err, ErrAddressUnknown) {
		t.Fatalf("forgotten: %v", err)
	}
	if d, err := MarkDecommissioned(ctx, kv, "forgotten", "10.0.0.3:1", t0); err != nil || d.Address != "10.0.0.3:1" {
		t.Fatalf("forgotten with an address: %+v, %v", d, err)
	}
	if _, err := MarkDecommissioned(ctx, kv, "dead-long", "", t0); !errors.Is(err, ErrUnknownBookie) {
		t.Fatalf("unknown (a prefix of a known id): %v", err)
	}
	var rec Decommission
	if err := json.Unmarshal(kv.data[DecommissionKey("dead")], &rec); err != nil || rec.BookieID != "dead" {
		t.Fatalf("record %s: %+v %v", kv.data[DecommissionKey("dead")], rec, err)
	}

	ok, err := Recommission(ctx, kv, "dead")
	if err != nil || !ok {
		t.Fatalf("recommission: %v %v", ok, err)
	}
	if ok, err := Recommission(ctx, kv, "dead"); err != nil || ok {
		t.Fatalf("recommission again: %v %v", ok, err)
	}
}

// The decommissioned addresses: the record's (unless another bookie now
// registers there) and the bookie's current registration's.
func TestDecommissionedAddresses(t *testing.T) {
	at := time.UnixMilli(t0.UnixMilli())
	s := snapshot{
		registered: []*bookiepb.BookieInfo{
			{Id: "moved", Address: "new:1"},
			{Id: "newcomer", Address: "reused:1"},
		},
		decommissions: []Decommission{
			{BookieID: "moved", Address: "old:1", RequestedAtMs: at.UnixMilli()},
			{BookieID: "retired", Address: "reused:1", RequestedAtMs: at.UnixMilli()},
			{BookieID: "gone", Address: "gone:1", RequestedAtMs: at.UnixMilli()},
		},
	}
	want := map[string]time.Time{"new:1": at, "old:1": at, "gone:1": at}
	if got := s.decommissionedAddresses(); !maps.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Missing records are written for new addresses and deleted for those
// that came back; unchanged ones are not rewritten.
func TestSyncMissing(t *testing.T) {
	ctx := testCtx(t)
	kv := newMemKV()
	old := map[string]time.Time{"a:1": t0, "b:1": t0}
	for a, since := range old {
		value, _ := json.Marshal(missingRecord{Address: a, SinceMs: since.UnixMilli()})
		kv.data[missingKey(a)] = value
	}
	snap, err := loadSnapshot(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	cur := map[string]time.Time{"a:1": t0, "c/x:1": t0.Add(time.Second)}
	kv.puts = 0
	if err := syncMissing(ctx, kv, snap.missing, cur); err != nil {
		t.Fatal(err)
	}
	snap, err = loadSnapshot(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(snap.missing, cur, time.Time.Equal) || kv.puts != 1 {
		t.Errorf("records %v after %d puts, want %v after 1", snap.missing, kv.puts, cur)
	}
	if _, ok := kv.data[MissingPrefix+"c%2Fx:1"]; !ok {
		t.Errorf("address not escaped in the key: %v", kv.keys(MissingPrefix))
	}
}

func TestUnreadableRecordsAreErrors(t *testing.T) {
	for _, key := range []string{DecommissionKey("x"), missingKey("x:1"), AddressPrefix + "x", bookies.RegistryPrefix + "x"} {
		kv := newMemKV()
		kv.data[key] = []byte("{not json")
		if _, err := loadSnapshot(testCtx(t), kv); err == nil {
			t.Errorf("%s: unreadable record accepted", key)
		}
	}
}

// Progress counts what still names a decommissioned bookie; Inspect
// reports the leader and the under-replicated ledgers.
func TestProgressAndInspect(t *testing.T) {
	g := newRig(t, 4)
	w := g.write(ledger.CreateOptions{}, 3, true)
	bad := g.metadata(w.ID()).Fragments[0].Bookies[0]
	ctx := testCtx(t)
	if _, err := Progress(ctx, g.kv, g.c.Meta, bad); !errors.Is(err, ErrUnknownBookie) {
		t.Fatalf("progress of a bookie not decommissioned: %v", err)
	}
	g.decommission(bad)
	d, err := Progress(ctx, g.kv, g.c.Meta, bad)
	if err != nil || d.Ledgers != 1 || d.Fragments != 1 || d.Drained() || d.Leader != nil {
		t.Fatalf("before: %+v %v", d, err)
	}
	value, _ := json.Marshal(LeaderRecord{ID: "b9", SinceMs: 1})
	g.kv.data[LeaderKey] = value
	rep, err := Inspect(ctx, g.kv, g.c.Meta, t0)
	if err != nil || rep.UnderReplicated != 1 || rep.Ledgers != 1 || rep.Leader == nil || rep.Leader.ID != "b9" || len(rep.Decommissions) != 1 {
		t.Fatalf("inspect: %+v %v", rep, err)
	}
	runOnce(t, g)
	d, err = Progress(ctx, g.kv, g.c.Meta, bad)
	if err != nil || !d.Drained() || d.Leader.ID != "b9" {
		t.Fatalf("after: %+v %v", d, err)
	}
	if d.String() == "" {
		t.Error("empty String")
	}
}
