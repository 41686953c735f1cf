package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/metad/metaclient"
)

// register is the state of one key: its value and version (0: absent).
type register struct {
	value   string
	version int64
}

type regInput struct {
	key    string
	cas    bool // false: get
	expect int64
	value  string
}

type regOutput struct {
	unknown  bool // cas outcome unknown (timeout, leader lost)
	conflict bool // cas failed its compare
	value    string
	version  int64
}

// registerModel is a versioned register per key. A compare-and-set whose
// outcome is unknown may or may not have happened, so the model forks.
var registerModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(regInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{register{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(register), input.(regInput), output.(regOutput)
		if !in.cas {
			if out.value == s.value && out.version == s.version {
				return []any{s}
			}
			return nil
		}
		applied := register{value: in.value, version: s.version + 1}
		switch {
		case out.unknown:
			if s.version == in.expect {
				return []any{s, applied}
			}
			return []any{s}
		case out.conflict:
			if s.version != in.expect {
				return []any{s}
			}
			return nil
		default:
			if s.version == in.expect {
				return []any{applied}
			}
			return nil
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if !in.cas {
			return fmt.Sprintf("get(%s) -> %q v%d", in.key, out.value, out.version)
		}
		return fmt.Sprintf("cas(%s, v%d, %q) -> unknown=%t conflict=%t", in.key, in.expect, in.value, out.unknown, out.conflict)
	},
}

// TestMetadLinearizable runs concurrent compare-and-set and get clients
// while leaders are killed, and checks the history with porcupine.
func TestMetadLinearizable(t *testing.T) {
	skipShort(t)
	c := proctest.StartMetad(t, bins["metad"], 3)
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Second)
	defer cancel()

	const clients = 5
	keys := []string{"/lin/a", "/lin/b", "/lin/c"}
	start := time.Now()
	now := func() int64 { return time.Since(start).Nanoseconds() }

	var (
		mu      sync.Mutex
		history []porcupine.Operation
	)
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for id := 0; id < clients; id++ {
		cl := newMetaClient(t, c)
		wg.Add(1)
		go func(id int, cl *metaclient.Client) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(id)))
			known := map[string]int64{}
			for n := 0; ctx.Err() == nil; n++ {
				key := keys[rng.Intn(len(keys))]
				opCtx, opCancel := context.WithTimeout(ctx, time.Second)
				if rng.Intn(2) == 0 {
					call := now()
					kv, err := cl.Get(opCtx, key)
					ret := now()
					opCancel()
					out := regOutput{}
					switch {
					case errors.Is(err, metaclient.ErrNotFound):
					case err != nil:
						continue // a failed read has no effect
					default:
						out.value, out.version = string(kv.Value), kv.Version
					}
					known[key] = out.version
					record(porcupine.Operation{ClientId: id, Input: regInput{key: key}, Call: call, Output: out, Return: ret})
					continue
				}
				in := regInput{key: key, cas: true, expect: known[key], value: fmt.Sprintf("c%d-%d", id, n)}
				call := now()
				kv, err := cl.Put(opCtx, key, []byte(in.value), metaclient.WithExpectedVersion(in.expect))
				ret := now()
				opCancel()
				out := regOutput{}
				switch {
				case err == nil:
					known[key] = kv.Version
				case errors.Is(err, metaclient.ErrVersionConflict):
					out.conflict = true
				default:
					// Unknown outcome: it may take effect at any time later.
					out.unknown = true
					ret = math.MaxInt64
				}
				record(porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
			}
		}(id, cl)
	}

	// Kill the leader every ~3 s while the clients run; restart it 1 s later.
	admin := newMetaClient(t, c)
	kills := 0
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(2500 * time.Millisecond):
		}
		if ctx.Err() != nil {
			break
		}
		lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
		lead, err := leader(lctx, admin)
		lcancel()
		if err != nil {
			continue
		}
		m := c.Member(lead)
		m.Kill()
		kills++
		time.Sleep(time.Second) // deliberately down a while, not a wait for a condition
		m.Restart(t)
	}
	wg.Wait()

	var cas, unknown, gets int
	for _, op := range history {
		in, out := op.Input.(regInput), op.Output.(regOutput)
		switch {
		case !in.cas:
			gets++
		case out.unknown:
			unknown++
		default:
			cas++
		}
	}
	t.Logf("%d leader kills; %d ops: %d gets, %d cas with known outcome, %d unknown", kills, len(history), gets, cas, unknown)
	if kills < 2 || gets == 0 || cas == 0 {
		t.Fatalf("workload too small to mean anything: kills=%d gets=%d cas=%d", kills, gets, cas)
	}
	res, info := porcupine.CheckOperationsVerbose(registerModel.ToModel(), history, 2*time.Minute)
	switch res {
	case porcupine.Illegal:
		path := t.TempDir() + "/linearizability.html"
		if err := porcupine.VisualizePath(registerModel.ToModel(), info, path); err == nil {
			t.Logf("visualization: %s", path)
		}
		t.Fatal("history is not linearizable")
	case porcupine.Unknown:
		t.Log("porcupine timed out: no violation found within the time limit")
	}
}
