package history

import (
	"fmt"
	"sync"
	"time"
)

// Outcome is what a producer was told about one produce attempt.
type Outcome uint8

const (
	// Unknown means the record may or may not be stored: a timeout,
	// UNKNOWN_OUTCOME, a connection lost before the answer. It is the zero
	// value, so an attempt whose outcome was never set is one the checker
	// makes no claim about.
	Unknown Outcome = iota
	// OK means the broker acknowledged the record at Attempt.Offset.
	OK
	// Failed means the producer was told the record was definitely not
	// stored.
	Failed
)

// String returns "unknown", "ok" or "failed".
func (o Outcome) String() string {
	switch o {
	case Unknown:
		return "unknown"
	case OK:
		return "ok"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Attempt is one produce call of one record and what the producer was told.
type Attempt struct {
	Topic     string
	Partition int32
	// Key is the record's key. One producer owns a key.
	Key string
	// Seq numbers the producer's attempts of Key: 1, 2, 3..., increasing with
	// every attempt, whatever the outcome of the previous one.
	Seq int64
	// Value is unique to this attempt in the whole history (e.g. "key/seq"):
	// a record read back is identified by its value. Every value is kept,
	// so values should be short (tens of bytes). The recorder copies it;
	// the caller may reuse the slice.
	Value []byte
	// Start is when the produce call began, End when its outcome was known.
	Start, End time.Time
	Outcome    Outcome
	// Offset is the offset the broker acknowledged; read only when Outcome
	// is OK.
	Offset int64
}

// Read is one record seen by a reader: a tail reader, a group member or
// the final read.
type Read struct {
	Topic     string
	Partition int32
	Offset    int64
	// Key and Value are as read; the recorder copies them, so the caller
	// may reuse the slices.
	Key   []byte
	Value []byte
	// Reader names who read it, for examples ("tail-2", "group-a/m3",
	// "final").
	Reader string
	Time   time.Time
	// Final marks a record of the final read: every partition read from the
	// log start to its end after the faults healed. Lost is judged against
	// the final read alone.
	Final bool
}

// Poll is one fetch of one partition by a reader, for read availability.
type Poll struct {
	Topic     string
	Partition int32
	// Start is when the fetch was sent, End when it answered or failed.
	Start, End time.Time
	// OK is true when the fetch answered without error, with or without
	// records.
	OK bool
}

// Delivery is one record handed to a member of a consumer group.
type Delivery struct {
	Group  string
	Member string
	// Generation is the generation (classic protocol) or member epoch
	// (KIP-848) under which the member owned the partition. Only equality
	// matters.
	Generation int64
	Topic      string
	Partition  int32
	Offset     int64
}

// Commit is a committed offset of a group's partition: one a member
// committed (Member set, recorded only when the commit succeeded) or one the
// runner observed by polling the group's committed offsets (Member empty).
type Commit struct {
	Group     string
	Topic     string
	Partition int32
	// Offset is the committed offset, or -1 when the group had none for the
	// partition.
	Offset int64
	Member string
	// Start and End bound the call that made or observed the commit; the
	// commit took effect, or was seen, somewhere in between. A zero End
	// means End equals Start.
	Start, End time.Time
}

// Fault is one fault the nemesis injected.
type Fault struct {
	// Kind says what was done: "kill", "pause", "partition-isolate",
	// "disk-full"...; the report counts faults by kind.
	Kind string `json:"kind"`
	// Target says to what ("broker-2", "bookie-1 from metad-0"...).
	Target string    `json:"target"`
	Start  time.Time `json:"start"`
	// End is when the fault was healed; zero if it never was.
	End time.Time `json:"end"`
}

// Recorder collects a history. Its methods are safe for concurrent use and
// cheap: each takes a mutex, looks its strings up and appends one entry.
// The zero value is not usable; use NewRecorder.
//
// Times are best taken with time.Now(), whose monotonic reading the
// recorder uses. A zero time in an Attempt, Read, Poll, Commit Start or
// Fault Start means the moment it is recorded.
type Recorder struct {
	// origin is when the recorder was made; times are kept as durations
	// from it, which uses the monotonic clock when callers pass time.Now().
	origin time.Time

	mu struct {
		sync.Mutex
		strs       stringTable
		parts      partitionTable
		attempts   []attempt
		reads      []read
		polls      []poll
		deliveries map[deliveryKey][]memberDeliveries
		commits    []commit
		faults     []Fault
		compacted  map[string]bool
	}
}

// NewRecorder returns an empty Recorder whose history starts now.
func NewRecorder() *Recorder {
	return newRecorderAt(time.Now())
}

func newRecorderAt(origin time.Time) *Recorder {
	r := &Recorder{origin: origin}
	r.mu.strs.ids = make(map[string]uint32)
	r.mu.parts.ids = make(map[topicPartition]uint32)
	r.mu.deliveries = make(map[deliveryKey][]memberDeliveries)
	r.mu.compacted = make(map[string]bool)
	return r
}

// RecordAttempt records a produce attempt once its outcome is known.
// Attempts whose outcome never became known are recorded as Unknown.
func (r *Recorder) RecordAttempt(a Attempt) {
	start := r.since(a.Start)
	end := max(r.since(a.End), start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.attempts = append(r.mu.attempts, attempt{
		seq:     a.Seq,
		offset:  a.Offset,
		start:   start,
		end:     end,
		part:    r.mu.parts.id(&r.mu.strs, a.Topic, a.Partition),
		key:     r.mu.strs.id(a.Key),
		value:   r.mu.strs.bytesID(a.Value),
		outcome: a.Outcome,
	})
}

// RecordRead records a record seen by a reader.
func (r *Recorder) RecordRead(rd Read) {
	at := r.since(rd.Time)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.reads = append(r.mu.reads, read{
		offset: rd.Offset,
		at:     at,
		part:   r.mu.parts.id(&r.mu.strs, rd.Topic, rd.Partition),
		key:    r.mu.strs.bytesID(rd.Key),
		value:  r.mu.strs.bytesID(rd.Value),
		reader: r.mu.strs.id(rd.Reader),
		final:  rd.Final,
	})
}

// RecordPoll records a fetch of one partition, for read availability.
func (r *Recorder) RecordPoll(p Poll) {
	start := r.since(p.Start)
	end := max(r.since(p.End), start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.polls = append(r.mu.polls, poll{
		start: start,
		end:   end,
		part:  r.mu.parts.id(&r.mu.strs, p.Topic, p.Partition),
		ok:    p.OK,
	})
}

// RecordDelivery records a record handed to a group member. Deliveries are
// kept summarized per group, generation, partition and member.
func (r *Recorder) RecordDelivery(d Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := deliveryKey{
		group:      r.mu.strs.id(d.Group),
		part:       r.mu.parts.id(&r.mu.strs, d.Topic, d.Partition),
		generation: d.Generation,
	}
	member := r.mu.strs.id(d.Member)
	members := r.mu.deliveries[k]
	for i := range members {
		if members[i].member == member {
			members[i].add(d.Offset)
			return
		}
	}
	r.mu.deliveries[k] = append(members, memberDeliveries{
		member: member, first: d.Offset, last: d.Offset, count: 1,
	})
}

// RecordCommit records a committed offset made by a member or observed by
// polling.
func (r *Recorder) RecordCommit(c Commit) {
	start := r.since(c.Start)
	end := start
	if !c.End.IsZero() {
		end = max(r.since(c.End), start)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.commits = append(r.mu.commits, commit{
		offset: c.Offset,
		start:  start,
		end:    end,
		group:  r.mu.strs.id(c.Group),
		part:   r.mu.parts.id(&r.mu.strs, c.Topic, c.Partition),
		member: r.mu.strs.id(c.Member),
	})
}

// RecordFault records a fault, normally once it has been healed. A zero
// Start is now.
func (r *Recorder) RecordFault(f Fault) {
	if f.Start.IsZero() {
		f.Start = time.Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.faults = append(r.mu.faults, f)
}

// MarkCompacted says that topic is compacted: a record of a key may be
// replaced by a later record of the same key, so only the latest
// acknowledged value of each key must survive to the final read.
func (r *Recorder) MarkCompacted(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.compacted[topic] = true
}

// since returns t as nanoseconds from the recorder's origin; a zero t is
// now.
func (r *Recorder) since(t time.Time) int64 {
	if t.IsZero() {
		return int64(time.Since(r.origin))
	}
	return int64(t.Sub(r.origin))
}

// attempt is an Attempt as kept: strings by their id in the string table,
// the topic and partition by their id in the partition table, times in
// nanoseconds from the recorder's origin.
type attempt struct {
	seq, offset, start, end int64
	part, key, value        uint32
	outcome                 Outcome
}

// read is a Read as kept (see attempt).
type read struct {
	offset, at               int64
	part, key, value, reader uint32
	final                    bool
}

// poll is a Poll as kept (see attempt).
type poll struct {
	start, end int64
	part       uint32
	ok         bool
}

// commit is a Commit as kept (see attempt).
type commit struct {
	offset, start, end  int64
	group, part, member uint32
}

type deliveryKey struct {
	group, part uint32
	generation  int64
}

// memberDeliveries summarizes what one member was delivered of one
// partition in one generation.
type memberDeliveries struct {
	member      uint32
	first, last int64 // lowest and highest offset delivered
	count       int
}

func (m *memberDeliveries) add(offset int64) {
	m.first = min(m.first, offset)
	m.last = max(m.last, offset)
	m.count++
}

// stringTable keeps each distinct string once and names it by a dense id.
type stringTable struct {
	ids   map[string]uint32
	names []string
}

func (t *stringTable) id(s string) uint32 {
	if id, ok := t.ids[s]; ok {
		return id
	}
	return t.add(s)
}

// bytesID is id for a byte slice; it copies b only the first time.
func (t *stringTable) bytesID(b []byte) uint32 {
	if id, ok := t.ids[string(b)]; ok {
		return id
	}
	return t.add(string(b))
}

func (t *stringTable) add(s string) uint32 {
	id := uint32(len(t.names))
	t.ids[s] = id
	t.names = append(t.names, s)
	return id
}

type topicPartition struct {
	topic     string
	partition int32
}

// partitionTable names each topic partition by a dense id.
type partitionTable struct {
	ids   map[topicPartition]uint32
	parts []partitionName
}

type partitionName struct {
	topic     uint32 // in the string table
	partition int32
}

func (t *partitionTable) id(strs *stringTable, topic string, partition int32) uint32 {
	k := topicPartition{topic, partition}
	if id, ok := t.ids[k]; ok {
		return id
	}
	id := uint32(len(t.parts))
	t.ids[k] = id
	t.parts = append(t.parts, partitionName{topic: strs.id(topic), partition: partition})
	return id
}
