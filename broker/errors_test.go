package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/broker/group"
	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/internal/bytebudget"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/recordbatch/hostilebatch"
	"github.com/strata-log/strata/tiering/segfile"
)

// What a client is told decides whether its retry can duplicate a record:
// NOT_OWNER (retryable) only when nothing was written.
func TestClassifyAppendOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		code      codes.Code
		reason    string
		retryable bool
	}{
		{"refused by a fenced log", fmt.Errorf("%w: ledger fenced", partlog.ErrFenced), codes.Unavailable, rpcerror.ReasonNotOwner, true},
		{"refused by a closed log", partlog.ErrClosed, codes.Unavailable, rpcerror.ReasonNotOwner, true},
		// M1: in flight when the log was fenced: may be stored.
		{"in flight when fenced", fmt.Errorf("%w: in flight: %w", partlog.ErrUnknownOutcome, partlog.ErrFenced), codes.Unavailable, rpcerror.ReasonUnknownOutcome, false},
		{"in flight when the CAS was lost", fmt.Errorf("%w: in flight: %w", partlog.ErrUnknownOutcome, partlog.ErrConflict), codes.Unavailable, rpcerror.ReasonUnknownOutcome, false},
		// M2 and H4: refusals that retrying cannot fix.
		{"group full", fmt.Errorf("%w: 1000 members", group.ErrGroupMaxSize), codes.ResourceExhausted, rpcerror.ReasonInvalid, false},
		{"group limit", fmt.Errorf("%w: record too large", group.ErrLimitExceeded), codes.ResourceExhausted, rpcerror.ReasonInvalid, false},
		{"cluster partition cap", fmt.Errorf("%w: 100000 partitions", ErrLimit), codes.ResourceExhausted, rpcerror.ReasonInvalid, false},
		// A read from the object store that timed out: retry the fetch.
		{"tier read timed out", fmt.Errorf("%w: get-range: %w", partlog.ErrTierUnavailable, context.DeadlineExceeded), codes.Unavailable, rpcerror.ReasonUnavailable, true},
		// A decompression bomb: its records are refused, as Kafka's
		// validator refuses invalid records.
		{"batch inflating past max.compression.ratio", fmt.Errorf("%w: 8 MiB from 991 bytes", partlog.ErrInflated), codes.InvalidArgument, rpcerror.ReasonInvalid, false},
		// No ack quorum of bookies takes writes: refused, nothing written;
		// or handed to the writer before it stalled: may be written later.
		{"not enough bookies", partlog.ErrNotEnoughBookies, codes.Unavailable, rpcerror.ReasonUnavailable, true},
		{"handed to a stalled writer", fmt.Errorf("%w: ledger 7", partlog.ErrNotEnoughBookiesAfterAppend), codes.Unavailable, rpcerror.ReasonUnknownOutcome, false},
		// The produce budget stayed full: back off and retry.
		{"broker busy", fmt.Errorf("%w: no room", ErrBusy), codes.Unavailable, rpcerror.ReasonUnavailable, true},
	} {
		code, info := classify(tc.err)
		if code != tc.code || info.GetReason() != tc.reason || info.GetRetryable() != tc.retryable {
			t.Errorf("%s: %v %s retryable=%v, want %v %s retryable=%v", tc.name, code, info.GetReason(), info.GetRetryable(), tc.code, tc.reason, tc.retryable)
		}
	}
}

// Stored data that fails its checks answers DATA_LOSS / CORRUPT whichever
// package found it (corruption.Is), unless a case before says more: a
// produced batch stays CORRUPT_BATCH, an append in flight stays
// UNKNOWN_OUTCOME (it may be stored).
func TestClassifyCorruption(t *testing.T) {
	segment := &segfile.CorruptError{Pos: 4096, Section: "data", Detail: "batch crc mismatch"}
	entry := fmt.Errorf("ledger: read entry 7/3: %w", errors.Join(ledger.ErrEntryUnreadable,
		fmt.Errorf("%w: bookie b1: corrupt copy", ledger.ErrEntryCorrupt)))
	for _, tc := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"tiered segment corrupt", fmt.Errorf("partlog: fetch t-0 at 12: %w", segment), codes.DataLoss, rpcerror.ReasonCorrupt},
		{"ledger entry with a corrupt copy", entry, codes.DataLoss, rpcerror.ReasonCorrupt},
		{"produced batch with a bad crc", fmt.Errorf("%w: %w", partlog.ErrCorruptBatch, recordbatch.ErrCorrupt), codes.InvalidArgument, rpcerror.ReasonCorruptBatch},
		{"append in flight when the log failed on corruption", fmt.Errorf("%w: log failed: %w", partlog.ErrUnknownOutcome, segment), codes.Unavailable, rpcerror.ReasonUnknownOutcome},
		{"not corruption", errors.New("something else"), codes.Internal, rpcerror.ReasonInternal},
	} {
		code, info := classify(tc.err)
		if code != tc.code || info.GetReason() != tc.reason || info.GetRetryable() {
			t.Errorf("%s: %v %s retryable=%v, want %v %s not retryable", tc.name, code, info.GetReason(), info.GetRetryable(), tc.code, tc.reason)
		}
	}
}

// H4: the Produce requests in flight hold at most
// --max-inflight-produce-bytes; one that finds no room within
// produceBudgetWait is refused as busy (retryable) and counted, and room
// given back lets the next one in.
func TestProduceBudget(t *testing.T) {
	b := &Broker{cfg: DefaultConfig(), produceBudget: bytebudget.New(1 << 20)}
	b.cfg.MaxInflightProduceBytes = 1 << 20
	b.metrics = newMetrics(prometheus.NewRegistry(), b)
	req := func(n int) []ProducePartition {
		return []ProducePartition{{Topic: "t", Records: make([]byte, n)}}
	}
	ctx := context.Background()
	hold, err := b.Service().holdProduceBytes(ctx, req(768<<10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Service().holdProduceBytes(ctx, req(512<<10)); !errors.Is(err, ErrBusy) {
		t.Fatalf("a request past the budget: %v, want ErrBusy", err)
	}
	var m dto.Metric
	if err := b.metrics.produceBusy.Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		n := m.GetCounter().GetValue()
		t.Fatalf("refusals counted: %v, want 1", n)
	}
	hold.release()
	hold2, err := b.Service().holdProduceBytes(ctx, req(512<<10))
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	hold2.release()
}

// The produce budget counts decompressed bytes: a compressed batch holds
// what its records may decompress to (its size times the topic's
// max.compression.ratio) until it is validated, then its size until its
// acks. Counting its size, 1 MiB of 1 KiB zstd batches would have let the
// broker decompress 100 MiB at once.
func TestProduceBudgetCountsDecompressedBytes(t *testing.T) {
	b := &Broker{cfg: DefaultConfig(), produceBudget: bytebudget.New(1 << 20)}
	b.cfg.MaxInflightProduceBytes = 1 << 20
	b.metrics = newMetrics(prometheus.NewRegistry(), b)
	s := b.Service()
	ctx := context.Background()
	bomb := hostilebatch.ZstdBomb(8 << 20) // a few hundred bytes
	parts := []ProducePartition{{Topic: "t", Records: bomb}, {Topic: "t", Partition: 1, Records: make([]byte, 1000)}}
	lim := partlog.Limits{MaxBatchBytes: partlog.DefaultMaxBatchBytes, MaxCompressionRatio: 2500}
	charges := produceCharges(parts, func(pp ProducePartition) (partlog.Limits, bool) { return lim, pp.Partition == 0 })
	if want := []int64{int64(2500 * len(bomb)), 1000}; !slices.Equal(charges, want) {
		t.Fatalf("charges %v, want %v: the compressed batch its bound, the other (not served here) its size", charges, want)
	}

	first, err := s.holdBytes(ctx, []int{len(bomb), 1000}, charges)
	if err != nil {
		t.Fatal(err)
	}
	// The bound of the batch being validated leaves no room for 300 KiB...
	small := []ProducePartition{{Topic: "t", Records: make([]byte, 300<<10)}}
	if _, err := s.holdProduceBytes(ctx, small); !errors.Is(err, ErrBusy) {
		t.Fatalf("300 KiB beside a %d-byte batch held at %d: %v, want ErrBusy", len(bomb), charges[0], err)
	}
	// ...until it is validated: then it holds its size.
	first.validated(0)
	first.validated(1)
	second, err := s.holdProduceBytes(ctx, small)
	if err != nil {
		t.Fatalf("after the validation: %v", err)
	}
	second.release()
	first.release()
	if !b.produceBudget.TryAcquire(1 << 20) {
		t.Fatal("the budget is not whole again after every release")
	}
}

// The group coordinator's per-partition commit refusals go through the
// broker's table too (the group package maps no errors itself), and read exactly as before: same code and reason, not
// retryable.
func TestClassifyCommitRefusals(t *testing.T) {
	c := group.New(group.Config{Log: nopOffsetsLog{}, Topics: oneTopic{}, TickInterval: -1, PartitionError: partitionError})
	ctx := context.Background()
	if err := c.Load(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hb, err := c.Heartbeat(ctx, &brokerpb.GroupHeartbeatRequest{GroupId: "g", MemberId: "m1", SubscribedTopics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	member, err := c.Commit(ctx, &brokerpb.CommitOffsetsRequest{GroupId: "g", MemberId: "m1", MemberEpoch: hb.MemberEpoch,
		Offsets: []*brokerpb.OffsetCommit{{Topic: "t", Partition: 0, Offset: -3}, {Topic: "u", Partition: 0, Offset: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := c.Commit(ctx, &brokerpb.CommitOffsetsRequest{GroupId: "h",
		Offsets: []*brokerpb.OffsetCommit{{Topic: "t", Partition: 5, Offset: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		got    *brokerpb.PartitionError
		code   codes.Code
		reason string
	}{
		{"offset < 0", member.Results[0].Error, codes.InvalidArgument, rpcerror.ReasonInvalid},
		{"partition not held", member.Results[1].Error, codes.FailedPrecondition, rpcerror.ReasonStaleMemberEpoch},
		{"no such partition", admin.Results[0].Error, codes.NotFound, rpcerror.ReasonNotFound},
	} {
		if codes.Code(tc.got.GetCode()) != tc.code || tc.got.GetInfo().GetReason() != tc.reason || tc.got.GetInfo().GetRetryable() {
			t.Errorf("%s: %v, want %v %s not retryable", tc.name, tc.got, tc.code, tc.reason)
		}
	}
}

type nopOffsetsLog struct{}

func (nopOffsetsLog) Append(context.Context, []recordbatch.Record) error           { return nil }
func (nopOffsetsLog) Replay(context.Context, func(recordbatch.Record) error) error { return nil }

type oneTopic struct{}

func (oneTopic) Partitions(context.Context, string) (int32, error) { return 2, nil }
func (oneTopic) TopicNames(context.Context) ([]string, error)      { return nil, nil }
