package ledger_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/alloctest"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgertest"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// answeringBookies is a ledger.BookieClient whose bookies store nothing
// and answer every add ADD_OK, from a goroutine of their own and in call
// order, as ledgergrpc.Client's dispatcher delivers answers. Only adds
// are used; it allocates nothing per add once its queues have grown.
type answeringBookies struct {
	ledger.BookieClient // nil: only Add and WriteLAC are called

	mu     sync.Mutex
	queue  []func(*bookiepb.AddResponse, error)
	closed bool
	wake   chan struct{}
	done   chan struct{}
}

// answerOK is every answer: the writer reads it and keeps nothing of it.
var answerOK = &bookiepb.AddResponse{Status: bookiepb.AddStatus_ADD_OK}

func newAnsweringBookies() *answeringBookies {
	a := &answeringBookies{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go a.answer()
	return a
}

func (a *answeringBookies) Add(_ string, _ *bookiepb.AddRequest, cb func(*bookiepb.AddResponse, error)) {
	a.mu.Lock()
	a.queue = append(a.queue, cb)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *answeringBookies) WriteLAC(context.Context, string, uint64, int64) error { return nil }

func (a *answeringBookies) answer() {
	defer close(a.done)
	var batch []func(*bookiepb.AddResponse, error)
	for {
		a.mu.Lock()
		batch, a.queue = a.queue, batch[:0]
		closed := a.closed
		a.mu.Unlock()
		for i, cb := range batch {
			cb(answerOK, nil)
			batch[i] = nil
		}
		if len(batch) > 0 {
			continue
		}
		if closed {
			return
		}
		<-a.wake
	}
}

// close stops the answering goroutine once every add is answered.
func (a *answeringBookies) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	<-a.done
}

// appendLoad appends 1 KiB entries to a writer of a 3/3/2 ledger over
// answeringBookies, window of them in flight, as a broker's partition log
// does (AppendAcks at the quorum).
type appendLoad struct {
	w       *ledger.Writer
	bookies *answeringBookies
	payload []byte
	slots   chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	failed  error
	cb      func(int64, error)
}

func newAppendLoad(tb testing.TB, window int) *appendLoad {
	tb.Helper()
	c := ledgertest.NewCluster(3)
	l := &appendLoad{bookies: newAnsweringBookies(), payload: make([]byte, 1<<10), slots: make(chan struct{}, window)}
	env := ledger.Env{Meta: c.Meta, Bookies: l.bookies, Registry: c.Registry, Placement: ledger.Ordered}
	var err error
	// GMAC digests, as a broker's writers use (broker.Config.LedgerDigest).
	opts := ledger.CreateOptions{Digest: ledgerpb.DigestType_DIGEST_AES_GMAC}
	if l.w, err = ledger.Create(context.Background(), env, opts); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.w.Close(ctx); err != nil {
			tb.Error(err)
		}
		l.bookies.close()
	})
	l.cb = func(_ int64, err error) {
		if err != nil {
			l.mu.Lock()
			l.failed = err
			l.mu.Unlock()
		}
		<-l.slots
		l.wg.Done()
	}
	return l
}

// run appends n entries and waits until every one is acknowledged.
func (l *appendLoad) run(n int) error {
	for range n {
		l.slots <- struct{}{}
		l.wg.Add(1)
		if err := l.w.AppendAcks(context.Background(), l.payload, ledger.AckQuorum, l.cb, nil); err != nil {
			l.cb(-1, err)
		}
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return l.failed
	}
	if l.w.Stats().UnderReplicatedEntries > 0 {
		return errors.New("entries under-replicated")
	}
	return nil
}

// BenchmarkWriterAppend measures the writer's own cost per entry of 1 KiB
// (tagging it, queueing its adds to 3 bookies, counting their answers,
// acknowledging it in order), with 256 entries in flight and bookies that
// answer at once: ns/op and cpu-ns/op (the process's CPU time per entry)
// and allocations per entry.
func BenchmarkWriterAppend(b *testing.B) {
	l := newAppendLoad(b, 256)
	if err := l.run(2000); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(l.payload)))
	b.ResetTimer()
	cpu := alloctest.CPUTime(b)
	if err := l.run(b.N); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(alloctest.CPUTime(b)-cpu)/float64(b.N), "cpu-ns/op")
}

// TestWriterAppendAllocationBound guards the writer's allocations per
// entry (BenchmarkWriterAppend).
func TestWriterAppendAllocationBound(t *testing.T) {
	alloctest.SkipUnderRace(t)
	l := newAppendLoad(t, 256)
	if err := l.run(2000); err != nil {
		t.Fatal(err)
	}
	const entries = 10000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := l.run(entries)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	perEntry := float64(after.Mallocs-before.Mallocs) / entries
	// Measured: 5.0 per entry: the entry, the request its bookies share,
	// and a callback per bookie (BookieClient.Add's). A quarter more is
	// allowed.
	const bound = 6.25
	t.Logf("%.2f allocations per entry", perEntry)
	if perEntry > bound {
		t.Errorf("%.2f allocations per entry, want at most %.1f", perEntry, bound)
	}
}

// TestEntryCheckAllocations: a bookie checks the digest of every add
// (EntryChecker.Check), without allocating.
func TestEntryCheckAllocations(t *testing.T) {
	alloctest.SkipUnderRace(t)
	payload := make([]byte, 1<<10)
	for _, typ := range []ledgerpb.DigestType{ledgerpb.DigestType_DIGEST_AES_GMAC, ledgerpb.DigestType_DIGEST_HMAC_SHA256} {
		md := &ledgerpb.LedgerMetadata{Id: 7, DigestKey: make([]byte, 32), DigestType: typ}
		stored, err := ledger.SealEntry(md, 3, payload)
		if err != nil {
			t.Fatal(err)
		}
		checker := ledger.NewEntryChecker(md)
		if allocs := testing.AllocsPerRun(100, func() {
			if err := checker.Check(3, stored); err != nil {
				t.Fatal(err)
			}
		}); allocs > 0 {
			t.Errorf("%v: %v allocations per check, want none", typ, allocs)
		}
	}
}
