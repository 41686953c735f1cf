package miniotest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/strata-log/strata/internal/proctest"
)

// The package-wide server of a test binary: started by the first test that
// asks for it, stopped by Main after all tests ran.
var shared struct {
	sync.Mutex
	mainActive bool
	server     *Server
	err        error  // why the start failed; later tests fail with it too
	dir        string // temporary directory holding data and log
}

// Main runs the tests of a package that shares one MinIO server, then
// stops the server and removes its files. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(miniotest.Main(m)) }
//
// The server starts only if a test calls Shared, so -short runs and tests
// that do not need MinIO pay nothing.
func Main(m *testing.M) int {
	shared.Lock()
	shared.mainActive = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	defer shared.Unlock()
	if shared.server != nil {
		shared.server.Kill()
		if code != 0 {
			fmt.Fprintf(os.Stderr, "---- shared minio log ----\n%s\n", shared.server.logTail())
		}
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	return code
}

// Shared returns the server shared by the tests of this package, starting
// it on first use. Tests must not stop it; each takes its own key prefix
// (Prefix) to stay apart from the others. Without MinIO installed it skips
// under -short and fails otherwise.
func Shared(t testing.TB) *Server {
	t.Helper()
	bin := requireBinary(t)
	shared.Lock()
	defer shared.Unlock()
	if !shared.mainActive {
		t.Fatal("miniotest: Shared needs TestMain to call miniotest.Main (which stops the server)")
	}
	if shared.server == nil && shared.err == nil {
		shared.server, shared.err = startShared(t, bin)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.server
}

// REQUIRES: shared held.
func startShared(t testing.TB, bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "miniotest-")
	if err != nil {
		return nil, fmt.Errorf("miniotest: %w", err)
	}
	shared.dir = dir
	s := newServer(bin, filepath.Join(dir, "data"), filepath.Join(dir, "minio.log"),
		proctest.FreeAddr(t), proctest.FreeAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

var (
	prefixSeq    atomic.Int64
	notKeyPrefix = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
)

// Prefix returns a key prefix unique to this call, named after the test
// (no "/"), so tests sharing a bucket neither see nor delete each other's
// objects. Use it with objstore.WithPrefix.
func Prefix(t testing.TB) string {
	name := notKeyPrefix.ReplaceAllString(t.Name(), "-")
	if len(name) > 100 {
		name = name[:100]
	}
	return name + "-" + strconv.FormatInt(prefixSeq.Add(1), 10)
}
