package index

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to every value decoder: they must never
// panic, and whatever they accept must encode back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(encodeState(LedgerState{Fenced: true, LAC: 3, LastEntryID: 4}))
	f.Add(encodeState(LedgerState{Fenced: true, LAC: -1, LastEntryID: -1, Tombstone: true, DeletedUnixMs: 1}))
	f.Add(encodeLocation(loc(1, 24, 100)))
	f.Add(encodeUsage(Usage{Bytes: 10, Entries: 1}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if st, err := decodeState(b); err == nil && !bytes.Equal(encodeState(st), b) {
			t.Fatalf("state %x round-trips to %x", b, encodeState(st))
		}
		if l, err := decodeLocation(b); err == nil && !bytes.Equal(encodeLocation(l), b) {
			t.Fatalf("location %x round-trips differently", b)
		}
		if u, err := decodeUsage(b); err == nil && !bytes.Equal(encodeUsage(u), b) {
			t.Fatalf("usage %x round-trips differently", b)
		}
		if p, err := decodePosition(b); err == nil && !bytes.Equal(encodePosition(p), b) {
			t.Fatalf("position %x round-trips differently", b)
		}
		if l, err := decodeLimbo(b); err == nil && !bytes.Equal(encodeLimbo(l), b) {
			t.Fatalf("limbo %x round-trips differently", b)
		}
		if ledgerID, entryID, ok := decodeEntryKey(b); ok && !bytes.Equal(entryKey(ledgerID, entryID), b) {
			t.Fatalf("entry key %x round-trips differently", b)
		}
	})
}
