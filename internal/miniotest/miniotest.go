package miniotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/strata-log/strata/internal/proctest"
)

// Credentials and bucket of every server this package starts.
const (
	RootUser     = "strata"
	RootPassword = "strata-secret-123"
	Bucket       = "strata-test"
)

// startTimeout bounds a start or restart: MinIO is live in about a second,
// but the machine may be busy with -race test binaries.
const startTimeout = 60 * time.Second

// Server is a running (or stopped) MinIO server with one bucket.
type Server struct {
	// Endpoint is the S3 address, 127.0.0.1:PORT; the port stays the same
	// across Stop and Restart.
	Endpoint  string
	AccessKey string
	SecretKey string
	Bucket    string
	// DataDir holds the objects; it survives Stop and Restart.
	DataDir string
	// LogPath collects the server's output, shown when a test fails.
	LogPath string

	bin  string
	args []string

	mu struct {
		sync.Mutex
		cmd  *exec.Cmd
		done chan struct{} // closed when cmd has exited
	}
}

// Binary finds the minio binary: $STRATA_MINIO_BIN, else
// $(go env GOPATH)/bin/minio, else minio on PATH.
func Binary() (string, error) {
	if p := os.Getenv("STRATA_MINIO_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("miniotest: STRATA_MINIO_BIN: %w (unset it to use the binary `make minio` installs)", err)
		}
		return p, nil
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "minio")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	return "", errors.New("miniotest: no minio binary (looked at $STRATA_MINIO_BIN, $(go env GOPATH)/bin/minio and PATH); " +
		"`make minio` installs it")
}

// requireBinary returns the binary, or skips the test under -short, or
// fails it: a test that needs MinIO must not pass silently in CI.
func requireBinary(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	if err == nil {
		return bin
	}
	if testing.Short() {
		t.Skipf("%v (skipped under -short)", err)
	}
	t.Fatal(err)
	return ""
}

// Start starts a MinIO server for t alone, with a fresh data directory and
// the bucket created; t's cleanup stops it. Use it for tests that stop or
// restart the server; others share one with Shared.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := requireBinary(t)
	dir := t.TempDir()
	s := newServer(bin, filepath.Join(dir, "data"), filepath.Join(dir, "minio.log"),
		proctest.FreeAddr(t), proctest.FreeAddr(t))
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("---- minio log ----\n%s", s.logTail())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.start(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func newServer(bin, dataDir, logPath, addr, consoleAddr string) *Server {
	return &Server{
		Endpoint: addr, AccessKey: RootUser, SecretKey: RootPassword, Bucket: Bucket,
		DataDir: dataDir, LogPath: logPath, bin: bin,
		// The console gets its own fixed port too: by default MinIO picks
		// a random one, which could be any port.
		args: []string{"server", dataDir, "--address", addr, "--console-address", consoleAddr, "--quiet"},
	}
}

// start runs the server and waits until it serves the bucket.
func (s *Server) start(ctx context.Context) error {
	if err := os.MkdirAll(s.DataDir, 0o755); err != nil {
		return fmt.Errorf("miniotest: %w", err)
	}
	if err := s.spawn(); err != nil {
		return err
	}
	if err := s.waitReady(ctx); err != nil {
		s.Kill()
		return fmt.Errorf("%w\n---- minio log ----\n%s", err, s.logTail())
	}
	return nil
}

func (s *Server) spawn() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runningLocked() {
		return errors.New("miniotest: server already running")
	}
	logFile, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("miniotest: %w", err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: a signal to the test does not reach it.
		Setpgid: true,
		// Killed with the test binary, even one that dies of a timeout
		// panic before its cleanups run.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("miniotest: start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	s.mu.cmd, s.mu.done = cmd, done
	return nil
}

// REQUIRES: s.mu held.
func (s *Server) runningLocked() bool {
	if s.mu.done == nil {
		return false
	}
	select {
	case <-s.mu.done:
		return false
	default:
		return true
	}
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

// waitReady polls the liveness endpoint, then makes sure the bucket exists
// (creating it on first start), failing early if the process exits.
func (s *Server) waitReady(ctx context.Context) error {
	s.mu.Lock()
	done := s.mu.done
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for !s.HealthLive(ctx) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("miniotest: minio on %s not live: %w", s.Endpoint, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	client, err := s.Client()
	if err != nil {
		return err
	}

	// Live comes before the object layer is up: S3 calls may still fail
	// with "server not initialized" for a moment.
	var lastErr error
	for {
		exists, err := client.BucketExists(ctx, s.Bucket)
		if err == nil && !exists {
			err = client.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{})
		}
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("miniotest: bucket %s on %s: %w (last error: %v)", s.Bucket, s.Endpoint, ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// probeClient keeps no idle connections, so probes leave no goroutines
// behind for leak checks to find.
var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// Client returns a minio-go client for the server (path-style, root
// credentials), for tests that look behind a store's back: wipe the
// bucket, make another one, plant an object. It keeps no idle
// connections, so it leaves no goroutines behind.
func (s *Server) Client() (*minio.Client, error) {
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Transport:    &http.Transport{DisableKeepAlives: true},
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		return nil, fmt.Errorf("miniotest: %w", err)
	}
	return c, nil
}

// Stop ends the server with SIGTERM (SIGKILL after 10 s) and waits for it.
// The data directory and port stay for Restart.
func (s *Server) Stop() { s.stop(syscall.SIGTERM, 10*time.Second) }

// Kill ends the server with SIGKILL, as a crash does, and waits for it.
func (s *Server) Kill() { s.stop(syscall.SIGKILL, 10*time.Second) }

func (s *Server) stop(sig syscall.Signal, timeout time.Duration) {
	s.mu.Lock()
	cmd, done := s.mu.cmd, s.mu.done
	s.mu.Unlock()
	if done == nil {
		return
	}
	// A paused process must run again to act on the signal.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return
	case <-time.After(timeout):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Pause freezes the server (SIGSTOP): connections are accepted by the
// kernel but never answered, the way a hung server behaves. Resume undoes
// it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runningLocked() {
		_ = syscall.Kill(-s.mu.cmd.Process.Pid, sig)
	}
}

// Restart starts a stopped server again on the same port and data
// directory, and waits until it serves the bucket or ctx ends.
func (s *Server) Restart(ctx context.Context) error {
	return s.start(ctx)
}

// logTail returns the end of the server's output.
func (s *Server) logTail() []byte {
	out, err := os.ReadFile(s.LogPath)
	if err != nil {
		return []byte(err.Error())
	}
	const n = 4096
	if len(out) > n {
		out = out[len(out)-n:]
		if i := bytes.IndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
	}
	return out
}

// HealthLive reports whether the server answers its liveness probe now.
func (s *Server) HealthLive(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Endpoint+"/minio/health/live", nil)
	if err != nil {
		return false
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
