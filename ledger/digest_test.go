package ledger

import (
	"bytes"
	"errors"
	"testing"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/proto/ledgerpb"
)

var testDigestTypes = []ledgerpb.DigestType{ledgerpb.DigestType_DIGEST_HMAC_SHA256, ledgerpb.DigestType_DIGEST_AES_GMAC}

func testDigester(t testing.TB, id uint64, typ ledgerpb.DigestType) digester {
	key, err := newDigestKey()
	if err != nil {
		t.Fatal(err)
	}
	return newDigester(&ledgerpb.LedgerMetadata{Id: id, DigestKey: key, DigestType: typ})
}

// TestDigestChecks: for each digest type, a sealed entry opens to its
// payload, and a copy that is damaged, truncated, of another entry, or
// of the same entry id of another ledger does not (D1). A ledger whose
// digest type is unknown (a newer version's) opens nothing.
func TestDigestChecks(t *testing.T) {
	for _, typ := range testDigestTypes {
		t.Run(typ.String(), func(t *testing.T) {
			d, other := testDigester(t, 7, typ), testDigester(t, 8, typ)
			payload := bytes.Repeat([]byte("payload "), 1000)
			stored, err := d.seal(3, payload)
			if err != nil {
				t.Fatal(err)
			}
			if len(stored) != len(payload)+DigestSize || !bytes.Equal(stored[:len(payload)], payload) {
				t.Fatalf("sealed %d bytes, want the payload and a %d-byte tag", len(stored), DigestSize)
			}
			if got, err := d.open(3, stored); err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("open: %v", err)
			}
			damaged := bytes.Clone(stored)
			damaged[100] ^= 1
			fromOther, err := other.seal(3, payload)
			if err != nil {
				t.Fatal(err)
			}
			for name, c := range map[string]struct {
				id     int64
				stored []byte
			}{
				"damaged":      {3, damaged},
				"truncated":    {3, stored[:DigestSize-1]},
				"tag only":     {3, stored[len(stored)-DigestSize:]},
				"other entry":  {4, stored},
				"other ledger": {3, fromOther},
			} {
				if _, err := d.open(c.id, c.stored); !errors.Is(err, ErrDigestMismatch) || !corruption.Is(err) {
					t.Errorf("%s: open = %v, want a mismatch, marked as corruption", name, err)
				}
			}
		})
	}
	unknown := testDigester(t, 9, ledgerpb.DigestType(99))
	if _, err := unknown.open(0, make([]byte, 64)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("unknown digest type: open = %v", err)
	}
	if _, err := unknown.seal(0, []byte("x")); err == nil {
		t.Fatal("unknown digest type: seal succeeded")
	}
}

// BenchmarkDigest is the cost digests add per entry: the writer's tag
// (sent apart from the payload, not joined to it) and a reader's check,
// for each digest type.
func BenchmarkDigest(b *testing.B) {
	payload := make([]byte, 256<<10)
	for _, typ := range testDigestTypes {
		d := testDigester(b, 7, typ)
		b.Run(typ.String()+"/tag-256KiB", func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			for i := range b.N {
				if _, err := d.appendTag(nil, int64(i), payload); err != nil {
					b.Fatal(err)
				}
			}
		})
		stored, err := d.seal(3, payload)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(typ.String()+"/open-256KiB", func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			for range b.N {
				if _, err := d.open(3, stored); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
