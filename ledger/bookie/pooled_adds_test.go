package bookie

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgergrpc"
	"github.com/strata-log/strata/proto/bookiepb"
)

// Several clients add distinct entries over gRPC while their
// streams break (client closed mid-flight, short add timeouts), so pooled
// inflightAdds and their buffers are recycled across streams while others
// are in flight. Every answer must name its own request, and every entry
// acknowledged must read back with the bytes sent.
func TestPooledAddsWhileStreamsBreak(t *testing.T) {
	ab := newAddBench(t)
	lis := proctest.Listen(t)
	srv := grpc.NewServer(benchServerOptions()...)
	bookiepb.RegisterBookieServer(srv, ab.svc)
	go srv.Serve(lis)
	defer srv.Stop()
	addr := lis.Addr().String()

	type sent struct {
		ledgerID, entryID uint64
		entry             []byte
	}
	var mu sync.Mutex
	var acked []sent
	var wrong []string
	const clients, rounds, perRound = 4, 6, 600
	var wg sync.WaitGroup
	for ci := range clients {
		wg.Go(func() {
			ledgerIdx := ci % addLedgers
			md := ab.mds[ledgerIdx]
			entryID := uint64(ci) * 1_000_000
			for r := range rounds {
				opts := ledgergrpc.Options{}
				if r%3 == 2 {
					opts.AddTimeout = time.Millisecond
				}
				c := ledgergrpc.New(opts)
				var cwg sync.WaitGroup
				closeAt := perRound
				if r%2 == 1 {
					closeAt = rand.IntN(perRound)
				}
				for i := range perRound {
					if i == closeAt {
						go c.Close()
					}
					payload := make([]byte, 200+rand.IntN(3000))
					binary.BigEndian.PutUint64(payload, entryID)
					for j := 8; j < len(payload); j++ {
						payload[j] = byte(rand.Uint32())
					}
					stored, err := ledger.SealEntry(md, int64(entryID), payload)
					if err != nil {
						t.Error(err)
						return
					}
					s := sent{md.Id, entryID, stored}
					entryID++
					cwg.Add(1)
					c.Add(addr, &bookiepb.AddRequest{LedgerId: s.ledgerID, EntryId: s.entryID, Lac: -1,
						Payload: stored[:len(payload)], PayloadTail: stored[len(payload):]},
						func(resp *bookiepb.AddResponse, err error) {
							defer cwg.Done()
							if err != nil {
								return
							}
							mu.Lock()
							defer mu.Unlock()
							if resp.LedgerId != s.ledgerID || resp.EntryId != s.entryID {
								wrong = append(wrong, resp.String())
							}
							if resp.Status == bookiepb.AddStatus_ADD_OK {
								acked = append(acked, s)
							}
						})
				}
				cwg.Wait()
				c.Close()
			}
		})
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Fatalf("%d answers for another add, e.g. %v", len(wrong), wrong[0])
	}
	if len(acked) == 0 {
		t.Fatal("nothing acknowledged")
	}
	for _, s := range acked {
		e, err := ab.svc.store.Read(s.ledgerID, s.entryID)
		if err != nil {
			t.Fatalf("entry %d/%d acknowledged, read: %v", s.ledgerID, s.entryID, err)
		}
		if !bytes.Equal(e.Payload, s.entry) {
			t.Fatalf("entry %d/%d acknowledged, stored with other bytes", s.ledgerID, s.entryID)
		}
	}
	t.Logf("%d adds acknowledged and read back", len(acked))
}
