package bookie

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// fakeMeta serves ledger metadata to digestKeys: a ledger it holds, an
// error it was told, or ledger.ErrNoSuchLedger (with unkeyed, the
// metadata of a ledger without a digest key). While gate is set, Get
// waits for it (or for ctx).
type fakeMeta struct {
	mu      sync.Mutex
	ledgers map[uint64]*ledgerpb.LedgerMetadata
	unkeyed bool
	err     error
	gate    chan struct{}
	gets    map[uint64]int
	inside  int // Gets in progress
	maxIn   int // most Gets in progress at once
}

func newFakeMeta(mds ...*ledgerpb.LedgerMetadata) *fakeMeta {
	f := &fakeMeta{ledgers: map[uint64]*ledgerpb.LedgerMetadata{}, gets: map[uint64]int{}}
	for _, md := range mds {
		f.ledgers[md.Id] = md
	}
	return f
}

func (f *fakeMeta) Get(ctx context.Context, id uint64) (*ledgerpb.LedgerMetadata, int64, error) {
	f.mu.Lock()
	f.gets[id]++
	f.inside++
	f.maxIn = max(f.maxIn, f.inside)
	gate, err, md := f.gate, f.err, f.ledgers[id]
	if md == nil && f.unkeyed {
		md = &ledgerpb.LedgerMetadata{Id: id}
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inside--
		f.mu.Unlock()
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	switch {
	case err != nil:
		return nil, 0, err
	case md == nil:
		return nil, 0, fmt.Errorf("%w: %d", ledger.ErrNoSuchLedger, id)
	}
	return md, 1, nil
}

func (f *fakeMeta) calls(id uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets[id]
}

// keyedLedger is the metadata of a ledger with a digest key.
func keyedLedger(id uint64, digest ledgerpb.DigestType) *ledgerpb.LedgerMetadata {
	return &ledgerpb.LedgerMetadata{Id: id, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, DigestType: digest,
		DigestKey: bytes.Repeat([]byte{byte(id)}, 32)}
}

func seal(t testing.TB, md *ledgerpb.LedgerMetadata, entry int64, payload string) []byte {
	t.Helper()
	b, err := ledger.SealEntry(md, entry, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func counterOf(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func newTestKeys(t testing.TB, meta metadataGetter) *digestKeys {
	t.Helper()
	k, err := newDigestKeys(meta, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.close)
	return k
}

// waitIdle waits until k has no read in flight.
func waitIdle(t testing.TB, k *digestKeys) {
	t.Helper()
	testwait.Until(t, 5*time.Second, "no key read in flight", func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.mu.reading == 0
	})
}

// waitKey waits until k vouches for entry of md (its key was read).
func waitKey(t testing.TB, k *digestKeys, md *ledgerpb.LedgerMetadata, entry []byte) {
	t.Helper()
	testwait.Until(t, 5*time.Second, "the ledger's key read", func() bool { return k.verify(md.Id, 0, entry) })
}

// TestDigestKeysVouch: an entry is vouched for only with the tag its
// ledger's key gives it, once the key was read from metad; until then,
// for a ledger metad does not know, and for any other bytes (forged,
// another entry's or another ledger's tag) it is not, and a mismatch is
// counted. A ledger without a key takes any bytes, as its readers do.
func TestDigestKeysVouch(t *testing.T) {
	for _, digest := range []ledgerpb.DigestType{ledgerpb.DigestType_DIGEST_AES_GMAC, ledgerpb.DigestType_DIGEST_HMAC_SHA256} {
		t.Run(digest.String(), func(t *testing.T) {
			md, other := keyedLedger(7, digest), keyedLedger(8, digest)
			meta := newFakeMeta(md, other, &ledgerpb.LedgerMetadata{Id: 9, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
			meta.gate = make(chan struct{})
			k := newTestKeys(t, meta)
			entry0 := seal(t, md, 0, "zero")
			if k.verify(7, 0, entry0) {
				t.Fatal("vouched for an entry before the key was read")
			}
			close(meta.gate)
			waitKey(t, k, md, entry0)
			for _, tc := range []struct {
				name  string
				entry uint64
				bytes []byte
			}{
				{"forged", 1, []byte("forged entry one with sixteen+ bytes")},
				{"another entry's tag", 1, entry0},
				{"another ledger's tag", 0, seal(t, other, 0, "zero")},
				{"too short for a tag", 1, []byte("x")},
			} {
				if k.verify(7, tc.entry, tc.bytes) {
					t.Errorf("%s: vouched for", tc.name)
				}
			}
			if got := counterOf(t, k.mismatches); got != 4 {
				t.Errorf("strata_bookie_add_digest_mismatches_total = %v, want 4", got)
			}
			if !k.verify(7, 5, seal(t, md, 5, "five")) {
				t.Error("a sealed entry was not vouched for")
			}
			testwait.Until(t, 5*time.Second, "the unkeyed ledger's metadata read", func() bool {
				return k.verify(9, 3, []byte("anything"))
			})
			for range 100 {
				if k.verify(1234, 0, entry0) {
					t.Fatal("vouched for an entry of a ledger metad does not know")
				}
				waitIdle(t, k)
			}
			if n := meta.calls(1234); n != 1 {
				t.Errorf("metad asked %d times about a ledger it does not know, want once", n)
			}
			if n := meta.calls(7); n != 1 {
				t.Errorf("metad asked %d times about a known ledger, want once", n)
			}
		})
	}
}

// TestDigestKeysMetadUnavailable: a key that could not be read is asked
// for again only keyRetryAfter later, and then vouches as usual.
func TestDigestKeysMetadUnavailable(t *testing.T) {
	md := keyedLedger(7, ledgerpb.DigestType_DIGEST_AES_GMAC)
	meta := newFakeMeta(md)
	meta.err = errors.New("metad: unavailable")
	k := newTestKeys(t, meta)
	now := time.Unix(1000, 0)
	var clock sync.Mutex
	k.now = func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		return now
	}
	entry := seal(t, md, 0, "zero")
	k.verify(7, 0, entry)
	waitIdle(t, k)
	for range 10 {
		if k.verify(7, 0, entry) {
			t.Fatal("vouched for without the key")
		}
	}
	if n := meta.calls(7); n != 1 {
		t.Fatalf("metad asked %d times within keyRetryAfter, want once", n)
	}
	meta.mu.Lock()
	meta.err = nil
	meta.mu.Unlock()
	clock.Lock()
	now = now.Add(keyRetryAfter)
	clock.Unlock()
	waitKey(t, k, md, entry)
	if n := meta.calls(7); n != 2 {
		t.Fatalf("metad asked %d times, want twice", n)
	}
}

// TestDigestKeysBounded: adds for many ledgers at once cost metad at most
// maxKeyReads reads in flight, the ledgers remembered stay within
// maxKeyedLedgers, and close stops the reads in flight and waits for them.
func TestDigestKeysBounded(t *testing.T) {
	meta := newFakeMeta()
	meta.gate = make(chan struct{}) // never opened: reads end when close cancels them
	k := newTestKeys(t, meta)
	inside := func() int {
		meta.mu.Lock()
		defer meta.mu.Unlock()
		return meta.inside
	}
	for id := range uint64(100) {
		k.verify(id, 0, []byte("x"))
	}
	testwait.Until(t, 5*time.Second, "the reads started", func() bool { return inside() == maxKeyReads })
	for id := range uint64(100) {
		k.verify(1000+id, 0, []byte("x"))
	}
	meta.mu.Lock()
	maxIn := meta.maxIn
	meta.mu.Unlock()
	if maxIn != maxKeyReads {
		t.Fatalf("%d reads in flight at most, want the bound %d", maxIn, maxKeyReads)
	}
	k.close()
	k.mu.Lock()
	reading := k.mu.reading
	k.mu.Unlock()
	if reading != 0 {
		t.Fatalf("%d reads still in flight after close", reading)
	}
	if k.verify(500, 0, []byte("x")) || meta.calls(500) != 0 {
		t.Fatal("a read started after close")
	}

	k2 := newTestKeys(t, newFakeMeta())
	k2.maxLedgers = 10
	for id := range uint64(50) {
		k2.verify(id, 0, []byte("x"))
		waitIdle(t, k2)
	}
	k2.mu.Lock()
	n := len(k2.mu.ledgers)
	k2.mu.Unlock()
	if n > k2.maxLedgers {
		t.Fatalf("%d ledgers remembered, bound %d", n, k2.maxLedgers)
	}
}

// TestForgedAddKeepsNoLAC: a bookie checking digests (digestKeys as
// storage.Options.Verify) keeps the writer's LACs, and none that forged
// adds carry: one add of entry N with LAC N, two adds N and N+1, or an
// explicit LAC after them, leave the LAC at the writer's (H2). A re-add
// of the writer's own last entry may not name that entry either (H1).
func TestForgedAddKeepsNoLAC(t *testing.T) {
	ctx := context.Background()
	md := keyedLedger(7, ledgerpb.DigestType_DIGEST_AES_GMAC)
	k := newTestKeys(t, newFakeMeta(md))
	st := memStorageVerified(t, k.verify)
	add := func(entry uint64, lac int64, payload []byte) {
		t.Helper()
		done := make(chan error, 1)
		if err := st.Add(ctx, 7, entry, lac, payload, false, func(err error) { done <- err }); err != nil || <-done != nil {
			t.Fatalf("add %d: %v", entry, err)
		}
	}
	lac := func() int64 {
		s, _ := st.State(7)
		return s.LAC
	}
	waitKey(t, k, md, seal(t, md, 0, "entry-0"))
	for e := range int64(10) {
		add(uint64(e), e-1, seal(t, md, e, fmt.Sprint("entry-", e)))
	}
	if err := st.WriteLAC(ctx, 7, 9); err != nil || lac() != 9 {
		t.Fatalf("the writer's explicit LAC 9: LAC %d, %v", lac(), err)
	}
	forged := []byte("forged, with no tag of the ledger's key")
	add(1000, 1000, forged)
	add(1001, 1000, forged)
	if err := st.WriteLAC(ctx, 7, 1001); err != nil {
		t.Fatal(err)
	}
	add(9, 1_000_000, seal(t, md, 9, "entry-9"))
	if got := lac(); got != 9 {
		t.Fatalf("LAC %d after the forged adds, want the writer's 9", got)
	}
	if got := counterOf(t, k.mismatches); got != 3 { // two adds, and entry 1001 read back for the explicit LAC
		t.Fatalf("strata_bookie_add_digest_mismatches_total = %v, want 3", got)
	}
	add(10, 9, seal(t, md, 10, "entry-10"))
	add(11, 10, seal(t, md, 11, "entry-11"))
	if got := lac(); got != 10 {
		t.Fatalf("the writer's next adds: LAC %d, want 10", got)
	}
}
