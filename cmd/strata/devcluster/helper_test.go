package devcluster

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/proctest"
)

// The test binary doubles as the processes that the tests start, chosen
// by helperEnv: "node", a node that answers /readyz on $adminEnv until it
// is killed; "parent", a process that starts a node the way devcluster
// does and then waits to be killed (parentdeath_linux_test.go).
const (
	helperEnv = "DEVCLUSTER_TEST_HELPER"
	adminEnv  = "DEVCLUSTER_TEST_ADMIN"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "node":
		os.Exit(runNodeHelper())
	case "parent":
		os.Exit(runParentHelper())
	}
	os.Exit(m.Run())
}

// runNodeHelper serves /readyz (and every other path) with 200 until the
// process is killed.
func runNodeHelper() int {
	ln, err := net.Listen("tcp", os.Getenv(adminEnv))
	if err != nil {
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Second}
	_ = srv.Serve(ln)
	return 1
}

// helperNodeState writes, in dir, the state file of a cluster of one
// node, broker-1: this test binary as a node helper on a free loopback
// port, not running yet.
func helperNodeState(t *testing.T, dir string) *State {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	admin := proctest.FreeAddr(t)
	st := &State{Dir: dir, Nodes: []Node{{
		Name: "broker-1", Role: RoleBroker, ID: "k1", Listen: admin, Admin: admin, Bin: exe,
		DataDir: filepath.Join(dir, "broker-1"), LogFile: filepath.Join(dir, "logs", "broker-1.log"),
		Env: []string{helperEnv + "=node", adminEnv + "=" + admin},
	}}}
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	return st
}

// stopAtEnd stops the node whose pid *n holds when the test ends (a node
// gone already is fine).
func stopAtEnd(t *testing.T, n *Node) {
	t.Cleanup(func() {
		if err := Stop(*n, 5*time.Second); err != nil && Check(*n) == nil {
			t.Errorf("stopping %s: %v", n.Name, err)
		}
	})
}
