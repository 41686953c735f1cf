package bookie

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// A bookie keeps a LAC only up to entries whose digest it checked against
// their ledger's key (H2 in ledger/storage/doc.go, V1 in ledger/doc.go).
// digestKeys is that check (storage.Options.Verify): it reads each
// ledger's key from its metadata in metad, in the background, the first
// time an entry of the ledger arrives.

// Bounds of digestKeys.
const (
	// maxKeyedLedgers bounds the ledgers whose key (or absence from
	// metad) is remembered; past it an arbitrary one is forgotten, and
	// read again if its entries keep coming.
	maxKeyedLedgers = 1 << 16
	// maxKeyReads bounds the metad reads in flight: adds for many unknown
	// ledger ids cost metad at most this many reads at a time.
	maxKeyReads = 4
	// keyReadTimeout bounds one metad read.
	keyReadTimeout = 5 * time.Second
	// keyRetryAfter: a ledger whose key could not be read (metad
	// unavailable) is not asked for again before this.
	keyRetryAfter = time.Second
	// mismatchLogEvery: at most one warning about entries whose digest
	// does not match per this period (every one is counted).
	mismatchLogEvery = 10 * time.Second
)

// metadataGetter reads a ledger's metadata (ledgermetad.Store).
type metadataGetter interface {
	// Get returns ledger.ErrNoSuchLedger when metad does not know id.
	Get(ctx context.Context, id uint64) (*ledgerpb.LedgerMetadata, int64, error)
}

// digestKeys checks the entries of adds against their ledgers' digest
// keys. An add never waits for metad: until its ledger's key is known, an
// entry is not vouched for, so the ledger's LAC waits on this bookie,
// which is safe (recovery starting lower only rewrites more, R4 in
// ledger/recovery_machine.go). A ledger metad does not know is
// remembered as such: its metadata would have been created before any of
// its entries was sent (O2 in doc.go), and ids are never reused, so it
// never gets a key. Safe for concurrent use.
type digestKeys struct {
	meta       metadataGetter
	log        *slog.Logger
	now        func() time.Time
	maxLedgers int // maxKeyedLedgers; tests lower it
	mismatches prometheus.Counter
	ctx        context.Context // cancelled by close: reads in flight stop
	cancel     context.CancelFunc
	wg         sync.WaitGroup // the reads in flight

	mu struct {
		sync.Mutex
		ledgers  map[uint64]*ledgerKey
		reading  int // reads in flight
		closed   bool
		lastWarn time.Time
	}
}

// ledgerKey is what is known of one ledger's key.
// REQUIRES: digestKeys.mu held for every field.
type ledgerKey struct {
	checker *ledger.EntryChecker // nil until read
	absent  bool                 // metad does not know the ledger
	reading bool
	retryAt time.Time // after a failed read
}

// newDigestKeys returns the check over meta; its counter,
// strata_bookie_add_digest_mismatches_total, is registered on reg when
// reg is not nil.
func newDigestKeys(meta metadataGetter, log *slog.Logger, reg prometheus.Registerer) (*digestKeys, error) {
	k := &digestKeys{
		meta: meta, log: log, now: time.Now, maxLedgers: maxKeyedLedgers,
		mismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_bookie_add_digest_mismatches_total",
			Help: "Entries checked on an add (or read back for an explicit LAC naming them) that do not carry the " +
				"digest their ledger's key gives them (written without the key, or damaged): stored, but no LAC is kept " +
				"on their account.",
		}),
	}
	if reg != nil {
		if err := reg.Register(k.mismatches); err != nil {
			return nil, err
		}
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.mu.ledgers = make(map[uint64]*ledgerKey)
	return k, nil
}

// verify reports whether entry, entry entryID of ledger ledgerID as an add
// carries it, has its ledger's tag: storage.Options.Verify. Entries of a
// ledger without a key (created before digests) all pass, as they do for
// readers. It never blocks on metad.
func (k *digestKeys) verify(ledgerID, entryID uint64, entry []byte) bool {
	checker := k.checker(ledgerID)
	if checker == nil {
		return false
	}
	if err := checker.Check(int64(entryID), entry); err != nil {
		k.mismatch(ledgerID, entryID, err)
		return false
	}
	return true
}

// checker returns the ledger's checker, or nil while its key is not known
// (then it starts reading it, unless a read is already in flight, too many
// are, or the last one failed less than keyRetryAfter ago).
func (k *digestKeys) checker(ledgerID uint64) *ledger.EntryChecker {
	k.mu.Lock()
	defer k.mu.Unlock()
	lk := k.mu.ledgers[ledgerID]
	switch {
	case lk != nil && lk.checker != nil:
		return lk.checker
	case lk != nil && (lk.absent || lk.reading || k.now().Before(lk.retryAt)):
		return nil
	case k.mu.closed || k.mu.reading >= maxKeyReads:
		return nil
	}
	if lk == nil {
		if len(k.mu.ledgers) >= k.maxLedgers {
			for id := range k.mu.ledgers { // an arbitrary one
				delete(k.mu.ledgers, id)
				break
			}
		}
		lk = &ledgerKey{}
		k.mu.ledgers[ledgerID] = lk
	}
	lk.reading = true
	k.mu.reading++
	k.wg.Go(func() { k.read(ledgerID, lk) })
	return nil
}

// read reads the ledger's key from metad into lk.
func (k *digestKeys) read(ledgerID uint64, lk *ledgerKey) {
	ctx, cancel := context.WithTimeout(k.ctx, keyReadTimeout)
	md, _, err := k.meta.Get(ctx, ledgerID)
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mu.reading--
	lk.reading = false
	switch {
	case err == nil:
		lk.checker = ledger.NewEntryChecker(md)
	case errors.Is(err, ledger.ErrNoSuchLedger):
		lk.absent = true
	default:
		lk.retryAt = k.now().Add(keyRetryAfter)
		k.log.Debug("reading a ledger's digest key", "ledger", ledgerID, "err", err)
	}
}

// mismatch counts an entry whose tag does not match, and warns at most
// once per mismatchLogEvery.
func (k *digestKeys) mismatch(ledgerID, entryID uint64, err error) {
	k.mismatches.Inc()
	k.mu.Lock()
	now := k.now()
	warn := now.Sub(k.mu.lastWarn) >= mismatchLogEvery
	if warn {
		k.mu.lastWarn = now
	}
	k.mu.Unlock()
	if warn {
		k.log.Warn("an add's entry does not carry its ledger's digest (written without the key, or damaged): "+
			"stored, but no LAC is kept on its account", "ledger", ledgerID, "entry", entryID, "err", err)
	}
}

// close stops the reads in flight and waits for them; later entries are
// not vouched for.
func (k *digestKeys) close() {
	k.mu.Lock()
	k.mu.closed = true
	k.mu.Unlock()
	k.cancel()
	k.wg.Wait()
}
