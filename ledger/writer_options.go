package ledger

import (
	"fmt"
	"time"

	"github.com/strata-log/strata/proto/ledgerpb"
)

// Scheduler runs the writer's delayed and background work: metadata
// retries after a failed compare-and-set, periodic retries to replace a
// failed bookie when no spare was available, and the explicit LAC of an
// idle writer. Production uses real timers; tests use an in-memory twin
// (ledgertest.ManualScheduler) and decide when time passes, so every
// background step of a writer happens at a point the test chooses.
type Scheduler interface {
	// AfterFunc arranges for f to run once, on any goroutine, after d
	// (d == 0: as soon as possible). It must not run f before returning.
	// stop prevents a run that has not started and reports whether it did.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// realScheduler is Scheduler on time.AfterFunc.
type realScheduler struct{}

func (realScheduler) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Defaults for CreateOptions.
const (
	DefaultEnsembleSize             = 3
	DefaultWriteQuorum              = 3
	DefaultAckQuorum                = 2
	DefaultMaxInFlightBytes         = 64 << 20
	DefaultExplicitLACInterval      = time.Second
	DefaultReplacementRetryInterval = time.Second
	DefaultMetadataRetryMin         = 50 * time.Millisecond
	DefaultMetadataRetryMax         = 5 * time.Second
	DefaultMetadataTimeout          = 10 * time.Second
)

// CreateOptions configure a new ledger and its writer. Zero fields take
// the defaults above.
type CreateOptions struct {
	// EnsembleSize (E), WriteQuorum (Qw), AckQuorum (Qa): each entry goes
	// to Qw of the E bookies and is acknowledged once Qa of those have it
	// durably. E >= Qw >= Qa >= 1. Default 3/3/2: writes and recovery each
	// survive one bookie down.
	EnsembleSize, WriteQuorum, AckQuorum int
	// Properties are stored in the metadata (e.g. the owning partition).
	Properties map[string]string
	// MaxInFlightBytes bounds the payload bytes appended and not yet
	// acknowledged; Append waits (honouring its ctx) beyond it. One entry
	// larger than the bound is let in when nothing else is in flight.
	MaxInFlightBytes int64
	// ExplicitLACInterval: once the writer has been idle this long after
	// its last acknowledgement, it sends the LAC to the ensemble so readers
	// see the last entry (the piggybacked LAC of entry e only covers e-1).
	// Negative disables it.
	ExplicitLACInterval time.Duration
	// ReplacementRetryInterval: how often a writer with a failed bookie and
	// no spare tries again to replace it (or to take it back).
	ReplacementRetryInterval time.Duration
	// MetadataRetryMin and MetadataRetryMax bound the exponential backoff
	// between metadata attempts while the store is unavailable.
	MetadataRetryMin, MetadataRetryMax time.Duration
	// MetadataTimeout bounds each background call to the metadata store,
	// the registry or a bookie's WriteLAC.
	MetadataTimeout time.Duration
	// Scheduler runs background work; nil uses real timers.
	Scheduler Scheduler
	// Digest is how entries are tagged (ledger/digest.go). The zero value
	// is HMAC-SHA256, which every version reads; DIGEST_AES_GMAC costs
	// about a seventh of its CPU but versions before it cannot read it.
	Digest ledgerpb.DigestType
}

func (o CreateOptions) withDefaults() CreateOptions {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.EnsembleSize, DefaultEnsembleSize)
	def(&o.WriteQuorum, DefaultWriteQuorum)
	def(&o.AckQuorum, DefaultAckQuorum)
	if o.MaxInFlightBytes == 0 {
		o.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	defDur(&o.ExplicitLACInterval, DefaultExplicitLACInterval)
	defDur(&o.ReplacementRetryInterval, DefaultReplacementRetryInterval)
	defDur(&o.MetadataRetryMin, DefaultMetadataRetryMin)
	defDur(&o.MetadataRetryMax, DefaultMetadataRetryMax)
	defDur(&o.MetadataTimeout, DefaultMetadataTimeout)
	if o.Scheduler == nil {
		o.Scheduler = realScheduler{}
	}
	return o
}

// Validate checks the options after defaults; errors wrap ErrInvalid.
func (o CreateOptions) Validate() error {
	o = o.withDefaults()
	if err := validateQuorums(o.EnsembleSize, o.WriteQuorum, o.AckQuorum); err != nil {
		return err
	}
	switch {
	case o.MaxInFlightBytes < 0:
		return fmt.Errorf("%w: MaxInFlightBytes %d", ErrInvalid, o.MaxInFlightBytes)
	case o.ReplacementRetryInterval < 0, o.MetadataRetryMin < 0, o.MetadataTimeout < 0:
		return fmt.Errorf("%w: negative interval", ErrInvalid)
	case ledgerpb.DigestType_name[int32(o.Digest)] == "":
		return fmt.Errorf("%w: digest type %d", ErrInvalid, o.Digest)
	case o.MetadataRetryMax < o.MetadataRetryMin:
		return fmt.Errorf("%w: MetadataRetryMax %v below MetadataRetryMin %v", ErrInvalid, o.MetadataRetryMax, o.MetadataRetryMin)
	}
	return nil
}

func validateQuorums(e, qw, qa int) error {
	if !(e >= qw && qw >= qa && qa >= 1) {
		return fmt.Errorf("%w: ensemble %d, write quorum %d, ack quorum %d: need E >= Qw >= Qa >= 1", ErrInvalid, e, qw, qa)
	}
	return nil
}

func (o CreateOptions) String() string {
	o = o.withDefaults()
	return fmt.Sprintf("E=%d Qw=%d Qa=%d maxInFlightBytes=%d explicitLAC=%v replacementRetry=%v metadataRetry=%v..%v metadataTimeout=%v",
		o.EnsembleSize, o.WriteQuorum, o.AckQuorum, o.MaxInFlightBytes, o.ExplicitLACInterval,
		o.ReplacementRetryInterval, o.MetadataRetryMin, o.MetadataRetryMax, o.MetadataTimeout)
}
