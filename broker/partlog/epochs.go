package partlog

import "github.com/strata-log/strata/proto/brokerpb"

// maxLeaderEpochs bounds the epoch history a PartitionLog keeps. Dropping
// the oldest entries is safe (see EpochEnd): an epoch older than the first
// kept is answered with the first kept entry's start, which is past every
// offset such an epoch wrote.
const maxLeaderEpochs = 256

// withLeaderEpoch returns history with epoch starting at start appended
// (P10): entries wholly below logStart are dropped (one stays), an entry
// whose epoch wrote nothing (it starts where the new one does) is replaced,
// and at most maxLeaderEpochs are kept. history is not modified.
func withLeaderEpoch(history []*brokerpb.LeaderEpoch, epoch, start, logStart int64) []*brokerpb.LeaderEpoch {
	out := make([]*brokerpb.LeaderEpoch, 0, len(history)+1)
	for i, e := range history {
		if e.GetEpoch() >= epoch {
			break // a newer record than ours cannot be: Open refuses it
		}
		// The entry's epoch ends where the next one starts.
		end := start
		if i+1 < len(history) {
			end = min(end, history[i+1].GetStartOffset())
		}
		if end <= logStart && i+1 < len(history) {
			continue
		}
		out = append(out, e)
	}
	if n := len(out); n > 0 && out[n-1].GetStartOffset() >= start {
		out = out[:n-1]
	}
	out = append(out, &brokerpb.LeaderEpoch{Epoch: epoch, StartOffset: start})
	if len(out) > maxLeaderEpochs {
		out = out[len(out)-maxLeaderEpochs:]
	}
	return out
}

// epochEnd answers Kafka's OffsetForLeaderEpoch for requested over an
// epoch history whose last entry is the current owner's: the largest
// epoch at or below requested and the first offset after it (the next
// epoch's start, or hw for the current epoch). An epoch older than the
// history gets its own number and the first entry's start: everything it
// wrote lies below. An epoch at or above the current one gets the current
// epoch and hw. The answer is never past what a consumer of that epoch
// can have read, so it never makes one see a truncation Strata did not do.
func epochEnd(history []*brokerpb.LeaderEpoch, requested, hw int64) (epoch, end int64) {
	n := len(history)
	if n == 0 || requested >= history[n-1].GetEpoch() {
		if n > 0 {
			return history[n-1].GetEpoch(), hw
		}
		return requested, hw
	}
	if requested < history[0].GetEpoch() {
		return requested, history[0].GetStartOffset()
	}
	i := n - 1
	for history[i].GetEpoch() > requested {
		i--
	}
	return history[i].GetEpoch(), history[i+1].GetStartOffset()
}

// EpochEnd is epochEnd over the log's history and high watermark: the
// end offset of the requested owner epoch, for OffsetForLeaderEpoch.
func (l *Log) EpochEnd(requested int64) (epoch, end int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return epochEnd(l.mu.pl.GetLeaderEpochs(), requested, l.mu.hw)
}

// Epoch is the owner epoch the log was opened with: stamped on every batch
// it writes (Kafka's partition leader epoch).
func (l *Log) Epoch() int64 { return l.cfg.Epoch }
