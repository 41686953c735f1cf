package scrub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/segfile"
)

// ErrInvalidConfig is returned by Run (wrapped) for a Config that fails
// Validate.
var ErrInvalidConfig = errors.New("scrub: invalid config")

// Segment is one committed segment object of a partition, as metad lists it.
type Segment struct {
	Topic     string
	Partition int32
	Tiered    *brokerpb.TieredSegment
}

// String names the segment for people: topic/partition, offsets and key.
func (s Segment) String() string {
	t := s.Tiered
	return fmt.Sprintf("%s/%d offsets %d-%d key %s", s.Topic, s.Partition, t.GetBaseOffset(), t.GetLastOffset(), t.GetObjectKey())
}

// Kind classifies a Problem (see doc.go for what each means).
type Kind string

// The kinds of problems.
const (
	KindMissing          Kind = "missing"
	KindTruncated        Kind = "truncated"
	KindSizeMismatch     Kind = "size-mismatch"
	KindCorrupt          Kind = "corrupt"
	KindMetadataMismatch Kind = "metadata-mismatch"
	KindUnreadable       Kind = "unreadable"
	KindUnauthenticated  Kind = "unauthenticated"
)

// Damage reports whether the kind says something is wrong with the data or
// its record: every kind but KindUnreadable, which says the check could
// not be made, and KindUnauthenticated, a sound object written before
// authentication, which says only that nothing proves who wrote it.
func (k Kind) Damage() bool { return k != KindUnreadable && k != KindUnauthenticated }

// Problem is what is wrong with one segment.
type Problem struct {
	Segment Segment
	Kind    Kind
	// Detail says what exactly, for people (segfile's message for
	// corruption).
	Detail string
	// Err is the underlying error when there is one (a *segfile.CorruptError,
	// a store error); nil for a size or metadata mismatch.
	Err error
}

func (p Problem) String() string {
	return fmt.Sprintf("%s: %s: %s", p.Segment, p.Kind, p.Detail)
}

// Progress is how far a Run is.
type Progress struct {
	Objects, TotalObjects int
	// Bytes are the recorded sizes of the objects checked, of TotalBytes.
	Bytes, TotalBytes int64
	Problems          int
}

// Config configures Run. The zero value is usable.
type Config struct {
	// Key is the cluster's tier key, with which authenticated objects are
	// checked. Nil: they cannot be (KindUnreadable).
	Key *segfile.Key
	// Parallel is how many objects are checked at once (0: 4). Each
	// holds up to one 4 MiB read in memory.
	Parallel int
	// Attempts is how many times an object is tried when the store fails
	// with a transient error (0: 3).
	Attempts int
	// RetryBackoff is the wait before the second try, doubled before each
	// further one (0: 500ms).
	RetryBackoff time.Duration
	// Progress, if set, is called after each object.
	Progress func(Progress)
	// Problem, if set, is called for each problem as it is found, before
	// the Progress call of its object.
	Problem func(Problem)
	// Listed, if set, is asked about a segment before its problem is
	// reported: one its partition no longer lists (retention or a
	// compaction pass unlinked it, and its object went, while the run
	// went on) is counted in Report.Gone instead. A Listed error keeps
	// the problem.
	Listed func(context.Context, Segment) (bool, error)
}

// Defaults.
const (
	DefaultParallel     = 4
	DefaultAttempts     = 3
	DefaultRetryBackoff = 500 * time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.Parallel == 0 {
		c.Parallel = DefaultParallel
	}
	if c.Attempts == 0 {
		c.Attempts = DefaultAttempts
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	return c
}

// Validate reports whether c can be used (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Parallel < 1:
		return fmt.Errorf("%w: parallel %d, want at least 1", ErrInvalidConfig, c.Parallel)
	case c.Attempts < 1:
		return fmt.Errorf("%w: attempts %d, want at least 1", ErrInvalidConfig, c.Attempts)
	case c.RetryBackoff < 0:
		return fmt.Errorf("%w: negative retry backoff %v", ErrInvalidConfig, c.RetryBackoff)
	}
	return nil
}

func (c Config) String() string {
	c = c.withDefaults()
	key := "none"
	if c.Key != nil {
		key = c.Key.String()
	}
	return fmt.Sprintf("scrub parallel=%d attempts=%d backoff=%v key=%s", c.Parallel, c.Attempts, c.RetryBackoff, key)
}

// Report is the outcome of a Run.
type Report struct {
	// Objects and Bytes (recorded sizes) checked.
	Objects int
	Bytes   int64
	// Problems sorted by topic, partition and base offset.
	Problems []Problem
	// Gone: segments with a problem that their partitions no longer
	// listed when it was found (Config.Listed), so no problem.
	Gone int
}

// Damaged is the number of problems that say something is wrong with the
// data or its record (Kind.Damage).
func (r Report) Damaged() int {
	n := 0
	for _, p := range r.Problems {
		if p.Kind.Damage() {
			n++
		}
	}
	return n
}

// Counts returns the number of problems of each kind.
func (r Report) Counts() map[Kind]int {
	out := map[Kind]int{}
	for _, p := range r.Problems {
		out[p.Kind]++
	}
	return out
}

// Run checks every segment against store (see doc.go). It returns an error
// only for an invalid cfg or when ctx ends; the Report then covers what was
// checked.
func Run(ctx context.Context, store objstore.Store, segs []Segment, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	cfg = cfg.withDefaults()
	var total int64
	for _, s := range segs {
		total += s.Tiered.GetSizeBytes()
	}
	r := &runner{store: store, cfg: cfg}
	r.mu.progress = Progress{TotalObjects: len(segs), TotalBytes: total}

	work := make(chan Segment)
	var wg sync.WaitGroup
	for range min(cfg.Parallel, max(len(segs), 1)) {
		wg.Go(func() {
			for s := range work {
				p := r.check(ctx, s)
				if p != nil && cfg.Listed != nil {
					if listed, err := cfg.Listed(ctx, s); err == nil && !listed {
						r.gone(s)
						continue
					}
				}
				r.done(ctx, s, p)
			}
		})
	}
	err := feed(ctx, work, segs)
	close(work)
	wg.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Objects: r.mu.progress.Objects, Bytes: r.mu.progress.Bytes, Problems: r.mu.problems, Gone: r.mu.gone}
	slices.SortFunc(rep.Problems, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Segment.Topic, b.Segment.Topic), cmp.Compare(a.Segment.Partition, b.Segment.Partition),
			cmp.Compare(a.Segment.Tiered.GetBaseOffset(), b.Segment.Tiered.GetBaseOffset()),
			strings.Compare(a.Segment.Tiered.GetObjectKey(), b.Segment.Tiered.GetObjectKey()))
	})
	if err == nil {
		err = ctx.Err() // a check cut short by ctx is not a result
	}
	if err != nil {
		return rep, fmt.Errorf("scrub: stopped after %d of %d objects: %w", rep.Objects, len(segs), err)
	}
	return rep, nil
}

// feed hands out the segments until they are all taken or ctx ends.
func feed(ctx context.Context, work chan<- Segment, segs []Segment) error {
	for _, s := range segs {
		select {
		case work <- s:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// runner holds one Run's state.
type runner struct {
	store objstore.Store
	cfg   Config

	mu struct {
		sync.Mutex
		progress Progress
		problems []Problem
		gone     int
	}
}

// gone records a segment its partition stopped listing while it was
// checked.
func (r *runner) gone(s Segment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.gone++
	r.mu.progress.Objects++
	r.mu.progress.Bytes += s.Tiered.GetSizeBytes()
	if r.cfg.Progress != nil {
		r.cfg.Progress(r.mu.progress)
	}
}

// done records the outcome of one segment and calls the callbacks.
func (r *runner) done(ctx context.Context, s Segment, p *Problem) {
	if p != nil && p.Kind == KindUnreadable && ctx.Err() != nil {
		return // not checked, most likely because ctx ended: Run reports that
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.progress.Objects++
	r.mu.progress.Bytes += s.Tiered.GetSizeBytes()
	if p != nil {
		r.mu.progress.Problems++
		r.mu.problems = append(r.mu.problems, *p)
		if r.cfg.Problem != nil {
			r.cfg.Problem(*p)
		}
	}
	if r.cfg.Progress != nil {
		r.cfg.Progress(r.mu.progress)
	}
}

// check checks one segment, trying again after transient store errors.
func (r *runner) check(ctx context.Context, s Segment) *Problem {
	backoff := r.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		p := Check(ctx, r.store, s, r.cfg.Key)
		if p == nil || p.Kind != KindUnreadable || !errors.Is(p.Err, objstore.ErrTransient) ||
			attempt >= r.cfg.Attempts || ctx.Err() != nil {
			return p
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return p
		}
		backoff *= 2
	}
}

// Check checks one segment once, authenticating it with key: nil when it
// is sound, else its one problem (see doc.go for the kinds).
func Check(ctx context.Context, store objstore.Store, s Segment, tierKey *segfile.Key) *Problem {
	rec := s.Tiered
	problem := func(kind Kind, err error, format string, args ...any) *Problem {
		return &Problem{Segment: s, Kind: kind, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	key := rec.GetObjectKey()
	info, err := store.Stat(ctx, key)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return problem(KindMissing, err, "no object under the key")
	case errors.Is(err, objstore.ErrInvalidKey):
		return problem(KindMetadataMismatch, err, "the recorded key is not a valid object key: %v", err)
	case err != nil:
		return problem(KindUnreadable, err, "stat: %v", err)
	}
	auth := segfile.Auth{Key: tierKey, Name: key, Required: rec.GetAuthenticated()}
	sum, err := segfile.Verify(ctx, objectRange{store, key}, info.Size, auth)
	switch {
	case errors.Is(err, segfile.ErrNoKey):
		return problem(KindUnreadable, err, "the object is authenticated and the scrub has no tier key: %v", err)
	case err != nil && !corruption.Is(err):
		return problem(KindUnreadable, err, "reading: %v", err)
	}
	if info.Size != rec.GetSizeBytes() {
		switch {
		case err == nil:
			return problem(KindSizeMismatch, nil, "the object is a whole segment of %d bytes, metad records %d", info.Size, rec.GetSizeBytes())
		case info.Size < rec.GetSizeBytes():
			return problem(KindTruncated, err, "the object is %d bytes, metad records %d, and its end is not a segment's: %v",
				info.Size, rec.GetSizeBytes(), err)
		default:
			return problem(KindSizeMismatch, err, "the object is %d bytes, metad records %d, and it does not verify: %v",
				info.Size, rec.GetSizeBytes(), err)
		}
	}
	if err != nil {
		return problem(KindCorrupt, err, "%v", err)
	}
	if diffs := compare(rec, sum); len(diffs) > 0 {
		return problem(KindMetadataMismatch, nil, "%s", strings.Join(diffs, "; "))
	}
	if !sum.Authenticated {
		return problem(KindUnauthenticated, nil, "written before authentication (segment format version %d): its checksums pass, but no MAC proves this cluster wrote it", segfile.Version)
	}
	return nil
}

// compare lists the fields where the record and the object's summary
// disagree.
func compare(rec *brokerpb.TieredSegment, sum segfile.Summary) []string {
	var diffs []string
	check := func(name string, recorded, actual int64) {
		if recorded != actual {
			diffs = append(diffs, fmt.Sprintf("%s: metad records %d, the object holds %d", name, recorded, actual))
		}
	}
	check("base offset", rec.GetBaseOffset(), sum.BaseOffset)
	check("last offset", rec.GetLastOffset(), sum.LastOffset)
	check("records", rec.GetRecords(), sum.Records)
	check("data bytes", rec.GetDataBytes(), sum.DataBytes)
	check("index position", rec.GetIndexPos(), sum.IndexPos)
	check("max timestamp", rec.GetMaxTimestampMs(), sum.MaxTimestampMs)
	return diffs
}

// objectRange is a segfile.RangeReader over one object: one ranged GET per
// read.
type objectRange struct {
	store objstore.Store
	key   string
}

// ReadAt returns [off, off+n) of the object. A range that starts past the
// end (objstore.ErrInvalidRange) becomes io.ErrUnexpectedEOF and a body
// that ends cleanly but short is returned short, so that segfile reports a
// truncated object; a body the store reports cut short stays transient and
// no longer matches io.ErrUnexpectedEOF, so that it is never taken for
// corruption.
func (o objectRange) ReadAt(ctx context.Context, off, n int64) ([]byte, error) {
	rc, err := o.store.GetRange(ctx, o.key, off, n)
	if errors.Is(err, objstore.ErrInvalidRange) {
		return nil, fmt.Errorf("%w: %v", io.ErrUnexpectedEOF, err)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		if errors.Is(err, objstore.ErrTransient) {
			return nil, fmt.Errorf("%w: %v", objstore.ErrTransient, err)
		}
		return nil, err
	}
	return b, nil
}
