package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/internal/testwait"
)

// heldHandler answers Fetch with Held responses and counts their
// releases: each response's release must run exactly once. A fetch of
// topic "block" waits for unblock (or the connection's end); "fail"
// returns its Held response with an error.
type heldHandler struct {
	unblock chan struct{}

	mu       sync.Mutex
	made     int
	releases map[int]int // response number -> releases
}

func newHeldHandler() *heldHandler {
	return &heldHandler{unblock: make(chan struct{}), releases: map[int]int{}}
}

func (h *heldHandler) fetch(_ context.Context, _ *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.FetchRequest)
	h.mu.Lock()
	n := h.made
	h.made++
	h.mu.Unlock()
	release := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.releases[n]++
	}
	return func(ctx context.Context) (kmsg.Response, error) {
		resp := kmsg.NewPtrFetchResponse()
		switch req.Topics[0].Topic {
		case "block":
			select {
			case <-h.unblock:
			case <-ctx.Done():
			}
		case "fail":
			return Held{Response: resp, Release: release}, errors.New("the fetch failed")
		}
		return Held{Response: resp, Release: release}, nil
	}, nil
}

// check reports a response released other than once, or fewer than want
// responses made.
func (h *heldHandler) check(want int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.made < want {
		return fmt.Errorf("%d responses made, want %d", h.made, want)
	}
	for n := range h.made {
		if got := h.releases[n]; got != 1 {
			return fmt.Errorf("response %d released %d times", n, got)
		}
	}
	return nil
}

func fetchRequestOf(topic string) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 4
	t := kmsg.NewFetchRequestTopic()
	t.Topic = topic
	t.Partitions = []kmsg.FetchRequestTopicPartition{kmsg.NewFetchRequestTopicPartition()}
	req.Topics = []kmsg.FetchRequestTopic{t}
	return req
}

// A Held response's release runs exactly once: after it is written, when
// the connection closes before writing it (its Reply still running, or
// queued behind one), and when its Reply fails.
func TestHeldResponsesReleasedOnce(t *testing.T) {
	h := newHeldHandler()
	reg := NewRegistry()
	if err := reg.Register(1, 4, 12, HandlerFunc(h.fetch)); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{Handlers: reg})

	// Written: released once each.
	c := dialRaw(t, ts.Addr().String())
	for range 5 {
		c.roundTrip(fetchRequestOf("t"))
	}
	testwait.UntilNil(t, waitTimeout, "5 written responses released once", func() error { return h.check(5) })

	// Unwritten: one Reply blocked, three queued behind it, when the
	// client goes away.
	c = dialRaw(t, ts.Addr().String())
	c.send(fetchRequestOf("block"))
	for range 3 {
		c.send(fetchRequestOf("t"))
	}
	testwait.Until(t, waitTimeout, "4 more fetches handled", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.made == 9
	})
	_ = c.nc.Close()
	testwait.UntilNil(t, waitTimeout, "dropped responses released once", func() error { return h.check(9) })

	// A failed Reply: released, and the connection closes.
	c = dialRaw(t, ts.Addr().String())
	c.send(fetchRequestOf("fail"))
	c.expectClosed()
	testwait.UntilNil(t, waitTimeout, "the failed reply's response released once", func() error { return h.check(10) })
}
