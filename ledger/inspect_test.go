package ledger_test

import (
	"errors"
	"hash/crc32"
	"testing"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

func TestCheckEntries(t *testing.T) {
	for _, tt := range []struct {
		name      string
		e, qw, qa int32
	}{
		{"streamed", 3, 3, 2},
		{"striped", 3, 2, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			ctx := testCtx(t)
			md := rtMetadata(tt.e, tt.qw, tt.qa, ledgerpb.LedgerState_CLOSED, 19, frag(0, "a", "b", "c"))
			bk := newRTBookies("a", "b", "c")
			bk.put(md, 0, 19, 19)
			for _, a := range []string{"a", "b", "c"} {
				bk.with(a, func(b *rtBookie) {
					b.corrupt[3] = true      // every copy corrupt
					delete(b.entries, 5)     // no copy
					b.corrupt[12] = a == "b" // one copy corrupt: still OK
				})
			}
			env, _ := rtEnv(md, bk)
			r := rtOpen(t, env, ledger.ReaderOptions{})
			var got []ledger.EntryCheck
			err := ledger.CheckEntries(ctx, r, 1, 19, func(c ledger.EntryCheck) error {
				got = append(got, c)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 19 {
				t.Fatalf("%d checks, want 19", len(got))
			}
			for i, c := range got {
				id := int64(i + 1)
				want := ledger.EntryOK
				switch id {
				case 3:
					want = ledger.EntryCorrupt
				case 5:
					want = ledger.EntryUnreadable
				}
				if c.ID != id || c.Status != want {
					t.Fatalf("check %d: %+v, want entry %d %s", i, c, id, want)
				}
				if corruption.Is(c.Err) != (want == ledger.EntryCorrupt) {
					t.Fatalf("check %d: %s with error %v: marked as corruption %t", i, c.Status, c.Err, corruption.Is(c.Err))
				}
				if want == ledger.EntryOK {
					p := payloadOf(id)
					if c.Size != len(p) || c.CRC32C != crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)) || c.Err != nil {
						t.Fatalf("check %d: %+v", i, c)
					}
				} else if c.Err == nil {
					t.Fatalf("check %d: no error", i)
				}
			}
			stop := errors.New("stop")
			n := 0
			err = ledger.CheckEntries(ctx, r, 0, 19, func(ledger.EntryCheck) error {
				n++
				if n == 4 {
					return stop
				}
				return nil
			})
			if err != stop || n != 4 {
				t.Fatalf("stopped after %d with %v", n, err)
			}
			if err := ledger.CheckEntries(ctx, r, 0, 20, nil); !errors.Is(err, ledger.ErrBeyondLAC) {
				t.Fatalf("beyond the end: %v", err)
			}
		})
	}
}
