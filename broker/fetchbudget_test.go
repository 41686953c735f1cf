package broker

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/internal/bytebudget"
)

// FuzzFetchHold drives holds through any order of reservations,
// settlements, hand-overs, releases (repeated) and connection closes: the
// budget and each connection's share hold exactly what the unreleased
// holds hold, never less than zero, and nothing once every hold is
// released or its connection closed.
func FuzzFetchHold(f *testing.F) {
	f.Add([]byte{0, 1, 10, 2, 5, 3, 4, 0})
	f.Add([]byte{0, 0, 1, 200, 1, 200, 2, 3, 1, 5, 6, 0, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		fb := newFetchBudget(minInflightFetchBytes, prometheus.NewRegistry())
		conns := []*FetchConn{{share: bytebudget.New(fb.perConn)}, {share: bytebudget.New(fb.perConn)}, nil}
		type held struct {
			h        *fetchHold
			reserved int64 // reserved and not settled
			handed   bool
		}
		var holds []*held
		next := func(i *int) int64 {
			if *i >= len(ops) {
				return 0
			}
			*i++
			return int64(ops[*i-1])
		}
		for i := 0; i < len(ops); {
			op, arg := next(&i), next(&i)
			var x *held
			if len(holds) > 0 {
				x = holds[int(arg)%len(holds)]
			}
			switch op % 7 {
			case 0:
				holds = append(holds, &held{h: fb.newHold(conns[int(arg)%len(conns)])})
			case 1: // reserve up to 4 MiB
				if x != nil && !x.handed && x.reserved == 0 {
					n := next(&i) << 14
					if x.h.reserve(context.Background(), n, false, time.Time{}) {
						x.reserved = n
					}
				}
			case 2: // settle with up to 8 MiB read
				if x != nil && !x.handed {
					x.h.settle(x.reserved, next(&i)<<15, arg%2 == 0)
					x.reserved = 0
				}
			case 3:
				if x != nil && !x.handed && x.reserved == 0 {
					x.handed = true
					x.h.handOver()
				}
			case 4, 6:
				if x != nil && x.handed {
					x.h.release()
				}
			case 5:
				if c := conns[int(arg)%len(conns)]; c != nil {
					c.Close()
				}
			}
			checkHolds(t, fb, conns, func(yield func(*fetchHold) bool) {
				for _, x := range holds {
					if !yield(x.h) {
						return
					}
				}
			})
		}
		for _, x := range holds {
			if x.reserved > 0 {
				x.h.settle(x.reserved, 0, false)
			}
			if !x.handed {
				x.h.handOver()
			}
		}
		for _, c := range conns[:2] {
			c.Close()
		}
		for _, x := range holds {
			if x.h.conn == nil {
				x.h.release()
			}
		}
		if used := fb.responses.Used(); used != 0 {
			t.Fatalf("%d bytes held once every hold was released", used)
		}
		for i, c := range conns[:2] {
			if used := c.share.Used(); used != 0 {
				t.Fatalf("connection %d: %d bytes held once it closed", i, used)
			}
		}
	})
}

// checkHolds fails when the budget or a share holds other than what the
// unreleased holds hold.
func checkHolds(t *testing.T, fb *fetchBudget, conns []*FetchConn, holds func(func(*fetchHold) bool)) {
	t.Helper()
	var total int64
	byConn := map[*FetchConn]int64{}
	for h := range holds {
		if h.bytes < 0 {
			t.Fatalf("a hold of %d bytes", h.bytes)
		}
		if !h.released.Load() {
			total += h.bytes
			byConn[h.conn] += h.bytes
		}
	}
	if used := fb.responses.Used(); used != total {
		t.Fatalf("budget holds %d bytes, the holds %d", used, total)
	}
	for i, c := range conns {
		if c != nil && c.share.Used() != byConn[c] {
			t.Fatalf("connection %d's share holds %d bytes, its holds %d", i, c.share.Used(), byConn[c])
		}
	}
}
