package stream

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-log/strata/client"
)

// CommitInterval is how often a group member commits what it printed.
const CommitInterval = 5 * time.Second

// GroupMember is `strata consume -g`'s membership of a consumer group: a
// Source over the partitions the coordinator assigns that commits
// exactly what was printed (S2): every CommitInterval (from Loop's
// BeforePoll), when a partition is revoked, and on Close. Assignment
// changes and commit failures are reported to its log writer.
type GroupMember struct {
	*client.GroupConsumer
	group      string
	log        io.Writer
	printed    *printedPositions
	lastCommit time.Time
}

// JoinGroup joins group for topic; partitions with nothing committed
// start at reset. log receives one "strata: group ..." line per event.
func JoinGroup(c *client.Client, group, topic string, reset client.Offset, log io.Writer) (*GroupMember, error) {
	m := &GroupMember{group: group, log: log, printed: newPrintedPositions(), lastCommit: time.Now()}
	// The callbacks may run before NewGroupConsumer returns.
	var member atomic.Pointer[client.GroupConsumer]
	gc, err := c.NewGroupConsumer(client.GroupConfig{
		Group:             group,
		Topics:            []string{topic},
		DisableAutoCommit: true, // commit what was printed, not what was polled
		ResetOffset:       reset,
		OnAssigned:        func(_ context.Context, tps []client.TopicPartition) { m.report("assigned", tps) },
		OnRevoked: func(ctx context.Context, tps []client.TopicPartition) {
			offsets := m.printed.take(tps)
			if gc := member.Load(); gc == nil {
				fmt.Fprintf(log, "strata: group %s: revoked before start: not committed\n", group)
			} else if err := gc.CommitOffsets(ctx, offsets); err != nil {
				fmt.Fprintf(log, "strata: group %s: commit on revoke: %v\n", group, err)
			}
			m.report("revoked", tps)
		},
		OnLost: func(_ context.Context, tps []client.TopicPartition) {
			m.printed.take(tps)
			m.report("lost", tps)
		},
	})
	if err != nil {
		return nil, err
	}
	member.Store(gc)
	m.GroupConsumer = gc
	return m, nil
}

func (m *GroupMember) report(what string, tps []client.TopicPartition) {
	var s []string
	for _, tp := range tps {
		s = append(s, tp.String())
	}
	fmt.Fprintf(m.log, "strata: group %s: %s %s\n", m.group, what, strings.Join(s, ","))
}

// Printed records that r was printed: its partition's commit position is
// now r.Offset+1.
func (m *GroupMember) Printed(r *client.Record) { m.printed.printed(r) }

// CommitIfDue commits the printed positions of the owned partitions once
// CommitInterval passed since the last commit.
func (m *GroupMember) CommitIfDue(ctx context.Context) {
	if time.Since(m.lastCommit) < CommitInterval {
		return
	}
	if err := m.CommitOffsets(ctx, m.printed.snapshot(m.Assignment())); err != nil {
		fmt.Fprintf(m.log, "strata: group %s: commit: %v\n", m.group, err)
	}
	m.lastCommit = time.Now()
}

// Leave leaves the group within timeout. Close runs OnRevoked for what
// the member owns: that commits what was printed.
func (m *GroupMember) Leave(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := m.GroupConsumer.Close(ctx); err != nil {
		fmt.Fprintf(m.log, "strata: group %s: leave: %v\n", m.group, err)
	}
}

// AtEnd reports whether the member owns partitions and each is at its
// high watermark.
func (m *GroupMember) AtEnd() bool {
	return groupAtEnd(m.Assignment(), m.Position, m.HighWatermark)
}

func groupAtEnd(owned []client.TopicPartition, position, highWatermark func(client.TopicPartition) (int64, bool)) bool {
	if len(owned) == 0 {
		return false
	}
	for _, tp := range owned {
		pos, ok := position(tp)
		hw, known := highWatermark(tp)
		if !ok || !known || pos < hw {
			return false
		}
	}
	return true
}

// printedPositions is, per partition, the offset after the last record
// printed: what a member commits.
type printedPositions struct {
	mu struct {
		sync.Mutex
		pos map[client.TopicPartition]int64
	}
}

func newPrintedPositions() *printedPositions {
	p := &printedPositions{}
	p.mu.pos = map[client.TopicPartition]int64{}
	return p
}

func (p *printedPositions) printed(r *client.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.pos[client.TopicPartition{Topic: r.Topic, Partition: r.Partition}] = r.Offset + 1
}

// snapshot returns the positions of the owned partitions.
func (p *printedPositions) snapshot(owned []client.TopicPartition) map[client.TopicPartition]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[client.TopicPartition]int64, len(owned))
	for _, tp := range owned {
		if off, ok := p.mu.pos[tp]; ok {
			out[tp] = off
		}
	}
	return out
}

// take returns the positions of tps and forgets them.
func (p *printedPositions) take(tps []client.TopicPartition) map[client.TopicPartition]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[client.TopicPartition]int64{}
	for _, tp := range tps {
		if off, ok := p.mu.pos[tp]; ok {
			out[tp] = off
			delete(p.mu.pos, tp)
		}
	}
	return out
}
