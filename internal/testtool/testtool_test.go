package testtool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTB records Skip and Fatal instead of ending the test's goroutine.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Skipf(format string, args ...any)  { f.skipped = fmt.Sprintf(format, args...) }
func (f *fakeTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

const testEnv = "STRATA_TESTTOOL_TEST_REQUIRE"

// program writes an executable script called name into a new directory
// and returns the directory.
func program(t *testing.T, name string) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRequireToolFoundOnPath(t *testing.T) {
	dir := program(t, "strata-probe")
	t.Setenv("PATH", dir)
	f := &fakeTB{}
	if got := RequireTool(f, "strata-probe", testEnv, "make probe"); got != filepath.Join(dir, "strata-probe") || f.skipped != "" || f.failed != "" {
		t.Fatalf("RequireTool = %q, skipped %q, failed %q", got, f.skipped, f.failed)
	}
}

func TestFindLooksInGopathBin(t *testing.T) {
	dir := program(t, "strata-probe")
	t.Setenv("PATH", t.TempDir())
	if got, err := find("strata-probe", []string{filepath.Join(dir, "missing"), dir}); err != nil || got != filepath.Join(dir, "strata-probe") {
		t.Fatalf("find = %q, %v", got, err)
	}
	if got, err := find("strata-probe", nil); err == nil {
		t.Fatalf("find without the directory = %q", got)
	}
}

func TestMissingToolSkipsOrFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, require := range []string{"", "0", "1"} {
		t.Setenv(testEnv, require)
		f := &fakeTB{}
		if got := RequireTool(f, "strata-no-such-program", testEnv, "sudo apt-get install probe"); got != "" {
			t.Fatalf("%s=%q: RequireTool = %q for a missing program", testEnv, require, got)
		}
		msg, other := f.skipped, f.failed
		if require == "1" {
			msg, other = f.failed, f.skipped
		}
		if other != "" || !strings.Contains(msg, "strata-no-such-program not found") || !strings.Contains(msg, "install: sudo apt-get install probe") {
			t.Fatalf("%s=%q: skipped %q, failed %q", testEnv, require, f.skipped, f.failed)
		}
		if require == "1" && !strings.Contains(msg, testEnv+"=1") {
			t.Fatalf("the failure does not name %s: %q", testEnv, msg)
		}
	}
}

func TestRequirePythonModule(t *testing.T) {
	if len(pythons()) == 0 {
		t.Skip("no python3 here")
	}
	f := &fakeTB{}
	if got := RequirePythonModule(f, "json", testEnv, "none"); got == "" || f.skipped != "" || f.failed != "" {
		t.Fatalf("json: %q, skipped %q, failed %q", got, f.skipped, f.failed)
	}
	t.Setenv(testEnv, "1")
	f = &fakeTB{}
	if got := RequirePythonModule(f, "strata_no_such_module", testEnv, "sudo apt-get install python3-probe"); got != "" ||
		!strings.Contains(f.failed, "no python3 imports strata_no_such_module") || !strings.Contains(f.failed, "python3-probe") {
		t.Fatalf("a missing module: %q, skipped %q, failed %q", got, f.skipped, f.failed)
	}
}

// TestFindPythonTriesEachInterpreter: a python3 that lacks the module (one
// from pyenv, say) does not hide a later one that has it (Debian's, where
// apt-get installs the Kafka clients).
func TestFindPythonTriesEachInterpreter(t *testing.T) {
	dir := t.TempDir()
	without := filepath.Join(dir, "without")
	with := filepath.Join(dir, "with")
	for path, script := range map[string]string{without: "echo 'ModuleNotFoundError: probe' >&2; exit 1", with: "exit 0"} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got, why := findPython("probe", []string{without, with}); got != with {
		t.Fatalf("findPython = %q (%s), want %q", got, why, with)
	}
	if got, why := findPython("probe", []string{without}); got != "" || !strings.Contains(why, without+": ModuleNotFoundError: probe") {
		t.Fatalf("findPython = %q, %q", got, why)
	}
	if got, why := findPython("probe", nil); got != "" || !strings.Contains(why, "python3 not found") {
		t.Fatalf("findPython without interpreters = %q, %q", got, why)
	}
}

// TestKafkaClients runs the helpers the Kafka compatibility tests use: on
// a machine where `make test` installed the clients they are found, and
// with STRATA_REQUIRE_KCAT and STRATA_REQUIRE_PYKAFKA set (CI) they must be.
func TestKafkaClients(t *testing.T) {
	for name, require := range map[string]func(testing.TB) string{
		"kcat": Kcat, "confluent_kafka": ConfluentKafkaPython, "kafka": KafkaPython,
	} {
		t.Run(name, func(t *testing.T) {
			if p := require(t); p == "" {
				t.Fatal("empty path")
			}
		})
	}
}
