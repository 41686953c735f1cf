package group

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/strata-log/strata/proto/brokerpb"
)

// simClient is a well-behaved consumer: it owns exactly the assignment of
// the last response it received (revoking what is missing, taking what is
// new), drops everything when fenced, unknown, or when its own session has
// run out without a successful heartbeat, and before leaving.
type simClient struct {
	name   string
	id     string // member id; "" before the first join
	epoch  int32
	joined bool
	subs   []string
	owned  tpSet
	lastOK time.Time // when the last heartbeat that got a response was sent
}

func (s *simClient) drop() {
	s.owned = tpSet{}
	s.joined = false
}

type sim struct {
	t       *testing.T
	rng     *rand.Rand
	e       *env
	topics  []string
	clients []*simClient
	next    int
	stats   map[string]int
}

func (s *sim) heartbeat(cl *simClient, loseResponse bool) {
	epoch, subs := cl.epoch, []string(nil)
	if !cl.joined {
		epoch, subs = 0, cl.subs
	} else if s.rng.IntN(10) == 0 {
		subs = cl.subs // resent unchanged now and then
	}
	now := s.e.clock.Now()
	resp, err := s.e.hb("g", cl.id, epoch, subs, cl.owned)
	switch {
	case errors.Is(err, ErrFencedMemberEpoch):
		s.stats["fenced"]++
		cl.drop()
		return
	case errors.Is(err, ErrUnknownMember):
		s.stats["unknown"]++
		cl.drop()
		cl.id = ""
		return
	case err != nil:
		s.stats["hb-error"]++
		return // no response: try again later
	case loseResponse:
		s.stats["lost"]++
		return
	}
	cl.id, cl.epoch, cl.joined, cl.lastOK = resp.MemberId, resp.MemberEpoch, true, now
	assignment := tpSetFromProto(resp.Assignment)
	pending := tpSetFromProto(resp.Pending)
	if len(assignment.intersect(pending)) > 0 {
		s.t.Fatalf("assignment %v and pending %v overlap", assignment.sorted(), pending.sorted())
	}
	cl.owned = assignment
}

func (s *sim) randomSubs() []string {
	var out []string
	for _, t := range s.topics {
		if s.rng.IntN(2) == 0 {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		out = []string{s.topics[s.rng.IntN(len(s.topics))]}
	}
	return out
}

func (s *sim) pick() *simClient {
	if len(s.clients) == 0 {
		return nil
	}
	return s.clients[s.rng.IntN(len(s.clients))]
}

func (s *sim) remove(cl *simClient) {
	s.clients = slices.DeleteFunc(s.clients, func(c *simClient) bool { return c == cl })
}

// checkInvariant: no partition is owned by two live clients.
func (s *sim) checkInvariant(step int, op string) {
	owner := map[TopicPartition]string{}
	for _, cl := range s.clients {
		for tp := range cl.owned {
			if o, dup := owner[tp]; dup {
				s.t.Fatalf("step %d (%s): %s/%d owned by %s and %s", step, op, tp.Topic, tp.Partition, o, cl.name)
			}
			owner[tp] = cl.name
		}
	}
}

// selfExpire: a client whose session ran out drops its partitions (it
// cannot know whether the coordinator still counts it as a member).
func (s *sim) selfExpire() {
	now := s.e.clock.Now()
	for _, cl := range s.clients {
		if cl.joined && !now.Before(cl.lastOK.Add(testSession)) {
			s.stats["self-expired"]++
			cl.drop()
		}
	}
}

func (s *sim) step(step int) string {
	switch r := s.rng.IntN(100); {
	case r < 50:
		if cl := s.pick(); cl != nil {
			s.heartbeat(cl, s.rng.IntN(10) == 0)
		}
		return "heartbeat"
	case r < 65:
		s.e.clock.Advance(time.Duration(s.rng.IntN(3000)) * time.Millisecond)
		s.selfExpire()
		return "advance"
	case r < 70:
		if len(s.clients) < 8 {
			s.next++
			cl := &simClient{name: fmt.Sprintf("c%d", s.next), subs: s.randomSubs(), owned: tpSet{}}
			if s.rng.IntN(2) == 0 {
				cl.id = cl.name // client-chosen member id
			}
			s.clients = append(s.clients, cl)
			s.heartbeat(cl, s.rng.IntN(10) == 0)
		}
		return "join"
	case r < 73:
		if cl := s.pick(); cl != nil {
			cl.drop() // revoke everything, then say goodbye
			s.remove(cl)
			if cl.id != "" {
				_, _ = s.e.hb("g", cl.id, -1, nil, nil)
			}
		}
		return "leave"
	case r < 76:
		if cl := s.pick(); cl != nil {
			cl.drop() // the process died: it owns nothing any more
			s.remove(cl)
		}
		return "crash"
	case r < 79:
		if cl := s.pick(); cl != nil {
			s.resubscribe(cl)
		}
		return "subscribe"
	case r < 86:
		if cl := s.pick(); cl != nil && cl.joined && len(cl.owned) > 0 {
			s.commitOwned(step, cl)
		}
		return "commit"
	case r < 90:
		if err := s.e.c.Tick(context.Background(), s.e.clock.Now()); err != nil && !errors.Is(err, errInjected) {
			s.t.Fatal(err)
		}
		return "tick"
	case r < 92:
		t := s.topics[s.rng.IntN(len(s.topics))]
		n, _ := s.e.topics.Partitions(context.Background(), t)
		s.e.topics.set(t, n+int32(s.rng.IntN(3)))
		return "add-partitions"
	case r < 95:
		s.e.log.mu.Lock()
		s.e.log.failNext = 1
		s.e.log.mu.Unlock()
		return "fail-next-append"
	default:
		s.e.failover()
		s.stats["failover"]++
		return "failover"
	}
}

// resubscribe changes cl's subscription, told at once when it is joined.
func (s *sim) resubscribe(cl *simClient) {
	cl.subs = s.randomSubs()
	if !cl.joined {
		return
	}
	resp, err := s.e.hb("g", cl.id, cl.epoch, cl.subs, cl.owned)
	if err != nil {
		cl.drop()
		return
	}
	cl.epoch, cl.lastOK = resp.MemberEpoch, s.e.clock.Now()
	cl.owned = tpSetFromProto(resp.Assignment)
}

// commitOwned commits every partition cl owns: none may be refused.
func (s *sim) commitOwned(step int, cl *simClient) {
	var offsets []*brokerpb.OffsetCommit
	for _, tp := range cl.owned.sorted() {
		offsets = append(offsets, oc(tp.Topic, tp.Partition, int64(step)))
	}
	resp, err := commit(s.e.c, "g", cl.id, cl.epoch, offsets...)
	if err != nil {
		s.stats["commit-refused"]++
		return
	}
	for _, res := range resp.Results {
		if res.Error != nil {
			s.t.Fatalf("step %d: commit by %s (epoch %d) of an owned partition refused: %v", step, cl.name, cl.epoch, res)
		}
	}
	s.stats["commit"]++
}

// TestRandomizedNoDoubleOwnership drives random joins, leaves, crashes,
// subscription and partition-count changes, lost responses, failing appends
// and coordinator failovers, and checks after every step that no partition is
// owned by two clients; then lets the group settle and checks it converges to
// a balanced, complete, stable assignment.
func TestRandomizedNoDoubleOwnership(t *testing.T) {
	seeds, steps := 30, 400
	if testing.Short() {
		seeds = 5
	}
	total := map[string]int{}
	for seed := 0; seed < seeds; seed++ {
		s := &sim{
			t:      t,
			rng:    rand.New(rand.NewPCG(uint64(seed), 7)),
			e:      newEnv(t, newTopics("a", 6, "b", 3, "c", 1)),
			topics: []string{"a", "b", "c"},
			stats:  total,
		}
		for i := 0; i < steps; i++ {
			op := s.step(i)
			s.checkInvariant(i, op)
		}
		s.settle(seed)
	}
	t.Logf("stats over %d seeds: %v", seeds, total)
}

// settle heartbeats every client once per simulated second, without faults,
// until ghosts (lost joins, crashed clients) expired and the group is stable.
func (s *sim) settle(seed int) {
	s.e.log.mu.Lock()
	s.e.log.failNext = 0
	s.e.log.mu.Unlock()
	for round := 0; round < 40; round++ {
		s.e.clock.Advance(time.Second)
		for _, cl := range s.clients {
			s.heartbeat(cl, false)
		}
		s.checkInvariant(-round, "settle")
		if err := s.e.c.Tick(context.Background(), s.e.clock.Now()); err != nil {
			s.t.Fatal(err)
		}
	}
	d := describe(s.t, s.e.c, "g")
	if len(s.clients) == 0 {
		if len(d.Members) != 0 {
			s.t.Fatalf("seed %d: no clients but members %v", seed, d.Members)
		}
		return
	}
	if d.State != "STABLE" || len(d.Members) != len(s.clients) {
		s.t.Fatalf("seed %d: not settled: %v", seed, d)
	}
	subs := map[string][]string{}
	out := map[string]tpSet{}
	parts := map[string]int32{}
	for _, cl := range s.clients {
		subs[cl.id] = cl.subs
		out[cl.id] = cl.owned
	}
	for _, t := range s.topics {
		n, _ := s.e.topics.Partitions(context.Background(), t)
		parts[t] = n
	}
	checkAssignment(s.t, subs, parts, out)
}
