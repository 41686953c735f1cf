package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/metad/metaclient"
)

// TestMetadKillEachMember kills every member in turn with kill -9, the
// leader included: writes and linearizable reads work again within 5 s, and
// the restarted member catches up.
func TestMetadKillEachMember(t *testing.T) {
	skipShort(t)
	// A low snapshot threshold makes a restarted member catch up from a
	// snapshot, not only from the log.
	c := proctest.StartMetad(t, bins["metad"], 3, "--snapshot-threshold", "64")
	cl := newMetaClient(t, c)
	ctx := context.Background()

	write := func(key, value string) error {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cl.Put(wctx, key, []byte(value))
		return err
	}
	readBack := func(key, value string) error {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		kv, err := cl.Get(rctx, key)
		if err != nil {
			return err
		}
		if string(kv.Value) != value {
			return fmt.Errorf("read %q, want %q", kv.Value, value)
		}
		return nil
	}

	// Kill the leader first, then the others.
	lead, err := leader(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	order := []string{lead}
	for _, m := range c.Members {
		if m.ID != lead {
			order = append(order, m.ID)
		}
	}
	for round, id := range order {
		m := c.Member(id)
		key := fmt.Sprintf("/kill/%d", round)
		if err := write(key+"/before", "x"); err != nil {
			t.Fatalf("round %d: write before kill: %v", round, err)
		}
		m.Kill()
		killed := time.Now()
		testwait.UntilNil(t, 5*time.Second, fmt.Sprintf("round %d (member %s killed): write and read", round, id), func() error {
			if err := write(key+"/after", "y"); err != nil {
				return err
			}
			return readBack(key+"/after", "y")
		})
		t.Logf("member %s killed: writes and linearizable reads back after %s", id, time.Since(killed).Round(time.Millisecond))
		// Enough writes while it is down that the others snapshot and trim.
		for i := 0; i < 200; i++ {
			if err := write(fmt.Sprintf("%s/fill/%d", key, i), "z"); err != nil {
				t.Fatalf("fill write %d: %v", i, err)
			}
		}
		if err := readBack(key+"/before", "x"); err != nil {
			t.Fatalf("write acknowledged before the kill lost: %v", err)
		}

		m.Restart(t)
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		if err := m.WaitReady(rctx); err != nil {
			cancel()
			t.Fatal(err)
		}
		cancel()
		// The restarted member catches up: its own replica has the write
		// made while it was down.
		testwait.UntilNil(t, 10*time.Second, "restarted member catches up", func() error {
			single, err := metaclient.New(metaclient.Config{Endpoints: []string{m.Listen}})
			if err != nil {
				return err
			}
			defer single.Close()
			kv, err := single.Get(ctx, key+"/after", metaclient.Stale())
			if err != nil {
				return err
			}
			if string(kv.Value) != "y" {
				return fmt.Errorf("stale read on %s: %q", id, kv.Value)
			}
			return nil
		})
	}
}

// TestMetadNoQuorum: with two of three members down a write fails within
// its deadline with a clear error, and succeeds once a second member is
// back.
func TestMetadNoQuorum(t *testing.T) {
	skipShort(t)
	c := proctest.StartMetad(t, bins["metad"], 3)
	cl := newMetaClient(t, c)
	ctx := context.Background()
	if _, err := cl.Put(ctx, "/q", []byte("1")); err != nil {
		t.Fatal(err)
	}
	c.Members[0].Kill()
	c.Members[1].Kill()

	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	start := time.Now()
	_, err := cl.Put(wctx, "/q", []byte("2"))
	cancel()
	took := time.Since(start)
	if err == nil {
		t.Fatal("write succeeded with two of three members down")
	}
	if took > 4*time.Second {
		t.Fatalf("write with a 3s deadline took %s to fail", took)
	}
	if !errors.Is(err, metaclient.ErrNoQuorum) && !errors.Is(err, metaclient.ErrUnavailable) &&
		!errors.Is(err, metaclient.ErrUnknownOutcome) {
		t.Fatalf("want a no-quorum/unavailable error, got %v", err)
	}
	t.Logf("write without quorum failed after %s: %v", took.Round(time.Millisecond), err)

	c.Members[1].Restart(t)
	testwait.UntilNil(t, 15*time.Second, "write after a second member is back", func() error {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cl.Put(wctx, "/q", []byte("3"))
		return err
	})
	kv, err := cl.Get(ctx, "/q")
	if err != nil || string(kv.Value) != "3" {
		t.Fatalf("read after recovery: %v %v", kv, err)
	}
}

// TestMetadWatchAcrossLeaderKills: a watch that spans leader kills sees
// every revision exactly once, in order, including every acknowledged write.
func TestMetadWatchAcrossLeaderKills(t *testing.T) {
	skipShort(t)
	c := proctest.StartMetad(t, bins["metad"], 3)
	cl := newMetaClient(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	events := cl.Watch(ctx, "/w/", 1)
	var (
		mu    sync.Mutex
		acked = map[string]bool{}
	)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := 0; ctx.Err() == nil && i < 400; i++ {
			key := fmt.Sprintf("/w/%04d", i)
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := cl.Put(wctx, key, []byte(key))
			wcancel()
			if err == nil {
				mu.Lock()
				acked[key] = true
				mu.Unlock()
			}
		}
	}()
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	// Two leader kills while the writer runs.
	for k := 0; k < 2; k++ {
		before := ackedCount()
		testwait.Until(t, 30*time.Second, "20 more puts acknowledged before a kill", func() bool { return ackedCount() >= before+20 })
		var lead string
		testwait.UntilNil(t, 10*time.Second, "find leader", func() (err error) {
			lead, err = leader(ctx, cl)
			return err
		})
		m := c.Member(lead)
		m.Kill()
		t.Logf("killed leader %s", lead)
		time.Sleep(300 * time.Millisecond) // deliberately down a while, not a wait for a condition
		m.Restart(t)
	}
	<-writerDone

	// Read the final revision, then drain the watch up to it. The revision of a linearizable read is the final one: no writes
	// follow.
	var final int64
	testwait.UntilNil(t, 10*time.Second, "final revision", func() (err error) {
		_, final, err = cl.List(ctx, "/w/")
		return err
	})
	seen := map[string]int{}
	var last int64
	deadline := time.After(30 * time.Second)
	for last < final {
		select {
		case r, ok := <-events:
			if !ok {
				t.Fatalf("watch closed at revision %d", last)
			}
			if r.Err != nil {
				t.Fatalf("watch error: %v", r.Err)
			}
			for _, ev := range r.Events {
				rev := ev.Kv.ModRevision
				if rev != last+1 {
					t.Fatalf("revision %d after %d: gap or repeat", rev, last)
				}
				last = rev
				seen[ev.Kv.Key]++
			}
		case <-deadline:
			t.Fatalf("watch reached revision %d of %d", last, final)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for key := range acked {
		if seen[key] != 1 {
			t.Errorf("acknowledged put %s seen %d times", key, seen[key])
		}
	}
	t.Logf("watch saw revisions 1..%d exactly once; %d puts acknowledged, %d keys seen", final, len(acked), len(seen))
}

// TestMetadLeaseExpiry: keys attached to a lease vanish when it expires and
// survive while it is kept alive, across a leader kill.
func TestMetadLeaseExpiry(t *testing.T) {
	skipShort(t)
	c := proctest.StartMetad(t, bins["metad"], 3)
	cl := newMetaClient(t, c)
	ctx := context.Background()

	sess, err := cl.NewSession(ctx, 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := cl.Put(ctx, "/lease/kept", []byte("x"), metaclient.WithLease(sess.Lease())); err != nil {
		t.Fatal(err)
	}
	short, err := cl.Grant(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "/lease/dropped", []byte("x"), metaclient.WithLease(short)); err != nil {
		t.Fatal(err)
	}
	lead, err := leader(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	c.Member(lead).Kill()

	testwait.UntilNil(t, 10*time.Second, "unrenewed lease expires", func() error {
		_, err := cl.Get(ctx, "/lease/dropped")
		if errors.Is(err, metaclient.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
	// The kept lease lives on past its TTL. Its TTL is well above an election
	// on a loaded machine (the new leader restarts every lease clock; the
	// client gives up after a whole TTL without a successful keep-alive).
	time.Sleep(8 * time.Second) // a negative check: the session is not lost within 8 s
	select {
	case <-sess.Done():
		t.Fatal("session lost across a leader kill")
	default:
	}
	if _, err := cl.Get(ctx, "/lease/kept"); err != nil {
		t.Fatalf("key of a kept-alive lease: %v", err)
	}
}

// TestMetadReplaceMember replaces a dead member: a new one started with
// --join is added, the dead one removed, and the cluster keeps a quorum of
// three with the new member holding all data.
func TestMetadReplaceMember(t *testing.T) {
	skipShort(t)
	c := proctest.StartMetad(t, bins["metad"], 3)
	cl := newMetaClient(t, c)
	ctx := context.Background()
	if _, err := cl.Put(ctx, "/r/before", []byte("1")); err != nil {
		t.Fatal(err)
	}
	dead := c.Members[2]
	dead.Kill()

	m4 := &proctest.MetadMember{
		ID: "4", Listen: proctest.FreeAddr(t), RaftAddr: proctest.FreeAddr(t), AdminAddr: proctest.FreeAddr(t),
		DataDir: t.TempDir(),
	}
	m4.Process = proctest.Start(t, "metad-4", bins["metad"], "--id", "4", "--join", "--data-dir", m4.DataDir,
		"--listen", m4.Listen, "--raft-listen", m4.RaftAddr, "--admin-listen", m4.AdminAddr)
	members, err := cl.MemberAdd(ctx, "4", m4.RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 4 {
		t.Fatalf("after add: %d members", len(members))
	}
	if members, err = cl.MemberRemove(ctx, dead.ID); err != nil {
		t.Fatal(err)
	}
	if len(members) != 3 {
		t.Fatalf("after remove: %d members", len(members))
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := m4.WaitReady(rctx); err != nil {
		t.Fatal(err)
	}
	// Quorum is now {1, 2, 4}: it survives losing one more of them.
	c.Members[0].Kill()
	testwait.UntilNil(t, 10*time.Second, "write with members 2 and 4", func() error {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cl.Put(wctx, "/r/after", []byte("2"))
		return err
	})
	only4, err := metaclient.New(metaclient.Config{Endpoints: []string{m4.Listen}})
	if err != nil {
		t.Fatal(err)
	}
	defer only4.Close()
	// A follower applies a commit when it next hears from the leader: its
	// own (stale) replica catches up shortly after the write returns.
	for _, key := range []string{"/r/before", "/r/after"} {
		testwait.UntilNil(t, 5*time.Second, "new member's replica has "+key, func() error {
			_, err := only4.Get(ctx, key, metaclient.Stale())
			return err
		})
	}
}
