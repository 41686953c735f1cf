package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/strata-log/strata/e2e/loadtest"
)

// stopBound is how soon a bookie must exit after SIGTERM under load: it
// used to take the gRPC server's whole graceful-stop timeout (5s), waiting
// for writers' add streams that never end on their own.
const stopBound = 3 * time.Second

// TestBookieStopsPromptlyUnderLoad: SIGTERM to each bookie in turn while a
// producer writes (a rolling restart): each exits cleanly (code 0) within
// stopBound, the producer goes on, and every acknowledged record is read
// back exactly once.
func TestBookieStopsPromptlyUnderLoad(t *testing.T) {
	skipShort(t)
	c := startStrata(t, 1)
	cl := c.client(t)
	createTopic(t, cl, "busy", 6, nil)
	load := loadtest.Start(t, cl, loadtest.Config{Topic: "busy", Keys: 12})
	load.AwaitAcks(t, 2000, "records before the restarts")
	for _, b := range c.bookies {
		start := time.Now()
		b.Stop(30 * time.Second) // SIGTERM; SIGKILL after 30s
		took := time.Since(start)
		t.Logf("bookie %s exited %v after SIGTERM (code %d)", b.ID, took.Round(time.Millisecond), b.ExitCode())
		if code := b.ExitCode(); code != 0 || took > stopBound {
			t.Fatalf("bookie %s: exit code %d after %v; want a clean exit within %v", b.ID, code, took, stopBound)
		}
		b.Restart(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.WaitReady(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		load.AwaitAcks(t, 1000, "records after restarting "+b.ID)
	}
	res := load.Stop(t)
	loadtest.Verify(t, cl, "busy", 6, res.Acks)
}
