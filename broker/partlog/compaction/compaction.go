package compaction

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/tierpass"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/tiering/compact"
)

// ErrStale is returned when the log changed while a pass rewrote it
// (retention removed an input, tiering covered one, the topic's
// cleanup.policy no longer contains compact, the pass outlived its
// bound): nothing was swapped in, the outputs were deleted; the next pass
// starts over.
var ErrStale = errors.New("partlog: compaction inputs changed")

// Result is what one Compact call did.
type Result struct {
	// Ran: a pass was swapped in. Reason is Decide's reason either way.
	Ran    bool
	Reason compact.Reason
	// DirtyRatio of the cleanable ledgers before the pass; DirtyBytes
	// their dirty bytes; OldestDirtyMs the newest record time of the
	// oldest dirty cleanable ledger (-1: none), for the cleaner lag.
	DirtyRatio    float64
	DirtyBytes    int64
	OldestDirtyMs int64
	// InputLedgers replaced by OutputLedgers, InputObjects by
	// OutputObjects; CleanedOffset is the new cleaned-up-to offset.
	InputLedgers, OutputLedgers int
	InputObjects, OutputObjects int
	CleanedOffset               int64
	Stats                       compact.Stats
	Took                        time.Duration
}

// Options parameterize one Compact call.
type Options struct {
	// Map is the key map (reset by the pass); its capacity bounds the
	// dirty range one pass covers. One pass at a time may use it.
	Map *compact.OffsetMap
	// MaxDuration: a pass that has run longer than this at its swap is
	// abandoned (ErrStale), because the controller's orphan sweeper
	// deletes unlisted partition ledgers older than its grace and may
	// have taken them. 0: no bound.
	MaxDuration time.Duration
	// BufferBytes: the read stage keeps the batches it reads, whole
	// pieces from the first up to this many bytes, and the rewrite stage
	// rewrites those from memory instead of reading them again. 0: every
	// piece is read twice.
	BufferBytes int64
	// MaxBytesPerSec bounds what the pass reads (from bookies or the
	// object store), on average since it began, and the rewrite of what
	// it kept in memory to rewritePaceFactor times it; 0: unbounded.
	MaxBytesPerSec float64
	// ReadBytes is the size of the pass's reads of an object; 0:
	// DefaultReadBytes.
	ReadBytes int64
}

// DefaultReadBytes is Options.ReadBytes's default.
const DefaultReadBytes = 8 << 20

// pass is one compaction pass over a log: what every stage uses.
type pass struct {
	l       *partlog.Log
	cfg     partlog.Config
	log     *slog.Logger
	objects *tierpass.Objects // nil: the log has no Tier
	opts    Options
	// Of the snapshot the pass planned from.
	maxDecompressed int
	segmentBytes    int64
	ledgerOptions   ledger.CreateOptions
}

// Compact runs one compaction pass over l if its policy says so (P7), in
// four stages: plan (a pure decision over a snapshot of the list), read
// (index the dirty closed pieces, segment objects then ledgers no object
// covers, into opts.Map), rewrite (every piece from the first one up to
// the indexed end, aligned down to a piece boundary: objects into new
// objects, ledgers into new closed ledgers) and swap (one swap of the
// list that also stores the cleaned offset and queues the replaced
// objects for deletion, T6; the replaced ledgers and objects are deleted
// after it). If the log changed meanwhile, the outputs are deleted and
// ErrStale returned; a lost CAS fails the log (P3) like any other and
// deletes the outputs too (a CAS whose outcome is unknown leaves them to
// the orphan sweeps). Passes on one log must not overlap.
func Compact(ctx context.Context, l *partlog.Log, opts Options) (Result, error) {
	began := time.Now()
	snap := l.Snapshot()
	if snap.Err != nil {
		return Result{}, snap.Err
	}
	pl := plan(snap, l.Config().Tier != nil)
	res := Result{Reason: pl.decision.Reason, DirtyRatio: pl.decision.DirtyRatio, DirtyBytes: pl.decision.DirtyBytes,
		OldestDirtyMs: pl.oldestDirtyMs}
	if !pl.run {
		return res, nil
	}
	p := newPass(l, snap, opts)
	ix, err := p.index(ctx, pl)
	if err != nil {
		return res, err
	}
	in, err := cover(pl, ix, opts.Map.Capacity())
	if err != nil {
		return res, err
	}
	indexed := time.Now()
	out, err := p.rewrite(ctx, pl, ix, in)
	if err != nil {
		return res, err
	}
	res.Stats = out.stats
	rewritten := time.Now()
	if err := p.swap(ctx, began, in, out, snap.Now.UnixMilli()); err != nil {
		return res, err
	}
	res.Ran, res.CleanedOffset = true, in.end
	res.InputLedgers, res.OutputLedgers = len(in.ledgers), len(out.ledgers)
	res.InputObjects, res.OutputObjects = len(in.objects), len(out.objects)
	res.Took = time.Since(began)
	st := out.stats
	p.log.Info("compaction", "reason", pl.decision.Reason.String(), "dirty_ratio", pl.decision.DirtyRatio,
		"ledgers_in", len(in.ledgers), "ledgers_out", len(out.ledgers), "objects_in", len(in.objects),
		"objects_out", len(out.objects), "cleaned_offset", in.end, "bytes_in", st.BytesIn, "bytes_out", st.BytesOut,
		"records_removed", st.RecordsRemoved, "tombstones_dropped", st.TombstonesDropped,
		"batches_dropped_unread", st.BatchesDroppedUnread, "tombstone_horizon_ms", st.TombstoneHorizonMs,
		"took", res.Took, "index_took", indexed.Sub(began), "rewrite_took", rewritten.Sub(indexed))
	return res, nil
}

func newPass(l *partlog.Log, snap partlog.Snapshot, opts Options) *pass {
	cfg := l.Config()
	if opts.ReadBytes <= 0 {
		opts.ReadBytes = DefaultReadBytes
	}
	p := &pass{l: l, cfg: cfg, log: partlog.Logger(cfg), opts: opts,
		maxDecompressed: partlog.MaxStoredDecompressedBytes,
		segmentBytes:    snap.Limits.SegmentBytes, ledgerOptions: cfg.LedgerOptions(snap.Limits)}
	if cfg.Tier != nil {
		p.objects = tierpass.NewObjects(cfg)
	}
	return p
}

// DirtyRatio is the dirty ratio of the cleanable pieces of the log of
// snap as min.cleanable.dirty.ratio compares it (0 when not compacted);
// objects: the log has a Tier (its segment objects are cleanable).
func DirtyRatio(snap partlog.Snapshot, objects bool) float64 {
	if !snap.Policy.Compact {
		return 0
	}
	return plan(snap, objects).decision.DirtyRatio
}
