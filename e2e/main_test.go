// Package e2e holds tests that run Strata's real programs as processes on
// loopback: kill -9, SIGSTOP, restarts. They are skipped with -short.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/metad/metaclient"
)

// bins maps program names ("metad", "strata") to the binaries built once
// for this test run.
var bins map[string]string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "strata-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins, err = proctest.Build(dir, "./cmd/metad", "./cmd/bookie", "./cmd/broker", "./cmd/strata")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real processes")
	}
}

// newMetaClient connects to the cluster; closed by the test's cleanup.
func newMetaClient(t testing.TB, c *proctest.MetadCluster) *metaclient.Client {
	t.Helper()
	cl, err := metaclient.New(metaclient.Config{Endpoints: c.Endpoints(), RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// leader returns the id of the current leader as seen by any member.
func leader(ctx context.Context, cl *metaclient.Client) (string, error) {
	st, err := cl.Status(ctx)
	if err != nil {
		return "", err
	}
	if st.LeaderId == "" {
		return "", fmt.Errorf("no leader")
	}
	return st.LeaderId, nil
}
