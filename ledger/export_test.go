package ledger

import (
	"context"

	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// Test access to the recovery machine, so external tests (which can use
// ledgertest) can drive it through interleavings of their choosing.

// RecoveryOp is a recoveryOp with exported fields.
type RecoveryOp struct {
	Kind    string // "fence", "read", "recovery-add"
	Bookie  string
	Entry   int64
	Fence   bool
	Payload []byte
	LAC     int64
	Attempt int
}

// TestRecovery wraps a recoveryMachine.
type TestRecovery struct{ m *recoveryMachine }

func NewTestRecovery(md *ledgerpb.LedgerMetadata) (*TestRecovery, error) {
	m, err := newRecoveryMachine(md)
	if err != nil {
		return nil, err
	}
	m.keepFound = true
	return &TestRecovery{m: m}, nil
}

// VisitRecovered is what RecoverVisit hands its visit after the close.
func (r *TestRecovery) VisitRecovered(ctx context.Context, env Env, closed *ledgerpb.LedgerMetadata, visit func(Entry) error) error {
	return visitRecovered(ctx, env, closed, r.m, visit)
}

func exportOps(ops []recoveryOp) []RecoveryOp {
	out := make([]RecoveryOp, len(ops))
	for i, op := range ops {
		out[i] = RecoveryOp{Kind: op.kind.String(), Bookie: op.bookie, Entry: op.entry,
			Fence: op.fence, Payload: op.payload, LAC: op.lac, Attempt: op.attempt}
	}
	return out
}

func (r *TestRecovery) Begin() []RecoveryOp { return exportOps(r.m.begin()) }

func (r *TestRecovery) OnFence(op RecoveryOp, resp *bookiepb.FenceResponse, err error) []RecoveryOp {
	return exportOps(r.m.onFence(op.Bookie, resp, err, op.Attempt))
}

func (r *TestRecovery) OnRead(op RecoveryOp, resp *bookiepb.ReadEntryResponse, err error) []RecoveryOp {
	return exportOps(r.m.onRead(op.Bookie, op.Entry, resp, err))
}

func (r *TestRecovery) OnAdd(op RecoveryOp, resp *bookiepb.AddResponse, err error) []RecoveryOp {
	return exportOps(r.m.onAdd(op.Bookie, op.Entry, resp, err))
}

func (r *TestRecovery) Done() bool { return r.m.done() }

// FencingDone reports whether fencing is done: Proceed is then due.
func (r *TestRecovery) FencingDone() bool { return r.m.fencingDone }

func (r *TestRecovery) ReadStart() int64 { return r.m.readStart() }

func (r *TestRecovery) Proceed() []RecoveryOp { return exportOps(r.m.proceed()) }

func (r *TestRecovery) Probe(e int64) []RecoveryOp { return exportOps(r.m.probe(e)) }

func (r *TestRecovery) Probed(e int64) (decided, found bool) {
	decided, found, _ = r.m.probed(e)
	return decided, found
}

func (r *TestRecovery) Distrust(absent int64) map[string]int64 { return r.m.distrust(absent) }

func (r *TestRecovery) Result() (last, start, length int64, err error) { return r.m.result() }

var (
	MarkInRecovery = markInRecovery
	CloseRecovered = closeRecovered
	PrefixLength   = prefixLength
	EntryWriteSet  = entryWriteSet
)
