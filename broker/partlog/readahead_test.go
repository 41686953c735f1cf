package partlog

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/internal/bytebudget"
)

// A read from the bookies reads ahead only when the fetch budget has room
// for it while the read is in flight, gives that room back after, and
// keeps what it read ahead for the next fetches, which the bookies then
// do not see.
func TestReadAheadTakesOnlyWhatTheBudgetHas(t *testing.T) {
	budget := bytebudget.New(4 << 20)
	l, cfg, sizes := bookieReads(t, NewReadAhead(4<<20, budget))
	fetchBatch := func(off int64) {
		t.Helper()
		if res, err := l.Fetch(Ctx(t), off, 1, 0); err != nil || len(res.Batches) != 1 {
			t.Fatalf("fetch at %d: %d batches, %v", off, len(res.Batches), err)
		}
	}
	read := func() int { return int(counterValue(t, cfg.Metrics.BookieReadBytes)) }

	// The budget full: the read gets the one batch asked for.
	if !budget.TryAcquire(4 << 20) {
		t.Fatal("filling the budget")
	}
	fetchBatch(0)
	if got, kept := read(), cfg.ReadAhead.Bytes(); got != sizes[0] || kept != 0 {
		t.Fatalf("with the budget full: read %d bytes, kept %d ahead; want %d and none", got, kept, sizes[0])
	}
	budget.Release(4 << 20)

	// Room: the read takes the rest of the segment ahead, then gives the
	// room back; the next fetches are served from what it kept (the
	// entries that end past the byte asked for: all).
	fetchBatch(3)
	rest := 0
	for _, s := range sizes[1:] {
		rest += s
	}
	if got, kept := read(), cfg.ReadAhead.Bytes(); got != sizes[0]+rest || kept != int64(rest) {
		t.Fatalf("with room: read %d bytes, kept %d ahead; want %d and %d", got, kept, sizes[0]+rest, rest)
	}
	if used := budget.Used(); used != 0 {
		t.Fatalf("the read left %d bytes taken from the budget", used)
	}
	for off := int64(6); off < 30; off += 3 {
		fetchBatch(off)
	}
	if got := read(); got != sizes[0]+rest {
		t.Fatalf("fetches after the read-ahead read %d more bytes from the bookies", got-sizes[0]-rest)
	}
}

// A fetch stops before the first entry that does not fit in its bytes;
// the read-ahead keeps that entry, so the next fetch, which starts there,
// does not go back to the bookies (before, it did, once per fetch).
func TestReadAheadKeepsTheEntryAFetchStoppedBefore(t *testing.T) {
	l, cfg, sizes := bookieReads(t, nil)
	res, err := l.Fetch(Ctx(t), 0, sizes[0]+sizes[1]+sizes[2]/2, 0)
	if err != nil || len(res.Batches) != 2 {
		t.Fatalf("first fetch: %d batches, %v; want 2", len(res.Batches), err)
	}
	read := counterValue(t, cfg.Metrics.BookieReadBytes)
	if res, err = l.Fetch(Ctx(t), 6, 1, 0); err != nil || len(res.Batches) != 1 {
		t.Fatalf("next fetch: %d batches, %v", len(res.Batches), err)
	}
	if again := counterValue(t, cfg.Metrics.BookieReadBytes); again != read {
		t.Fatalf("the next fetch read %v bytes from the bookies", again-read)
	}
}

// bookieReads opens a log without a tail cache (its reads go to the
// bookies), with ra (nil: its own), and appends 10 batches of 3 records:
// it returns the log, its config and the batches' sizes.
func bookieReads(t *testing.T, ra *ReadAhead) (*Log, Config, []int) {
	f := NewFixture(t)
	cfg := f.Config(1)
	cfg.Cache, cfg.ReadAhead = nil, ra
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	l := f.Open(cfg)
	AppendN(t, l, 10)
	var sizes []int
	l.mu.Lock()
	for _, e := range l.mu.seg.entries {
		sizes = append(sizes, int(e.size))
	}
	l.mu.Unlock()
	return l, cfg, sizes
}
