package ledger

import (
	"fmt"

	"github.com/strata-log/strata/proto/ledgerpb"
)

// The striping arithmetic every part of the protocol shares (writer,
// recovery, reader): entry e of a fragment goes to the write set of Qw
// consecutive bookies of the fragment's ensemble starting at e mod E.

// writeSet returns the write set of entryID in ensemble.
func writeSet(ensemble []string, entryID int64, writeQuorum int) []string {
	return appendWriteSet(make([]string, 0, writeQuorum), ensemble, entryID, writeQuorum)
}

// appendWriteSet appends the write set of entryID in ensemble to dst.
func appendWriteSet(dst, ensemble []string, entryID int64, writeQuorum int) []string {
	n := len(ensemble)
	start := int(entryID % int64(n))
	for i := range writeQuorum {
		dst = append(dst, ensemble[(start+i)%n])
	}
	return dst
}

// writeSetBuf is room on the stack for a write set of the usual quorums,
// for appendWriteSet: the writer looks at a few write sets for every
// answer from a bookie, and they need not be allocated.
type writeSetBuf [8]string

// fragmentIndex returns the index of the fragment holding entryID: the last
// one starting at or before it. md must be valid (validateMetadata).
func fragmentIndex(md *ledgerpb.LedgerMetadata, entryID int64) int {
	for i := len(md.Fragments) - 1; i > 0; i-- {
		if md.Fragments[i].FirstEntryId <= entryID {
			return i
		}
	}
	return 0
}

// entryWriteSet is entryID's write set according to md.
func entryWriteSet(md *ledgerpb.LedgerMetadata, entryID int64) []string {
	return writeSet(md.Fragments[fragmentIndex(md, entryID)].Bookies, entryID, int(md.WriteQuorum))
}

// appendEntryWriteSet appends entryID's write set according to md to dst.
func appendEntryWriteSet(dst []string, md *ledgerpb.LedgerMetadata, entryID int64) []string {
	return appendWriteSet(dst, md.Fragments[fragmentIndex(md, entryID)].Bookies, entryID, int(md.WriteQuorum))
}

// lastEnsemble is the ensemble of md's last fragment.
func lastEnsemble(md *ledgerpb.LedgerMetadata) []string {
	return md.Fragments[len(md.Fragments)-1].Bookies
}

// absentQuorum is how many members of a write set must explicitly say "no
// such entry" before recovery may call the entry absent, and how many
// members of each write set must be fenced before fencing is complete:
// Qw-Qa+1. It intersects every ack quorum ((Qw-Qa+1)+Qa > Qw), so an
// acknowledged entry can never be called absent, and a fenced write set
// leaves the old writer at most Qa-1 bookies to reach.
func absentQuorum(md *ledgerpb.LedgerMetadata) int {
	return int(md.WriteQuorum-md.AckQuorum) + 1
}

// validateMetadata checks the shape the protocol relies on.
func validateMetadata(md *ledgerpb.LedgerMetadata) error {
	if md == nil {
		return fmt.Errorf("%w: nil metadata", ErrInvalid)
	}
	if err := validateQuorums(int(md.EnsembleSize), int(md.WriteQuorum), int(md.AckQuorum)); err != nil {
		return fmt.Errorf("ledger %d: %w", md.Id, err)
	}
	if len(md.Fragments) == 0 || md.Fragments[0].FirstEntryId != 0 {
		return fmt.Errorf("%w: ledger %d: fragments must start at entry 0", ErrInvalid, md.Id)
	}
	for i, f := range md.Fragments {
		if len(f.Bookies) != int(md.EnsembleSize) {
			return fmt.Errorf("%w: ledger %d: fragment %d has %d bookies, ensemble size %d",
				ErrInvalid, md.Id, i, len(f.Bookies), md.EnsembleSize)
		}
		if i > 0 && f.FirstEntryId <= md.Fragments[i-1].FirstEntryId {
			return fmt.Errorf("%w: ledger %d: fragment %d starts at %d, not after %d",
				ErrInvalid, md.Id, i, f.FirstEntryId, md.Fragments[i-1].FirstEntryId)
		}
	}
	return nil
}
