package group

import (
	"fmt"
	"slices"
	"time"

	"github.com/strata-log/strata/recordbatch"
)

// What the writer deletes: offsets past OffsetsRetention, and how many
// tombstones one write may hold.

// offsetsExpiry is what OffsetsRetention removes of a group at one Tick:
// as many expired offsets as one write holds (tombstonePrefix); the next
// Tick takes the rest.
type offsetsExpiry struct {
	tps []TopicPartition
	// whole: the group goes too (nothing of it is left, and it has been
	// empty for the whole retention, or its last offsets expire now).
	whole bool
}

func (e offsetsExpiry) any() bool { return len(e.tps) > 0 || e.whole }

// offsetsExpiryLocked returns what expires of g at now: the offsets older
// than OffsetsRetention of a group without members, and the group with
// them when nothing is left.
// REQUIRES: c.mu held.
func (wr *writer) offsetsExpiryLocked(g *group, now time.Time) offsetsExpiry {
	var e offsetsExpiry
	if g.members() > 0 || g.emptySince.IsZero() {
		return e
	}
	horizon := now.Add(-wr.c.cfg.OffsetsRetention).UnixMilli()
	for tp, v := range g.offsets {
		if v.GetCommitTimestampMs() < horizon {
			e.tps = append(e.tps, tp)
		}
	}
	slices.SortFunc(e.tps, compareTP)
	e.whole = len(e.tps) == len(g.offsets) && (len(e.tps) > 0 || !now.Before(g.emptySince.Add(wr.c.cfg.OffsetsRetention)))
	if n := wr.tombstonePrefix(g, e.tps); n < len(e.tps) {
		e.tps, e.whole = e.tps[:n], false
	}
	return e
}

// tombstoneBytes is what the tombstone of g's offset of tp adds to a
// batch, at most (recordBytes of its key: the group id, the topic, a
// partition and proto tags).
func tombstoneBytes(g *group, tp TopicPartition) int {
	return recordBytes(recordbatch.Record{Key: make([]byte, len(g.id)+len(tp.Topic)+16)})
}

// tombstonePrefix returns how many of tps (at least one) one write of g's
// offset tombstones takes: what fits in half the OffsetsLog's batch bound,
// beside the group's metadata (at most the other half: limitsNow) and its
// tombstone. A group with more offsets is deleted or expired in several
// writes: all of them in one batch would pass max.message.bytes (from
// about 13,000 offsets at the default), and the write could never succeed.
// REQUIRES: c.mu held.
func (wr *writer) tombstonePrefix(g *group, tps []TopicPartition) int {
	room := wr.maxBatchBytes()/2 - batchHeaderBytes - tombstoneBytes(g, TopicPartition{})
	for i, tp := range tps {
		if room -= tombstoneBytes(g, tp); room < 0 && i > 0 {
			return i
		}
	}
	return len(tps)
}

// groupWriteBytesLocked estimates what Tick writes of g: its metadata if
// changed, and a tombstone per expiring offset.
// REQUIRES: c.mu held.
func (wr *writer) groupWriteBytesLocked(g *group, now time.Time) int {
	size := 0
	wr.changedLocked(g)
	if g.version > g.persisted {
		if r, err := metadataRecord(g.id, g.metadata(), 0); err == nil {
			size += recordBytes(r)
		}
	}
	e := wr.offsetsExpiryLocked(g, now)
	for _, tp := range e.tps {
		size += tombstoneBytes(g, tp)
	}
	return size
}

// expireOffsetsWrite is Tick's write of g: tombstones for its expired
// offsets, and for the group when nothing of it is left (W5).
func (wr *writer) expireOffsetsWrite(g *group, now time.Time) *write {
	return newWrite(g, func() prepared {
		e := wr.offsetsExpiryLocked(g, now)
		if !e.any() {
			return prepared{}
		}
		var p prepared
		nowMs := now.UnixMilli()
		for _, tp := range e.tps {
			r, err := offsetRecord(g.id, tp, nil, nowMs)
			if err != nil {
				return prepared{refusal: err}
			}
			p.records = append(p.records, r)
		}
		if e.whole {
			r, err := metadataRecord(g.id, nil, nowMs)
			if err != nil {
				return prepared{refusal: err}
			}
			p.records, p.metadata = append(p.records, r), true
		}
		p.apply = func() {
			for _, tp := range e.tps {
				delete(g.offsets, tp)
			}
			if e.whole {
				wr.deletedLocked(g)
			}
			wr.c.log.Info("expired offsets of an empty group", "group", g.id, "offsets", len(e.tps), "group_deleted", e.whole)
		}
		return p
	})
}

// deletedLocked applies a metadata tombstone of g now durable: the log
// has no metadata of the group any more. Unless members joined since it
// was decided (their metadata is written next), the group is at epoch 0
// like after a replay (of no kind), and goes once its lane is idle.
// REQUIRES: c.mu held.
func (wr *writer) deletedLocked(g *group) {
	g.durable, g.durableCounts = nil, nil
	if g.members() == 0 {
		g.consumer.epoch = 0
		g.consumer.partitionCounts = map[string]int32{}
		if g.classic != nil {
			g.classic.failParked(fmt.Errorf("%w: group %q was deleted", ErrUnknownMember, g.id))
			g.classic = nil
		}
	}
}

// maxBatchBytes is the OffsetsLog's batch bound, or the default
// max.message.bytes when it does not say.
func (wr *writer) maxBatchBytes() int {
	if b, ok := wr.c.cfg.Log.(BatchLimiter); ok && b.MaxBatchBytes() > 0 {
		return b.MaxBatchBytes()
	}
	return defaultMaxBatchBytes
}

// defaultMaxBatchBytes is Kafka's (and Strata's) default max.message.bytes.
const defaultMaxBatchBytes = 1048588
