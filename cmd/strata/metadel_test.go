package main

import (
	"bytes"
	"context"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/proto/metadpb"
)

// fakeMetad serves List and Delete over an in-memory map: enough for
// `strata meta del`.
type fakeMetad struct {
	metadpb.UnimplementedMetadServer
	addr string

	mu      sync.Mutex
	keys    map[string]bool
	deletes int // Delete calls served
}

func startFakeMetad(t *testing.T, keys ...string) *fakeMetad {
	t.Helper()
	ln := proctest.Listen(t)
	fm := &fakeMetad{addr: ln.Addr().String(), keys: map[string]bool{}}
	for _, k := range keys {
		fm.keys[k] = true
	}
	srv := grpc.NewServer()
	metadpb.RegisterMetadServer(srv, fm)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return fm
}

func (fm *fakeMetad) List(_ context.Context, req *metadpb.ListRequest) (*metadpb.ListResponse, error) {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	var keys []string
	for k := range fm.keys {
		if strings.HasPrefix(k, req.Prefix) && k > req.StartAfter {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	resp := &metadpb.ListResponse{Revision: 7}
	if req.Limit > 0 && len(keys) > int(req.Limit) {
		keys, resp.More = keys[:req.Limit], true
	}
	for _, k := range keys {
		resp.Kvs = append(resp.Kvs, &metadpb.KeyValue{Key: k})
	}
	return resp, nil
}

func (fm *fakeMetad) Delete(_ context.Context, req *metadpb.DeleteRequest) (*metadpb.DeleteResponse, error) {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	fm.deletes++
	var n int64
	for k := range fm.keys {
		if k == req.Key || (req.Prefix && strings.HasPrefix(k, req.Key)) {
			delete(fm.keys, k)
			n++
		}
	}
	return &metadpb.DeleteResponse{Deleted: n, Revision: 8}, nil
}

func (fm *fakeMetad) count() int {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	return len(fm.keys)
}

// metaRun runs `strata ARGS --metad ADDR` in-process with stdin, and with
// stdin taken for a terminal or not.
func metaRun(t *testing.T, addr, stdin string, terminal bool, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	saved := stdinIsTerminal
	stdinIsTerminal = func(io.Reader) bool { return terminal }
	defer func() { stdinIsTerminal = saved }()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(args, "--metad", addr))
	_, err := root.ExecuteC()
	if msg := cli.Message(err); msg != "" {
		errOut.WriteString("strata: " + msg + "\n")
	}
	return out.String(), errOut.String(), cli.ExitCode(err)
}

// TestMetaDeletePrefixNeedsYes: `meta del --prefix` that
// matches more than one key deletes nothing without --yes when stdin is
// not a terminal, saying how many keys would go; on a terminal it asks.
func TestMetaDeletePrefixNeedsYes(t *testing.T) {
	keys := []string{"/a/1", "/a/2", "/a/3", "/b/1"}
	for _, tc := range []struct {
		name      string
		args      []string
		stdin     string
		terminal  bool
		code      int
		stdout    string
		stderr    string // contained
		remaining int
	}{
		{name: "non-terminal, no --yes", args: []string{"/a/", "--prefix"},
			code: 2, stderr: `would delete 3 keys: pass --yes`, remaining: 4},
		{name: "--yes", args: []string{"/a/", "--prefix", "--yes"},
			stdout: "OK deleted=3\n", remaining: 1},
		{name: "-y", args: []string{"/a/", "--prefix", "-y"},
			stdout: "OK deleted=3\n", remaining: 1},
		{name: "one match needs no --yes", args: []string{"/b/", "--prefix"},
			stdout: "OK deleted=1\n", remaining: 3},
		{name: "no match needs no --yes", args: []string{"/c/", "--prefix"},
			stdout: "OK deleted=0\n", remaining: 4},
		{name: "a single key needs no --yes", args: []string{"/a/1"},
			stdout: "OK deleted=1\n", remaining: 3},
		{name: "terminal, answered y", args: []string{"/a/", "--prefix"}, stdin: "y\n", terminal: true,
			stdout: "OK deleted=3\n", stderr: `Delete 3 keys under "/a/"? [y/N] `, remaining: 1},
		{name: "terminal, answered yes", args: []string{"/a/", "--prefix"}, stdin: "YES\n", terminal: true,
			stdout: "OK deleted=3\n", remaining: 1},
		{name: "terminal, answered n", args: []string{"/a/", "--prefix"}, stdin: "n\n", terminal: true,
			code: 1, stderr: "not confirmed; nothing deleted", remaining: 4},
		{name: "terminal, no answer", args: []string{"/a/", "--prefix"}, terminal: true,
			code: 1, stderr: "not confirmed; nothing deleted", remaining: 4},
		{name: "terminal, --yes asks nothing", args: []string{"/a/", "--prefix", "--yes"}, terminal: true,
			stdout: "OK deleted=3\n", remaining: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fm := startFakeMetad(t, keys...)
			out, errOut, code := metaRun(t, fm.addr, tc.stdin, tc.terminal, append([]string{"meta", "del"}, tc.args...)...)
			if code != tc.code || out != tc.stdout || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
					code, out, errOut, tc.code, tc.stdout, tc.stderr)
			}
			if n := fm.count(); n != tc.remaining {
				t.Fatalf("%d keys remain, want %d", n, tc.remaining)
			}
			fm.mu.Lock()
			deletes := fm.deletes
			fm.mu.Unlock()
			if tc.code != 0 && deletes != 0 {
				t.Fatalf("refused, yet %d Delete calls reached metad", deletes)
			}
			if !tc.terminal && strings.Contains(errOut, "[y/N]") {
				t.Fatalf("asked without a terminal: %q", errOut)
			}
		})
	}
}
