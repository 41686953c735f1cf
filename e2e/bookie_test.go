package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/proto/bookiepb"
)

// dialBookie returns a client for the bookie, closed by the test's cleanup.
func dialBookie(t testing.TB, addr string) bookiepb.BookieClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(grpcopts.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return bookiepb.NewBookieClient(conn)
}

type entryKey struct{ ledger, entry uint64 }

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

// payloadFor is deterministic so a reader can check what it gets.
func payloadFor(k entryKey, size int) []byte {
	r := rand.New(rand.NewSource(int64(k.ledger*1_000_003 + k.entry)))
	b := make([]byte, size)
	r.Read(b)
	return b
}

// streamAdds writes entries to the given ledgers over one pipelined stream
// until ctx ends or the stream breaks, and returns the digests of the
// entries the bookie acknowledged.
func streamAdds(ctx context.Context, c bookiepb.BookieClient, ledgers []uint64, rng *rand.Rand) map[entryKey][32]byte {
	acked := map[entryKey][32]byte{}
	stream, err := c.AddEntries(ctx)
	if err != nil {
		return acked
	}
	type sent struct {
		key    entryKey
		digest [32]byte
	}
	var mu sync.Mutex
	inflight := map[uint64]sent{}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			mu.Lock()
			s := inflight[resp.RequestId]
			delete(inflight, resp.RequestId)
			if resp.Status == bookiepb.AddStatus_ADD_OK {
				acked[s.key] = s.digest
			}
			mu.Unlock()
		}
	}()
	next := map[uint64]uint64{}
	for id := uint64(1); ctx.Err() == nil; id++ {
		l := ledgers[rng.Intn(len(ledgers))]
		k := entryKey{l, next[l]}
		next[l]++
		p := payloadFor(k, 100+rng.Intn(8000))
		mu.Lock()
		inflight[id] = sent{k, sha256.Sum256(p)}
		mu.Unlock()
		if err := stream.Send(&bookiepb.AddRequest{RequestId: id, LedgerId: l, EntryId: k.entry, Lac: int64(k.entry) - 1, Payload: p}); err != nil {
			break
		}
	}
	_ = stream.CloseSend()
	<-recvDone
	mu.Lock()
	defer mu.Unlock()
	return acked
}

// checkAcked reads back every acknowledged entry, ledger by ledger with
// range reads.
func checkAcked(t *testing.T, c bookiepb.BookieClient, acked map[entryKey][32]byte) {
	t.Helper()
	last := map[uint64]uint64{}
	for k := range acked {
		last[k.ledger] = max(last[k.ledger], k.entry)
	}
	for ledger, lastEntry := range last {
		next := uint64(0)
		for next <= lastEntry {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			stream, err := c.ReadEntries(ctx, &bookiepb.ReadEntriesRequest{LedgerId: ledger, FirstEntryId: next, LastEntryId: lastEntry})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			got := 0
			for {
				resp, err := stream.Recv()
				if err != nil {
					break
				}
				k := entryKey{ledger, resp.EntryId}
				if want, ok := acked[k]; ok && sha256.Sum256(resp.Payload) != want {
					t.Fatalf("acknowledged entry %d/%d: payload differs", ledger, resp.EntryId)
				}
				next = resp.EntryId + 1
				got++
			}
			cancel()
			if got == 0 {
				t.Fatalf("ledger %d: entry %d (acknowledged up to %d) does not read back", ledger, next, lastEntry)
			}
		}
	}
}

// TestBookieKill9 kills a bookie with kill -9 while adds stream in, three
// times; after each restart every acknowledged entry reads back intact.
func TestBookieKill9(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	b := proctest.StartBookie(t, bins["bookie"], meta, "b1", "--journal-max-file-bytes", "4194304", "--max-entry-bytes", "1048576")
	cl := newMetaClient(t, meta)
	c := dialBookie(t, b.Listen)
	rng := rand.New(rand.NewSource(1))
	all := map[entryKey][32]byte{}
	for round := 0; round < 3; round++ {
		ledgers := []uint64{uint64(round*10 + 1), uint64(round*10 + 2), uint64(round*10 + 3), uint64(round*10 + 4)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan map[entryKey][32]byte)
		writerRng := rand.New(rand.NewSource(int64(round))) // not shared with this goroutine
		go func() { done <- streamAdds(ctx, c, ledgers, writerRng) }()
		time.Sleep(time.Duration(800+rng.Intn(700)) * time.Millisecond) // kill at a random moment of the load, not a wait
		b.Kill()
		acked := <-done
		cancel()
		for k, v := range acked {
			all[k] = v
		}
		t.Logf("round %d: %d adds acknowledged before kill -9", round, len(acked))
		if len(acked) == 0 {
			t.Fatal("no add was acknowledged: the test proves nothing")
		}
		b.Restart(t)
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := b.WaitReady(rctx); err != nil {
			rcancel()
			t.Fatal(err)
		}
		rcancel()
		checkAcked(t, c, all)
	}
	known, err := bookies.List(context.Background(), cl)
	if err != nil || len(known) != 1 || known[0].State() != "writable" {
		t.Fatalf("registry after restarts: %+v, %v", known, err)
	}
}

// TestBookieIdentity: a bookie whose disk was wiped refuses to start under
// its old id, and a disk from another bookie is refused too.
func TestBookieIdentity(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	b := proctest.StartBookie(t, bins["bookie"], meta, "b1")
	b.Stop(10 * time.Second)

	// Another id on b1's disk.
	other := &proctest.BookieNode{ID: "b2", Listen: proctest.FreeAddr(t), AdminAddr: proctest.FreeAddr(t), DataDir: b.DataDir}
	out := runToExit(t, bins["bookie"], other.Args(meta)...)
	if !strings.Contains(out, "belongs to bookie b1") {
		t.Fatalf("b2 on b1's disk: %s", out)
	}

	// Wipe b1's disk.
	if err := os.RemoveAll(b.DataDir); err != nil {
		t.Fatal(err)
	}
	out = runToExit(t, bins["bookie"], b.Args(meta)...)
	if !strings.Contains(out, "wiped or replaced") {
		t.Fatalf("wiped b1: %s", out)
	}
	t.Logf("wiped bookie refused: %s", lastLine(out))
}

// runToExit runs a program that must fail at start-up and returns its
// output.
func runToExit(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("%s %v: want a start-up failure, got %v\n%s", bin, args, err, out.String())
	}
	return out.String()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
