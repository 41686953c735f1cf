package group

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

// A simulation of classic consumers against one coordinator: random joins
// (with and without KIP-394's member id round trip), syncs, heartbeats,
// commits, leaves, crashes, clock advances, failing appends and
// failovers. It checks the broker only relays (C4): every member of a
// generation receives exactly the bytes one leader sync assigned it; that
// a commit never lands with a generation older than one already revealed
// (C9); and that a failover restores at least every generation revealed,
// with the members of a restored Stable generation still accepted (C8).

type classicSimClient struct {
	name     string
	id       string
	gen      int32 // generation of the last join answer
	leader   bool
	members  []JoinMember
	syncedAt int32 // generation whose assignment it holds (0: none)
	call     chan classicSimResult
	cancel   context.CancelFunc
}

type classicSimResult struct {
	kind string // "join" or "sync"
	join JoinResult
	sync SyncResult
	err  error
	gen  int32 // the sync's generation
}

type classicSim struct {
	t       *testing.T
	rng     *rand.Rand
	e       *env
	clients []*classicSimClient
	next    int
	// attempts[gen]: every leader sync sent for gen (member -> bytes);
	// got[gen]: what members received.
	attempts map[int32][]map[string][]byte
	got      map[int32]map[string][]byte
	revealed int32 // the highest generation a join answered
	stats    map[string]int
}

func (s *classicSim) start(cl *classicSimClient, kind string, f func(ctx context.Context) classicSimResult) {
	ctx, cancel := context.WithCancel(context.Background())
	call := make(chan classicSimResult, 1)
	cl.call, cl.cancel = call, cancel
	go func() { r := f(ctx); r.kind = kind; call <- r }()
}

func (s *classicSim) join(cl *classicSimClient) {
	req := classicJoin("g", cl.id, "t")
	req.ClientID = cl.name
	req.RequireMemberID = s.rng.IntN(2) == 0
	c := s.e.c
	s.start(cl, "join", func(ctx context.Context) classicSimResult {
		r, err := c.Join(ctx, req)
		return classicSimResult{join: r, err: err}
	})
}

func (s *classicSim) sync(cl *classicSimClient) {
	req := SyncRequest{GroupID: "g", MemberID: cl.id, Generation: cl.gen}
	if cl.leader {
		a := map[string][]byte{}
		for _, m := range cl.members {
			b := fmt.Appendf(nil, "%d/%s/%d", cl.gen, m.MemberID, s.rng.Uint64())
			a[m.MemberID] = b
			req.Assignments = append(req.Assignments, MemberAssignment{m.MemberID, b})
		}
		s.attempts[cl.gen] = append(s.attempts[cl.gen], a)
	}
	gen, c := cl.gen, s.e.c
	s.start(cl, "sync", func(ctx context.Context) classicSimResult {
		r, err := c.Sync(ctx, req)
		return classicSimResult{sync: r, err: err, gen: gen}
	})
}

// collect applies the answers of the calls that ended.
func (s *classicSim) collect() {
	for _, cl := range s.clients {
		select {
		case r := <-cl.call:
			cl.call = nil
			s.answered(cl, r)
		default:
		}
	}
}

func (s *classicSim) answered(cl *classicSimClient, r classicSimResult) {
	switch {
	case r.kind == "join" && errors.Is(r.err, ErrMemberIDRequired):
		cl.id = r.join.MemberID
	case r.kind == "join" && r.err == nil:
		cl.id, cl.gen, cl.leader, cl.members = r.join.MemberID, r.join.Generation, r.join.Leader == r.join.MemberID, r.join.Members
		s.revealed = max(s.revealed, cl.gen)
		s.stats["joined"]++
	case r.kind == "sync" && r.err == nil:
		if s.got[r.gen] == nil {
			s.got[r.gen] = map[string][]byte{}
		}
		s.got[r.gen][cl.id] = r.sync.Assignment
		cl.syncedAt = r.gen
		s.checkRelayed(r.gen)
		s.stats["synced"]++
	case errors.Is(r.err, ErrUnknownMember):
		cl.id, cl.gen, cl.syncedAt = "", 0, 0
	case r.err != nil: // rejoin
		cl.gen = 0
		s.stats[r.kind+"-error"]++
	}
}

// checkRelayed: one leader sync of gen explains every assignment received.
func (s *classicSim) checkRelayed(gen int32) {
	got := s.got[gen]
	for _, a := range s.attempts[gen] {
		explains := true
		for id, b := range got {
			explains = explains && bytes.Equal(a[id], b) // a member left out gets empty bytes
		}
		if explains {
			return
		}
	}
	s.t.Fatalf("generation %d: assignments received %q explained by no leader sync %q", gen, got, s.attempts[gen])
}

func (s *classicSim) idle() *classicSimClient {
	var out []*classicSimClient
	for _, cl := range s.clients {
		if cl.call == nil {
			out = append(out, cl)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out[s.rng.IntN(len(out))]
}

func (s *classicSim) remove(cl *classicSimClient) {
	if cl.cancel != nil {
		cl.cancel()
	}
	s.clients = slices.DeleteFunc(s.clients, func(c *classicSimClient) bool { return c == cl })
}

// act makes an idle client do what a consumer would next.
func (s *classicSim) act(cl *classicSimClient) {
	switch {
	case cl.gen == 0:
		s.join(cl)
	case cl.syncedAt != cl.gen:
		s.sync(cl)
	case s.rng.IntN(2) == 0:
		s.commit(cl)
	default:
		err := s.e.c.ClassicHeartbeat(context.Background(), HeartbeatRequest{GroupID: "g", MemberID: cl.id, Generation: cl.gen})
		switch {
		case errors.Is(err, ErrUnknownMember):
			cl.id, cl.gen = "", 0
		case err != nil:
			s.join(cl)
		}
	}
}

// commit: C9, a commit never lands with a generation older than one a
// join already revealed.
func (s *classicSim) commit(cl *classicSimClient) {
	revealed := s.revealed
	err := s.e.commitClassic("g", cl.id, cl.gen, "t", int32(s.rng.IntN(2)), int64(s.rng.IntN(1000)))
	if err == nil && cl.gen < revealed {
		s.t.Fatalf("commit of generation %d accepted after generation %d was revealed", cl.gen, revealed)
	}
	if err == nil {
		s.stats["commit"]++
	}
}

func (s *classicSim) step() {
	s.collect()
	switch r := s.rng.IntN(100); {
	case r < 55:
		if cl := s.idle(); cl != nil {
			s.act(cl)
		}
	case r < 62:
		if len(s.clients) < 6 {
			s.next++
			s.clients = append(s.clients, &classicSimClient{name: fmt.Sprintf("c%d", s.next)})
		}
	case r < 66:
		if cl := s.idle(); cl != nil && cl.id != "" {
			_, _ = s.e.c.Leave(context.Background(), LeaveRequest{GroupID: "g", Members: []LeavingMember{{MemberID: cl.id}}})
			s.remove(cl)
		}
	case r < 69:
		if len(s.clients) > 0 {
			s.remove(s.clients[s.rng.IntN(len(s.clients))]) // crashed
		}
	case r < 85:
		s.e.clock.Advance(time.Duration(s.rng.IntN(4000)) * time.Millisecond)
		if err := s.e.c.Tick(context.Background(), s.e.clock.Now()); err != nil && !errors.Is(err, errInjected) {
			s.t.Fatal(err)
		}
	case r < 90:
		s.e.log.mu.Lock()
		s.e.log.failNext = 1
		s.e.log.mu.Unlock()
	case r < 93:
		s.failover()
	default:
		runtime.Gosched() // let parked calls run
	}
}

// failover: C8, the new coordinator has at least every generation a join
// revealed, and members of its restored Stable generation are accepted.
func (s *classicSim) failover() {
	s.e.failover()
	s.drain()
	s.stats["failover"]++
	d, err := s.e.c.Describe(context.Background(), "g")
	if err != nil {
		if s.revealed > 0 && !errors.Is(err, ErrNotFound) {
			s.t.Fatal(err)
		}
		return
	}
	if d.Generation < s.revealed {
		s.t.Fatalf("failover restored generation %d, %d was revealed", d.Generation, s.revealed)
	}
	for _, cl := range s.clients {
		if d.State == "Stable" && cl.call == nil && cl.syncedAt == d.Generation && cl.gen == d.Generation {
			if err := s.e.c.ClassicHeartbeat(context.Background(), HeartbeatRequest{GroupID: "g", MemberID: cl.id, Generation: cl.gen}); err != nil {
				s.t.Fatalf("member %s of restored generation %d: %v", cl.id, d.Generation, err)
			}
		}
	}
}

// drain waits for the calls the old coordinator was answering (its Close
// ends the parked ones).
func (s *classicSim) drain() {
	deadline := time.Now().Add(10 * time.Second)
	for _, cl := range s.clients {
		if cl.call == nil {
			continue
		}
		select {
		case r := <-cl.call:
			cl.call = nil
			s.answered(cl, r)
		case <-time.After(time.Until(deadline)):
			s.t.Fatalf("%s's %v call did not end", cl.name, cl)
		}
	}
}

// settle runs the clients without faults until one Stable generation
// holds them all, then checks it.
func (s *classicSim) settle(seed int) {
	s.e.log.mu.Lock()
	s.e.log.failNext = 0
	s.e.log.mu.Unlock()
	testwait.Until(s.t, 20*time.Second, fmt.Sprintf("seed %d: one Stable generation of every client", seed), func() bool {
		s.collect()
		for _, cl := range s.clients {
			if cl.call == nil {
				s.act(cl)
			}
		}
		s.e.clock.Advance(time.Second)
		if err := s.e.c.Tick(context.Background(), s.e.clock.Now()); err != nil {
			s.t.Fatal(err)
		}
		d, err := s.e.c.Describe(context.Background(), "g")
		if len(s.clients) == 0 {
			return err != nil || len(d.Members) == 0
		}
		return err == nil && d.State == "Stable" && len(d.Members) == len(s.clients) && s.allSynced(d.Generation)
	})
}

func (s *classicSim) allSynced(gen int32) bool {
	for _, cl := range s.clients {
		if cl.syncedAt != gen || cl.call != nil {
			return false
		}
	}
	return true
}

func TestRandomizedClassicRounds(t *testing.T) {
	seeds, steps := 20, 300
	if testing.Short() {
		seeds = 4
	}
	stats := map[string]int{}
	for seed := 0; seed < seeds; seed++ {
		s := &classicSim{
			t: t, rng: rand.New(rand.NewPCG(uint64(seed), 11)), e: newEnv(t, newTopics("t", 2)),
			attempts: map[int32][]map[string][]byte{}, got: map[int32]map[string][]byte{}, stats: stats,
		}
		for i := 0; i < steps; i++ {
			s.step()
		}
		s.settle(seed)
		for _, cl := range s.clients {
			cl.cancel()
		}
		_ = s.e.c.Close()
		s.drain()
	}
	t.Logf("stats over %d seeds: %v", seeds, stats)
}
