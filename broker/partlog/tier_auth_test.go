package partlog_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/compaction"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/compact"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/segfile"
)

// A tier with a key uploads authenticated objects and records so (T11):
// they read with the key under their own names, and not without it; a
// tier without a key writes objects without a MAC, recorded as such.
func TestTierWritesAuthenticatedObjects(t *testing.T) {
	for _, key := range []*segfile.Key{tierKey, nil} {
		f := partlog.NewFixture(t)
		store := memstore.New(memstore.Options{})
		cfg := tierUploadConfig(f, store, key)
		l := f.Open(cfg)
		partlog.AppendN(t, l, 3)
		partlog.RollByAge(t, f, l)
		partlog.AppendN(t, l, 1)
		if err := tierpass.Run(partlog.Ctx(t), l, false); err != nil {
			t.Fatal(err)
		}
		pl := l.Describe()
		if len(pl.Tiered) != 1 {
			t.Fatalf("%d objects, want 1", len(pl.Tiered))
		}
		s := pl.Tiered[0]
		if s.Authenticated != (key != nil) {
			t.Fatalf("tier key %v: object recorded authenticated=%t", key, s.Authenticated)
		}
		rr := tierpass.ObjectRange{Store: store, Key: s.ObjectKey}
		if _, err := segfile.Verify(partlog.Ctx(t), rr, s.SizeBytes, cfg.Tier.Auth(s)); err != nil {
			t.Fatalf("tier key %v: %v", key, err)
		}
		if key == nil {
			continue
		}
		if _, err := segfile.Verify(partlog.Ctx(t), rr, s.SizeBytes, segfile.Auth{Name: s.ObjectKey}); !errors.Is(err, segfile.ErrNoKey) {
			t.Fatalf("without the key: %v, want ErrNoKey", err)
		}
		if _, err := segfile.Verify(partlog.Ctx(t), rr, s.SizeBytes, segfile.Auth{Key: key, Name: s.ObjectKey + "x"}); !errors.Is(err, segfile.ErrMACMismatch) {
			t.Fatalf("under another name: %v, want ErrMACMismatch", err)
		}
	}
}

// The attack: a batch of a tiered object rewritten in the bucket with a
// valid CRC, on a compacted topic. The pass fails as corrupt and swaps
// nothing in: it does not copy the forged records into a new object that
// it would authenticate with the cluster's key.
func TestCompactRefusesForgedObject(t *testing.T) {
	k := newTieredKeyedLog(t, 11, 4)
	store, l := k.store, k.l
	before := l.Describe()
	if len(before.Tiered) != 4 || !before.Tiered[1].Authenticated {
		t.Fatalf("want 4 authenticated objects: %v", before.Tiered)
	}
	forgeObject(t, store, before.Tiered[1].ObjectKey)
	res, err := compaction.Compact(partlog.Ctx(t), l, compaction.Options{Map: compact.NewOffsetMap(1 << 20)})
	if !errors.Is(err, segfile.ErrMACMismatch) || !corruption.Is(err) || res.Ran {
		t.Fatalf("a pass over a forged object: %+v, %v; want ErrMACMismatch", res, err)
	}
	if after := l.Describe(); !proto.Equal(after, before) {
		t.Fatal("a failed pass changed the list")
	}
}

// forgeObject rewrites, in place in the store, the last byte of the
// first batch of the object under key and makes its batch CRC right.
func forgeObject(t *testing.T, store *memstore.Store, key string) {
	t.Helper()
	ctx := partlog.Ctx(t)
	rc, err := store.GetRange(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	b := obj[segfile.HeaderSize:]
	h, err := recordbatch.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	b[h.Size()-1] ^= 0x08
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:h.Size()], crc32.MakeTable(crc32.Castagnoli)))
	if _, err := store.Delete(ctx, []string{key}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, key, bytes.NewReader(obj), int64(len(obj)), nil); err != nil {
		t.Fatal(err)
	}
}
