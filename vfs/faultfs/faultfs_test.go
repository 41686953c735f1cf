package faultfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/vfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    Faults
		bad     string // a substring of the error; "" for none
	}{
		{"", Faults{}, ""},
		{"\n  \n# sync-eio\n", Faults{}, ""},
		{"sync-stall 3s", Faults{SyncStall: 3 * time.Second}, ""},
		{"write-eio\nread-eio\nsync-eio\n", Faults{WriteEIO: true, ReadEIO: true, SyncEIO: true}, ""},
		{" sync-stall 250ms \r\nsync-eio", Faults{SyncStall: 250 * time.Millisecond, SyncEIO: true}, ""},
		{"sync-stall", Faults{}, "want sync-stall DURATION"},
		{"sync-stall -1s\nread-eio", Faults{ReadEIO: true}, "non-negative duration"},
		{"write-eoi\nsync-eio", Faults{SyncEIO: true}, `line 1 "write-eoi": unknown fault`},
		{"read-eio now", Faults{}, "takes no argument"},
	} {
		got, err := Parse(tc.content)
		if got != tc.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.content, got, tc.want)
		}
		if (err != nil) != (tc.bad != "") || (err != nil && !strings.Contains(err.Error(), tc.bad)) {
			t.Errorf("Parse(%q) error %v, want one containing %q", tc.content, err, tc.bad)
		}
	}
}

func TestFaultsString(t *testing.T) {
	for f, want := range map[Faults]string{
		{}: "healthy",
		{SyncStall: 3 * time.Second, SyncEIO: true}: "sync-stall 3s, sync-eio",
		{WriteEIO: true, ReadEIO: true}:             "write-eio, read-eio",
	} {
		if got := f.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", f, got, want)
		}
		if back, err := Parse(strings.ReplaceAll(want, ", ", "\n")); want != "healthy" && (err != nil || back != f) {
			t.Errorf("Parse(String()) of %+v = %+v, %v", f, back, err)
		}
	}
}

// setup returns an FS over a MemFS, controlled by a file in a temporary
// directory (polled rarely: tests call Reload), and a function that
// rewrites the control file and reloads it.
func setup(t *testing.T) (*FS, func(content string)) {
	t.Helper()
	control := filepath.Join(t.TempDir(), "faults")
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/data"); err != nil {
		t.Fatal(err)
	}
	f := New(mem, control, Options{PollInterval: time.Hour})
	t.Cleanup(func() { f.Close() })
	return f, func(content string) {
		t.Helper()
		tmp := control + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, control); err != nil {
			t.Fatal(err)
		}
		f.Reload()
	}
}

func isEIO(err error) bool { return errors.Is(err, syscall.EIO) }

// TestFaultsApplyToOpenFiles switches each fault on and off under files
// opened before, and checks that a failed operation did nothing.
func TestFaultsApplyToOpenFiles(t *testing.T) {
	f, control := setup(t)
	w, err := f.Create("/data/a")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := f.Open("/data/a")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}

	control("write-eio\n")
	if f.Faults() != (Faults{WriteEIO: true}) {
		t.Fatalf("faults %v", f.Faults())
	}
	if n, err := w.Write([]byte("lost")); n != 0 || !isEIO(err) {
		t.Fatalf("Write under write-eio = %d, %v", n, err)
	}
	if err := w.Sync(); err != nil {
		t.Fatalf("Sync under write-eio: %v", err)
	}
	if info, err := w.Stat(); err != nil || info.Size() != 5 {
		t.Fatalf("size after a failed write: %v %v, want 5", info.Size(), err)
	}

	control("read-eio")
	if n, err := r.ReadAt(make([]byte, 5), 0); n != 0 || !isEIO(err) {
		t.Fatalf("ReadAt under read-eio = %d, %v", n, err)
	}
	if _, err := w.Write([]byte(" world")); err != nil {
		t.Fatalf("Write under read-eio: %v", err)
	}

	control("sync-eio")
	if err := w.Sync(); !isEIO(err) {
		t.Fatalf("Sync under sync-eio: %v", err)
	}
	if err := f.SyncDir("/data"); !isEIO(err) {
		t.Fatalf("SyncDir under sync-eio: %v", err)
	}
	var pe *os.PathError
	if err := w.Sync(); !errors.As(err, &pe) || pe.Path != "/data/a" || pe.Op != "fdatasync" {
		t.Fatalf("Sync error %#v, want a PathError naming the file", err)
	}

	control("")
	if !f.Faults().Healthy() {
		t.Fatalf("faults %v after emptying the file", f.Faults())
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 11)
	if n, err := r.ReadAt(got, 0); n != 11 || string(got) != "hello world" {
		t.Fatalf("ReadAt = %d %q %v", n, got, err)
	}
	// Everything else passes through, faults or not.
	control("write-eio\nread-eio\nsync-eio")
	if names, err := f.List("/data"); err != nil || len(names) != 1 {
		t.Fatalf("List = %v, %v", names, err)
	}
	if err := f.Rename("/data/a", "/data/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.DiskUsage("/data"); err != nil {
		t.Fatal(err)
	}
}

// TestSyncStall: a sync waits out the stall, and a change of the control
// file (or Close) ends a stall in progress.
func TestSyncStall(t *testing.T) {
	f, control := setup(t)
	w, err := f.Create("/data/a")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	control("sync-stall 30ms")
	start := time.Now()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("Sync under sync-stall 30ms took %v", took)
	}

	stalled := make(chan struct{}, 1)
	f.stalling = func() { stalled <- struct{}{} }
	for _, end := range []struct {
		name string
		do   func()
		want error
	}{
		{"cleared", func() { control("") }, nil},
		{"turned to sync-eio", func() { control("sync-eio") }, syscall.EIO},
		{"closed", func() { f.Close() }, nil},
	} {
		control("sync-stall 1h")
		done := make(chan error, 1)
		go func() { done <- f.SyncDir("/data") }()
		<-stalled
		end.do()
		select {
		case err := <-done:
			if !errors.Is(err, end.want) {
				t.Fatalf("%s: SyncDir = %v, want %v", end.name, err, end.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the stall did not end", end.name)
		}
	}
	if !f.Faults().Healthy() {
		t.Fatalf("faults after Close: %v", f.Faults())
	}
}

// TestPollPicksUpChanges runs the poller: a change of the file is in
// force within a few polls, and a missing file is healthy.
func TestPollPicksUpChanges(t *testing.T) {
	control := filepath.Join(t.TempDir(), "faults")
	if err := os.WriteFile(control, []byte("read-eio\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := New(vfs.NewMem(), control, Options{PollInterval: time.Millisecond})
	defer f.Close()
	if f.Faults() != (Faults{ReadEIO: true}) {
		t.Fatalf("faults in force when New returns: %v", f.Faults())
	}
	if err := os.WriteFile(control, []byte("sync-stall 2s\nbogus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "sync-stall in force", func() bool {
		return f.Faults() == Faults{SyncStall: 2 * time.Second}
	})
	if err := os.Remove(control); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "healthy once the file is gone", func() bool { return f.Faults().Healthy() })
}

// TestFromEnv: unset, the file system comes back unwrapped (nothing is
// paid per operation); set, wrapped.
func TestFromEnv(t *testing.T) {
	mem := vfs.NewMem()
	t.Setenv(EnvVar, "")
	got, closeFn := FromEnv(mem, Options{})
	if got != vfs.FS(mem) {
		t.Fatalf("FromEnv with %s unset wrapped the file system: %T", EnvVar, got)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvVar, filepath.Join(t.TempDir(), "missing"))
	got, closeFn = FromEnv(mem, Options{})
	defer closeFn()
	if ffs, ok := got.(*FS); !ok || !ffs.Faults().Healthy() {
		t.Fatalf("FromEnv with %s set = %T, want a healthy *FS", EnvVar, got)
	}
}
