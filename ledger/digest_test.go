package ledger

import (
	"testing"

	"github.com/strata-log/strata/proto/ledgerpb"
)

// BenchmarkDigest is the cost digests add per entry: the writer's seal
// (tag plus one copy) and a reader's check.
func BenchmarkDigest(b *testing.B) {
	key, err := newDigestKey()
	if err != nil {
		b.Fatal(err)
	}
	d := newDigester(&ledgerpb.LedgerMetadata{Id: 7, DigestKey: key})
	payload := make([]byte, 16<<10)
	b.Run("seal-16KiB", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for i := range b.N {
			d.seal(int64(i), payload)
		}
	})
	stored := d.seal(3, payload)
	b.Run("open-16KiB", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for range b.N {
			if _, err := d.open(3, stored); err != nil {
				b.Fatal(err)
			}
		}
	})
}
