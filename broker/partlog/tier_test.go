package partlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/compaction"
	"github.com/strata-log/strata/broker/partlog/retention"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/tieringpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/segfile"
)

// tierKey is the tests' cluster tier key: tiers given it write
// authenticated objects, and segfileReader reads with it.
var tierKey = func() *segfile.Key {
	k, err := segfile.NewKey(bytes.Repeat([]byte{0x7e}, segfile.KeySize))
	if err != nil {
		panic(err)
	}
	return k
}()

// segfileReader is a TierReader straight over the store (no cache).
type segfileReader struct{ store objstore.Store }

// auth is how the reader authenticates t's object.
func (r segfileReader) auth(t *brokerpb.TieredSegment) segfile.Auth {
	return (&partlog.Tier{Key: tierKey}).Auth(t)
}

func (r segfileReader) Fetch(ctx context.Context, t *brokerpb.TieredSegment, offset int64, maxBytes int) ([]byte, error) {
	rr := tierpass.ObjectRange{Store: r.store, Key: t.ObjectKey}
	tail, err := segfile.ReadTail(ctx, rr, t.IndexPos, t.SizeBytes, r.auth(t))
	if err != nil {
		return nil, err
	}
	return tail.ReadFetch(ctx, rr, offset, int64(maxBytes))
}

func (r segfileReader) OffsetForTime(ctx context.Context, t *brokerpb.TieredSegment, ts int64, maxDecompressed int) (int64, int64, bool, error) {
	rr := tierpass.ObjectRange{Store: r.store, Key: t.ObjectKey}
	tail, err := segfile.ReadTail(ctx, rr, t.IndexPos, t.SizeBytes, r.auth(t))
	if err != nil {
		return 0, 0, false, err
	}
	return tail.ReadOffsetForTime(ctx, rr, ts, t.BaseOffset, maxDecompressed)
}

// tierUploadConfig is a log's config tiering every closed ledger at once
// (one object per ledger) to store, with key, and keeping no local copy
// nor anything to retention.
func tierUploadConfig(f *partlog.Fixture, store objstore.Store, key *segfile.Key) partlog.Config {
	cfg := f.Config(1)
	cfg.SegmentAge = time.Minute
	cfg.Tier = &partlog.Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "c/t/topic-id/3/", TopicID: "topic-id",
		SegmentBytes: 1, MaxDelay: time.Hour, OrphanGrace: time.Hour, Key: key}
	cfg.Policy = partlog.Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1, RemoteStorage: true, LocalRetentionMs: 0}
	return cfg
}

// TestTierUploadReadDelete: closed ledgers become objects (one per
// ledger here), the bookie copies go, every offset and timestamp still
// reads back the same, through a takeover too; retention then deletes
// objects; the orphan sweep deletes what no list names.
func TestTierUploadReadDelete(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	cfg := tierUploadConfig(f, store, tierKey)
	l := f.Open(cfg)
	for range 4 {
		partlog.AppendN(t, l, 3)
		partlog.RollByAge(t, f, l)
	}
	partlog.AppendN(t, l, 1)
	before := l.Describe().Segments
	if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
		t.Fatal(err)
	}
	pl := l.Describe()
	if len(pl.Tiered) != 4 || len(pl.Segments) != 1 || pl.Segments[0].Closed {
		t.Fatalf("after tiering: %d objects, %d ledgers; want 4 and the open one", len(pl.Tiered), len(pl.Segments))
	}
	for i, s := range pl.Tiered {
		if s.BaseOffset != before[i].FirstOffset || s.LastOffset != before[i].LastOffset || s.SourceLedgers[0] != before[i].LedgerId {
			t.Fatalf("object %d covers %d-%d from %v, ledger %d covered %d-%d", i, s.BaseOffset, s.LastOffset,
				s.SourceLedgers, before[i].LedgerId, before[i].FirstOffset, before[i].LastOffset)
		}
		if _, _, err := f.Cluster.Env().Meta.Get(partlog.Ctx(t), before[i].LedgerId); !errors.Is(err, ledger.ErrNoSuchLedger) {
			t.Fatalf("ledger %d still exists: %v", before[i].LedgerId, err)
		}
	}
	check := func(l *partlog.Log) {
		t.Helper()
		hw := l.HighWatermark()
		for off := int64(0); off < hw; off++ {
			res, err := l.Fetch(partlog.Ctx(t), off, 1, 0)
			if err != nil {
				t.Fatalf("Fetch(%d): %v", off, err)
			}
			found := false
			for _, r := range partlog.DecodeAll(t, res.Records()) {
				found = found || (r.Offset == off && string(r.Value) == fmt.Sprintf("r%d", off))
			}
			if !found {
				t.Fatalf("Fetch(%d) did not return that offset's record", off)
			}
			got, ts, err := l.ListOffset(partlog.Ctx(t), 10*off)
			if err != nil || got != off || ts != 10*off {
				t.Fatalf("ListOffset(%d) = %d, %d, %v; want offset %d", 10*off, got, ts, err, off)
			}
		}
	}
	check(l)
	if err := l.Close(partlog.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	cfg2 := f.Config(2)
	cfg2.Tier, cfg2.Policy, cfg2.Cache = cfg.Tier, cfg.Policy, nil
	l2 := f.Open(cfg2)
	check(l2)

	// Retention across both tiers: keep at most one object's bytes.
	pol := cfg.Policy
	pol.Delete, pol.RetentionBytes = true, pl.Tiered[3].DataBytes
	l2.SetPolicy(pol)
	cut, err := retention.Enforce(partlog.Ctx(t), l2)
	if err != nil || cut.Start != pl.Tiered[3].BaseOffset {
		t.Fatalf("retention: %+v, %v; want the log to start at the last object, %d", cut, err, pl.Tiered[3].BaseOffset)
	}
	for _, s := range pl.Tiered[:3] {
		if _, err := store.Stat(partlog.Ctx(t), s.ObjectKey); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("object %s of a deleted segment: %v", s.ObjectKey, err)
		}
	}
	if recs := partlog.FetchAll(t, l2, cut.Start); len(recs) == 0 || recs[0].Offset != cut.Start {
		t.Fatalf("reading from the new log start: %d records", len(recs))
	}

	// The orphan sweep deletes objects under the prefix that no list
	// names, once old enough, and nothing else.
	if _, err := store.Put(partlog.Ctx(t), "c/t/topic-id/3/00000000000000000000-00000000000000000001-00.seg", bytes.NewReader([]byte("junk")), 4, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(partlog.Ctx(t), "c/t/other/3/x.seg", bytes.NewReader([]byte("not ours")), 8, nil); err != nil {
		t.Fatal(err)
	}
	store.AddIncompleteUpload("c/t/topic-id/3/abandoned.seg", time.Now().Add(-time.Hour))
	l2.Config().Tier.OrphanGrace = time.Minute
	store.AddIncompleteUpload("c/t/topic-id/3/in-progress.seg", time.Now())
	if err := tierpass.Run(partlog.Ctx(t), l2, true); err != nil {
		t.Fatal(err)
	}
	var uploads []string
	_ = store.ListIncompleteUploads(partlog.Ctx(t), "", func(u objstore.UploadInfo) bool { uploads = append(uploads, u.Key); return true })
	if fmt.Sprint(uploads) != "[c/t/topic-id/3/in-progress.seg]" {
		t.Fatalf("incomplete uploads after the sweep: %v, want only the young one", uploads)
	}
	l2.Config().Tier.OrphanGrace = time.Nanosecond
	if err := tierpass.Run(partlog.Ctx(t), l2, true); err != nil {
		t.Fatal(err)
	}
	// (The takeover closed the open ledger, so that check also uploaded it.)
	var keys []string
	_ = store.List(partlog.Ctx(t), "", "", func(o objstore.ObjectInfo) bool { keys = append(keys, o.Key); return true })
	want := []string{"c/t/other/3/x.seg"}
	for _, s := range l2.Describe().Tiered {
		want = append(want, s.ObjectKey)
	}
	if fmt.Sprint(keys) != fmt.Sprint(want) || len(want) != 3 {
		t.Fatalf("objects after the sweep: %v, want %v", keys, want)
	}
}

// TestTierCorruptObjectIsRefusedAtVerify: an object whose bytes change on
// the way is not committed, and the ledgers stay (T8): a damaged tail with
// the default read-back, damaged data with VerifyFull.
func TestTierCorruptObjectIsRefusedAtVerify(t *testing.T) {
	t.Run("tail", func(t *testing.T) { testTierCorruptReadBack(t, false) })
	t.Run("data with VerifyFull", func(t *testing.T) { testTierCorruptReadBack(t, true) })
}

func testTierCorruptReadBack(t *testing.T, full bool) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	store.SetHook(func(c memstore.Call) memstore.Fault {
		// The tail read starts past 0; a full verification reads from 0.
		if c.Op == objstore.OpGetRange && (c.Off == 0) == full {
			return memstore.Fault{Body: func(b []byte) []byte {
				b = bytes.Clone(b)
				b[len(b)/2] ^= 1 // one bit flipped on the way back
				return b
			}}
		}
		return memstore.Fault{}
	})
	cfg := f.Config(1)
	cfg.SegmentAge = time.Minute
	cfg.Tier = &partlog.Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "p/", SegmentBytes: 1,
		VerifyFull: full}
	cfg.Policy = partlog.Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1, RemoteStorage: true, LocalRetentionMs: 0}
	l := f.Open(cfg)
	partlog.AppendN(t, l, 2)
	partlog.RollByAge(t, f, l)
	if err := tierpass.Run(partlog.Ctx(t), l, false); err == nil {
		t.Fatal("a corrupt read-back was committed")
	}
	pl := l.Describe()
	if len(pl.Tiered) != 0 || len(pl.Segments) != 1 {
		t.Fatalf("%d objects, %d ledgers; want none and the sealed one", len(pl.Tiered), len(pl.Segments))
	}
	var keys []string
	_ = store.List(partlog.Ctx(t), "", "", func(o objstore.ObjectInfo) bool { keys = append(keys, o.Key); return true })
	if len(keys) != 0 {
		t.Fatalf("objects left: %v", keys)
	}
	if recs := partlog.FetchAll(t, l, 0); len(recs) != 6 {
		t.Fatalf("read %d records, want 6", len(recs))
	}
}

// TestTierStaleOwnerCannotCommit: an owner that lost the partition (a
// zombie: another broker took over) uploads, and its commit fails on the
// list's version (T7); its object is deleted, and it fails (P3).
func TestTierStaleOwnerCannotCommit(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	tier := &partlog.Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "p/", SegmentBytes: 1}
	pol := partlog.Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1, RemoteStorage: true, LocalRetentionMs: -1}
	cfg := f.Config(1)
	cfg.SegmentAge, cfg.Tier, cfg.Policy = time.Minute, tier, pol
	zombie := f.Open(cfg)
	partlog.AppendN(t, zombie, 2)
	partlog.RollByAge(t, f, zombie)

	cfg2 := f.Config(2)
	cfg2.Tier, cfg2.Policy = tier, pol
	owner := f.Open(cfg2) // takes over: the list's version moves on

	if err := tierpass.Run(partlog.Ctx(t), zombie, false); !errors.Is(err, partlog.ErrConflict) {
		t.Fatalf("the zombie's commit: %v, want a conflict", err)
	}
	if zombie.Err() == nil {
		t.Fatal("the zombie did not fail")
	}
	var keys []string
	_ = store.List(partlog.Ctx(t), "", "", func(o objstore.ObjectInfo) bool { keys = append(keys, o.Key); return true })
	if len(keys) != 0 {
		t.Fatalf("the zombie's object is left: %v", keys)
	}
	if pl := owner.Describe(); len(pl.Tiered) != 0 {
		t.Fatalf("the owner's list names %d objects", len(pl.Tiered))
	}
	if err := tierpass.Run(partlog.Ctx(t), owner, false); err != nil {
		t.Fatal(err)
	}
	if pl := owner.Describe(); len(pl.Tiered) == 0 {
		t.Fatal("the owner did not tier")
	}
}

// TestTierGarbageQueue: retention unlinks an object and queues it in the
// same CAS (T6); while the store refuses the deletion it stays queued, in
// metad, across a takeover; once the store deletes it, the queue empties.
func TestTierGarbageQueue(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	tier := &partlog.Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "p/", SegmentBytes: 1,
		DeleteDelay: time.Minute}
	l, pol, first := openWithTwoObjects(t, f, tier)
	store.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpDelete {
			return memstore.Fault{Err: errors.New("store refuses")}
		}
		return memstore.Fault{}
	})
	pol.Delete, pol.RetentionBytes = true, l.Describe().Tiered[1].DataBytes
	l.SetPolicy(pol)
	if cut, err := retention.Enforce(partlog.Ctx(t), l); err != nil || cut.Pieces != 1 {
		t.Fatalf("retention: %+v, %v", cut, err)
	}
	stored, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), f.Store, "orders", 3)
	if err != nil || len(stored.Garbage) != 1 || stored.Garbage[0].ObjectKey != first.ObjectKey || len(stored.Tiered) != 1 {
		t.Fatalf("stored: garbage %v, %d objects, %v", stored.GetGarbage(), len(stored.GetTiered()), err)
	}
	if err := l.Close(partlog.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	cfg2 := f.Config(2)
	cfg2.Tier, cfg2.Policy = tier, pol
	l2 := f.Open(cfg2)
	if g := l2.Describe().Garbage; len(g) != 1 {
		t.Fatalf("garbage after the takeover: %v", g)
	}
	store.SetHook(nil)
	// Not before DeleteDelay: a read that chose the object may still be
	// reading it.
	if err := tierpass.Run(partlog.Ctx(t), l2, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Stat(partlog.Ctx(t), first.ObjectKey); err != nil || len(l2.Describe().Garbage) != 1 {
		t.Fatalf("before DeleteDelay: the object %v, garbage %v", err, l2.Describe().Garbage)
	}
	f.Clock.Advance(tier.DeleteDelay)
	if err := tierpass.Run(partlog.Ctx(t), l2, false); err != nil {
		t.Fatal(err)
	}
	if g := l2.Describe().Garbage; len(g) != 0 {
		t.Fatalf("garbage after a working store: %v", g)
	}
	if _, err := store.Stat(partlog.Ctx(t), first.ObjectKey); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the unlinked object: %v", err)
	}
}

// TestTierStaleOwnerDoesNotSweepLiveObjects: a stale owner's orphan sweep
// must not take the new owner's committed objects for orphans: it checks
// the list in metad is still the version it wrote, and skips otherwise.
func TestTierStaleOwnerDoesNotSweepLiveObjects(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	tier := &partlog.Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "p/", SegmentBytes: 1,
		OrphanGrace: time.Nanosecond}
	pol := partlog.Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1, RemoteStorage: true, LocalRetentionMs: -1}
	cfg := f.Config(1)
	cfg.SegmentAge, cfg.Tier, cfg.Policy = time.Minute, tier, pol
	zombie := f.Open(cfg)
	partlog.AppendN(t, zombie, 2)
	partlog.RollByAge(t, f, zombie)

	cfg2 := f.Config(2)
	cfg2.Tier, cfg2.Policy = tier, pol
	owner := f.Open(cfg2)
	if err := tierpass.Run(partlog.Ctx(t), owner, false); err != nil {
		t.Fatal(err)
	}
	live := owner.Describe().Tiered
	if len(live) == 0 {
		t.Fatal("the owner did not tier")
	}
	if err := tierpass.SweepOrphans(partlog.Ctx(t), zombie); err == nil {
		t.Fatal("the stale owner's sweep ran")
	}
	for _, s := range live {
		if _, err := store.Stat(partlog.Ctx(t), s.ObjectKey); err != nil {
			t.Fatalf("the owner's object %s after the zombie's sweep: %v", s.ObjectKey, err)
		}
	}
}

// tieredCompactionLog opens the partition with a compacted policy and a
// tier over store whose checks run only when a test calls them: one
// object per ledger, local copies dropped once tiered.
func tieredCompactionLog(t *testing.T, f *partlog.Fixture, epoch int64, store *memstore.Store, remote bool) *partlog.Log {
	t.Helper()
	cfg := f.Config(epoch)
	cfg.SegmentAge = time.Minute
	cfg.Tier = &partlog.Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "c/t/topic-id/3/", TopicID: "topic-id",
		SegmentBytes: 1, MaxDelay: time.Hour, OrphanGrace: time.Hour, Key: tierKey}
	cfg.Policy = tieredCompactPolicy()
	cfg.Policy.RemoteStorage = remote
	return f.Open(cfg)
}

// tieredCompactPolicy is compactPolicy with tiering and no local copies.
func tieredCompactPolicy() partlog.Policy {
	p := compactPolicy
	p.RemoteStorage, p.LocalRetentionMs = true, 0
	return p
}

// storedKeys lists the object keys under the partition's prefix.
func storedKeys(t *testing.T, store objstore.Store) []string {
	t.Helper()
	var keys []string
	if err := store.List(partlog.Ctx(t), "c/t/topic-id/3/", "", func(o objstore.ObjectInfo) bool { keys = append(keys, o.Key); return true }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// tieredKeys lists the object keys pl names.
func tieredKeys(pl *brokerpb.PartitionLog) []string {
	var keys []string
	for _, s := range pl.GetTiered() {
		keys = append(keys, s.ObjectKey)
	}
	slices.Sort(keys)
	return keys
}

// objectFooter reads a committed object's footer.
func objectFooter(t *testing.T, store objstore.Store, s *brokerpb.TieredSegment) *tieringpb.SegmentFooter {
	t.Helper()
	tail, err := segfile.ReadTail(partlog.Ctx(t), tierpass.ObjectRange{Store: store, Key: s.ObjectKey}, s.IndexPos, s.SizeBytes, segfileReader{}.auth(s))
	if err != nil {
		t.Fatalf("object %s: %v", s.ObjectKey, err)
	}
	return tail.Footer
}

// TestTierCompactedLedgers: ledgers compaction rewrote (holes between
// batches, and ledgers whose last batch was removed, so that they end in
// a hole) upload as compacted objects covering exactly their ledgers'
// ranges; ledgers after cleaned_offset upload as plain (dense-checked)
// objects; every offset reads back as before from the objects alone.
// Before, such a run failed segfile's dense check and never tiered.
func TestTierCompactedLedgers(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	l := tieredCompactionLog(t, f, 1, store, false)
	var m keyedModel
	// Each ledger's last batch is superseded by the next ledger: after
	// the pass, ledgers 1 and 2 end in a hole.
	m.appendKeyed(t, f, l, -1, 0, "a", "1")
	m.appendKeyed(t, f, l, -1, 0, "b", "1")
	partlog.RollByAge(t, f, l)
	m.appendKeyed(t, f, l, -1, 0, "c", "1")
	m.appendKeyed(t, f, l, -1, 0, "b", "2")
	partlog.RollByAge(t, f, l)
	m.appendKeyed(t, f, l, -1, 0, "d", "")
	m.appendKeyed(t, f, l, 5, 0, "b", "3")
	partlog.RollByAge(t, f, l)
	l.SetLimits(partlog.Limits{SegmentBytes: 1}) // one output ledger per input
	res := compactNow(t, l, 1<<20)
	l.SetLimits(partlog.Limits{SegmentBytes: partlog.DefaultSegmentBytes})
	if !res.Ran || res.CleanedOffset != 6 || res.OutputLedgers != 3 {
		t.Fatalf("ledger pass %+v", res)
	}
	m.appendKeyed(t, f, l, -1, 0, "e", "1", "b", "4") // after cleaned_offset: dense
	partlog.RollByAge(t, f, l)
	want := partlog.DescribeAll(partlog.FetchAll(t, l, 0))
	if strings.Join(want, " ") != strings.Join(m.want(res.CleanedOffset, true), " ") {
		t.Fatalf("after the ledger pass: %v", want)
	}
	ledgers := l.Describe().Segments

	l.SetPolicy(tieredCompactPolicy())
	if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
		t.Fatal(err)
	}
	d := l.Describe()
	if len(d.Tiered) != 4 || len(d.Segments) != 0 {
		t.Fatalf("after tiering: %d objects, %d ledgers; want 4 and none (nothing open: P8)", len(d.Tiered), len(d.Segments))
	}
	for i, s := range d.Tiered {
		if s.BaseOffset != ledgers[i].FirstOffset || s.LastOffset != ledgers[i].LastOffset {
			t.Fatalf("object %d covers %d-%d, its ledger %d-%d", i, s.BaseOffset, s.LastOffset, ledgers[i].FirstOffset, ledgers[i].LastOffset)
		}
		if compacted := objectFooter(t, store, s).GetCompacted(); compacted != (s.BaseOffset < res.CleanedOffset) {
			t.Fatalf("object %d (%d-%d): compacted %t with cleaned offset %d", i, s.BaseOffset, s.LastOffset, compacted, res.CleanedOffset)
		}
	}
	if d.Tiered[0].Records != 1 || d.Tiered[1].Records != 1 {
		t.Fatalf("objects of the ledgers ending in a hole hold %d and %d records, want 1 each (and an empty end batch)",
			d.Tiered[0].Records, d.Tiered[1].Records)
	}
	got := consumeAll(t, l, 0)
	if strings.Join(partlog.DescribeAll(got), " ") != strings.Join(want, " ") {
		t.Fatalf("read back from the objects:\n got %v\nwant %v", partlog.DescribeAll(got), want)
	}
	checkFetchEveryOffset(t, l, got)
}

// consumeAll reads every record from offset to the high watermark as a
// Kafka consumer does (client/fetcher.go): the next fetch starts after
// the last batch returned, empty or not. A compacted object may end with
// an empty batch (compact.EndBatch), which a fetch returns alone.
func consumeAll(t testing.TB, l *partlog.Log, from int64) []recordbatch.Record {
	t.Helper()
	var out []recordbatch.Record
	for off := from; off < l.HighWatermark(); {
		res, err := l.Fetch(partlog.Ctx(t), off, 1000, 0)
		if err != nil {
			t.Fatalf("Fetch(%d): %v", off, err)
		}
		batches, err := recordbatch.Split(res.Records())
		if err != nil || len(batches) == 0 {
			t.Fatalf("Fetch(%d): %d batches, %v", off, len(batches), err)
		}
		for _, r := range partlog.DecodeAll(t, res.Records()) {
			if r.Offset >= off {
				out = append(out, r)
			}
		}
		h, _ := recordbatch.ParseHeader(batches[len(batches)-1])
		if h.LastOffset() < off {
			t.Fatalf("Fetch(%d) ended at %d", off, h.LastOffset())
		}
		off = h.LastOffset() + 1
	}
	return out
}

// TestTierUploadRacingCompaction: compaction swaps a run's ledgers for
// rewritten ones while the run is being uploaded (between the upload and
// its commit). The object of the old ledgers must not be committed: it
// would bring the removed records back below cleaned_offset, where no
// later pass looks for duplicates. The next check uploads the compacted
// ledgers instead.
func TestTierUploadRacingCompaction(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	l := tieredCompactionLog(t, f, 1, store, true)
	l.Config().Tier.SegmentBytes = 1 << 20 // one object for the whole run
	l.Config().Tier.MaxDelay = time.Millisecond
	var m keyedModel
	for i := range 3 {
		m.appendKeyed(t, f, l, -1, 0, "a", fmt.Sprint(i), "b", fmt.Sprint(i))
		partlog.RollByAge(t, f, l)
	}
	var fired atomic.Bool
	store.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpGetRange && fired.CompareAndSwap(false, true) { // the read-back of the first upload
			if res, err := compaction.Compact(partlog.Ctx(t), l, compaction.Options{Map: compact.NewOffsetMap(1 << 20)}); err != nil || !res.Ran {
				t.Errorf("compaction during the upload: %+v, %v", res, err)
			}
		}
		return memstore.Fault{}
	})
	err := tierpass.Run(partlog.Ctx(t), l, false)
	store.SetHook(nil)
	if err == nil || len(l.Describe().Tiered) != 0 || len(storedKeys(t, store)) != 0 {
		t.Fatalf("the upload of replaced ledgers: %v; %d objects listed, %d stored", err, len(l.Describe().Tiered), len(storedKeys(t, store)))
	}
	if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
		t.Fatal(err)
	}
	d := l.Describe()
	if len(d.Tiered) != 1 || !objectFooter(t, store, d.Tiered[0]).GetCompacted() {
		t.Fatalf("after the next check: %d objects", len(d.Tiered))
	}
	if got, want := partlog.DescribeAll(consumeAll(t, l, 0)), m.want(d.CleanedOffset, true); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("read back:\n got %v\nwant %v", got, want)
	}
}

// T4: an upload whose commit CAS lands but whose answer is lost (unknown
// outcome) keeps its object: the list may name it, and a later owner
// deletes the bookie copies on the strength of it. The object used to be
// deleted on any commit error, and the data was then gone for good.
func TestUploadOfUnknownOutcomeKeepsTheObject(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	tier := &partlog.Tier{Store: store, Reader: segfileReader{store}, KeyPrefix: "p/", SegmentBytes: 1, OrphanGrace: time.Hour}
	pol := partlog.Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1, RemoteStorage: true, LocalRetentionMs: -1}
	cfg := f.Config(1)
	cfg.SegmentAge, cfg.Tier, cfg.Policy = time.Minute, tier, pol
	l := f.Open(cfg)
	partlog.AppendN(t, l, 2)
	partlog.RollByAge(t, f, l)
	var armed atomic.Bool
	armed.Store(true)
	f.Store.SetAfterPut(func(key string) error {
		if strings.HasPrefix(key, partlog.PartitionPrefix) && armed.CompareAndSwap(true, false) {
			return metaclient.ErrUnknownOutcome // stored, the answer lost
		}
		return nil
	})
	if err := tierpass.Run(partlog.Ctx(t), l, false); err == nil {
		t.Fatal("the upload's commit of unknown outcome was reported done")
	}
	f.Store.SetAfterPut(nil)
	pl, _, err := partlog.ReadPartitionLog(partlog.Ctx(t), f.Store, "orders", 3)
	if err != nil || len(pl.Tiered) != 1 {
		t.Fatalf("the commit did not land: %v, %v", pl.GetTiered(), err)
	}
	if _, err := store.Stat(partlog.Ctx(t), pl.Tiered[0].ObjectKey); err != nil {
		t.Fatalf("metad names %s, the store: %v", pl.Tiered[0].ObjectKey, err)
	}
	// A new owner with local.retention.ms=0 deletes the bookie copies and
	// reads from the object.
	cfg2 := f.Config(2)
	pol.LocalRetentionMs = 0
	cfg2.Tier, cfg2.Policy = tier, pol
	l2 := f.Open(cfg2)
	if err := tierpass.Run(partlog.Ctx(t), l2, false); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Fetch(partlog.Ctx(t), 0, 1000, 0); err != nil {
		t.Fatalf("fetch at 0 (log start %d, high watermark %d): %v", l2.LogStartOffset(), l2.HighWatermark(), err)
	}
}

// hookReader runs before once, then reads.
type hookReader struct {
	segfileReader
	before func()
	done   *atomic.Bool
}

func (r hookReader) Fetch(ctx context.Context, t *brokerpb.TieredSegment, offset int64, maxBytes int) ([]byte, error) {
	if r.done.CompareAndSwap(false, true) {
		r.before()
	}
	return r.segfileReader.Fetch(ctx, t, offset, maxBytes)
}

// T10: a fetch that chose an object just before a compaction swap
// unlinked and deleted it (DeleteDelay -1 here: at once) reads again from
// the new list instead of failing while its offset is in range.
func TestTieredFetchRacingACompactionSwap(t *testing.T) {
	f := partlog.NewFixture(t)
	store := memstore.New(memstore.Options{})
	l := tieredCompactionLog(t, f, 1, store, true)
	var m keyedModel
	for i := range 3 {
		m.appendKeyed(t, f, l, -1, 0, "a", fmt.Sprint(i), "b", fmt.Sprint(i))
		partlog.RollByAge(t, f, l)
	}
	if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var swapped bool
	l.Config().Tier.Reader = hookReader{segfileReader{store}, func() {
		swapped = compactNow(t, l, 1<<20).Ran
	}, &done}
	if _, err := l.Fetch(partlog.Ctx(t), 0, 1000, 0); err != nil {
		t.Fatalf("fetch at 0 (log start %d, high watermark %d) racing a swap: %v", l.LogStartOffset(), l.HighWatermark(), err)
	}
	if !swapped {
		t.Fatal("no compaction pass ran during the fetch")
	}
}

// openWithTwoObjects opens a log with no retention on tier, writes two
// closed segments and uploads them as two objects; first is the older.
func openWithTwoObjects(t *testing.T, f *partlog.Fixture, tier *partlog.Tier) (*partlog.Log, partlog.Policy, *brokerpb.TieredSegment) {
	t.Helper()
	pol := partlog.Policy{RetentionMs: -1, RetentionBytes: -1, MaxTimestampAheadMs: -1, RemoteStorage: true, LocalRetentionMs: 0}
	cfg := f.Config(1)
	cfg.SegmentAge, cfg.Tier, cfg.Policy = time.Minute, tier, pol
	l := f.Open(cfg)
	for range 2 {
		partlog.AppendN(t, l, 2)
		partlog.RollByAge(t, f, l)
	}
	if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
		t.Fatal(err)
	}
	return l, pol, l.Describe().Tiered[0]
}
