package compaction

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/brokerpb"
)

func tieredKeys(pl *brokerpb.PartitionLog) []string {
	var keys []string
	for _, t := range pl.Tiered {
		keys = append(keys, t.ObjectKey)
	}
	return keys
}

// TestSwapCompacted: the swap's edit (pure, P12) swaps objects and ledgers
// and queues the replaced objects, accepts objects tiered after its
// inputs, and refuses (ErrStale, pl untouched) inputs that
// retention removed or ledgers that were tiered meanwhile.
func TestSwapCompacted(t *testing.T) {
	obj := func(key string, base, last int64) *brokerpb.TieredSegment {
		return &brokerpb.TieredSegment{ObjectKey: key, BaseOffset: base, LastOffset: last}
	}
	led := func(id uint64, first, last int64, closed bool) *brokerpb.LedgerSegment {
		return &brokerpb.LedgerSegment{LedgerId: id, FirstOffset: first, LastOffset: last, Closed: closed}
	}
	base := func() *brokerpb.PartitionLog {
		return &brokerpb.PartitionLog{
			Tiered:   []*brokerpb.TieredSegment{obj("a", 0, 9), obj("b", 10, 19)},
			Segments: []*brokerpb.LedgerSegment{led(3, 20, 29, true), led(4, 30, 29, false)},
		}
	}
	sw := compactionSwap{
		objectInputs: []*brokerpb.TieredSegment{obj("a", 0, 9), obj("b", 10, 19)}, objectOutputs: []*brokerpb.TieredSegment{obj("c", 0, 19)},
		ledgerInputs: []*brokerpb.LedgerSegment{led(3, 20, 29, true)}, ledgerOutputs: []*brokerpb.LedgerSegment{led(5, 20, 29, true)},
		end: 30, nowMs: 7, tombstoneHorizonMs: 500,
	}
	pl := base()
	pl.TombstoneHorizonMs = 100 // the previous pass's: this one dropped that tombstone
	if copies, err := swapCompacted(pl, sw); err != nil || len(copies) != 0 {
		t.Fatal(copies, err)
	}
	if fmt.Sprint(tieredKeys(pl)) != "[c]" || pl.Segments[0].LedgerId != 5 || len(pl.Segments) != 2 || pl.CleanedOffset != 30 ||
		len(pl.Garbage) != 2 || pl.Garbage[0].ObjectKey != "a" || pl.Garbage[1].ObjectKey != "b" || pl.Garbage[0].SinceMs != 7 ||
		pl.TombstoneHorizonMs != 500 {
		t.Fatalf("after the swap: %v", pl)
	}
	// A pass that kept no tombstone clears the horizon (no more passes for it).
	pl = base()
	pl.TombstoneHorizonMs = 100
	noTombstones := sw
	noTombstones.tombstoneHorizonMs = 0
	if _, err := swapCompacted(pl, noTombstones); err != nil || pl.TombstoneHorizonMs != 0 {
		t.Fatalf("swap keeping no tombstone: %v, horizon %d", err, pl.TombstoneHorizonMs)
	}

	objectsOnly := sw
	objectsOnly.ledgerInputs, objectsOnly.ledgerOutputs, objectsOnly.end = nil, nil, 20
	pl = base()
	pl.Tiered = append(pl.Tiered, obj("d", 20, 29)) // tiered meanwhile, after the inputs
	pl.Segments = pl.Segments[1:]
	if _, err := swapCompacted(pl, objectsOnly); err != nil || fmt.Sprint(tieredKeys(pl)) != "[c d]" {
		t.Fatalf("objects tiered after the inputs: %v, %v", err, tieredKeys(pl))
	}

	// Local copies of the replaced objects are unlinked and returned; a
	// copy of an object the pass did not replace stays.
	pl = base()
	pl.Tiered = append(pl.Tiered, obj("d", 20, 29))
	pl.Segments = []*brokerpb.LedgerSegment{led(1, 0, 9, true), led(2, 10, 19, true), led(3, 20, 29, true), led(4, 30, 29, false)}
	copies, err := swapCompacted(pl, objectsOnly)
	if err != nil || len(copies) != 2 || copies[0].LedgerId != 1 || copies[1].LedgerId != 2 ||
		len(pl.Segments) != 2 || pl.Segments[0].LedgerId != 3 || fmt.Sprint(tieredKeys(pl)) != "[c d]" {
		t.Fatalf("with local copies: unlinked %v, %v; list %v", copies, err, pl)
	}

	for name, change := range map[string]func(pl *brokerpb.PartitionLog){
		"retention removed an input object": func(pl *brokerpb.PartitionLog) { pl.Tiered = pl.Tiered[1:] },
		"an input ledger was tiered":        func(pl *brokerpb.PartitionLog) { pl.Tiered = append(pl.Tiered, obj("d", 20, 29)) },
		"an input ledger was removed":       func(pl *brokerpb.PartitionLog) { pl.Segments = pl.Segments[1:] },
	} {
		pl := base()
		change(pl)
		want := proto.Clone(pl)
		if _, err := swapCompacted(pl, sw); !errors.Is(err, ErrStale) || !proto.Equal(pl, want) {
			t.Fatalf("%s: %v, list %v", name, err, pl)
		}
	}
}
