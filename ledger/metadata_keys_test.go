package ledger_test

import (
	"errors"
	"math"
	"sort"
	"strconv"
	"testing"

	"github.com/strata-log/strata/ledger"
)

func TestMetadataKey(t *testing.T) {
	for _, tt := range []struct {
		id   uint64
		want string
	}{
		{0, "/strata/ledgers/00000000000000000000"},
		{1, "/strata/ledgers/00000000000000000001"},
		{1234567890, "/strata/ledgers/00000000001234567890"},
		{math.MaxUint64, "/strata/ledgers/18446744073709551615"},
	} {
		key := ledger.MetadataKey(tt.id)
		if key != tt.want {
			t.Errorf("MetadataKey(%d) = %q, want %q", tt.id, key, tt.want)
		}
		id, err := ledger.ParseMetadataKey(key)
		if err != nil || id != tt.id {
			t.Errorf("ParseMetadataKey(%q) = %d, %v", key, id, err)
		}
	}
}

func TestParseMetadataKeyRejects(t *testing.T) {
	for _, key := range []string{
		"", "/strata/ledgers/", "/strata/ledgers/1", "/strata/ledgers/000000000000000000001",
		"/strata/ledgers/0000000000000000000x", "/strata/ledgers/-0000000000000000001",
		"/strata/ledgers/+0000000000000000001", "/strata/ledgers/99999999999999999999",
		"/strata/other/00000000000000000001", ledger.NextIDKey,
	} {
		if id, err := ledger.ParseMetadataKey(key); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("ParseMetadataKey(%q) = %d, %v; want ErrInvalid", key, id, err)
		}
	}
}

// Key order is id order, so a prefix listing comes out in id order.
func TestMetadataKeyOrder(t *testing.T) {
	ids := []uint64{9, 10, 100, 1, 99, 1 << 40, math.MaxUint64, 0}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = ledger.MetadataKey(id)
	}
	sort.Strings(keys)
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for i, key := range keys {
		if id, _ := ledger.ParseMetadataKey(key); id != ids[i] {
			t.Fatalf("key order %v differs from id order %v", keys, ids)
		}
	}
	// The counter key is outside the metadata prefix.
	if len(ledger.NextIDKey) >= len(ledger.MetadataPrefix) && ledger.NextIDKey[:len(ledger.MetadataPrefix)] == ledger.MetadataPrefix {
		t.Fatalf("%s lies under %s", ledger.NextIDKey, ledger.MetadataPrefix)
	}
}

func FuzzParseMetadataKey(f *testing.F) {
	f.Add("/strata/ledgers/00000000000000000001")
	f.Add("/strata/ledgers/x")
	f.Fuzz(func(t *testing.T, key string) {
		id, err := ledger.ParseMetadataKey(key)
		if err != nil {
			return
		}
		if ledger.MetadataKey(id) != key {
			t.Fatalf("%q parses to %d, which encodes as %q", key, id, ledger.MetadataKey(id))
		}
		if _, err := strconv.ParseUint(key[len(ledger.MetadataPrefix):], 10, 64); err != nil {
			t.Fatal(err)
		}
	})
}
