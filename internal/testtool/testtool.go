package testtool

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The variables that turn a missing tool from a skip into a failure.
const (
	EnvRequireKcat    = "STRATA_REQUIRE_KCAT"
	EnvRequirePyKafka = "STRATA_REQUIRE_PYKAFKA"
)

// The commands that install each tool on Debian (scripts/deps.sh runs them).
const (
	InstallKcat           = "sudo apt-get install -y kcat"
	InstallConfluentKafka = "sudo apt-get install -y python3-confluent-kafka"
	InstallKafkaPython    = "sudo apt-get install -y python3-kafka"
)

// Kcat returns the kcat binary (librdkafka's command-line client), or skips
// or fails t as the package doc says.
func Kcat(t testing.TB) string {
	t.Helper()
	return RequireTool(t, "kcat", EnvRequireKcat, InstallKcat)
}

// ConfluentKafkaPython returns a python3 that imports confluent_kafka (the
// librdkafka binding), or skips or fails t.
func ConfluentKafkaPython(t testing.TB) string {
	t.Helper()
	return RequirePythonModule(t, "confluent_kafka", EnvRequirePyKafka, InstallConfluentKafka)
}

// KafkaPython returns a python3 that imports kafka (kafka-python, a client
// written in pure Python), or skips or fails t.
func KafkaPython(t testing.TB) string {
	t.Helper()
	return RequirePythonModule(t, "kafka", EnvRequirePyKafka, InstallKafkaPython)
}

// RequireTool returns the path of the program name, found on PATH or in
// $(go env GOPATH)/bin. Without it t fails when envVar is "1" and is
// skipped otherwise; both messages name installHint, the command that
// installs it.
func RequireTool(t testing.TB, name, envVar, installHint string) string {
	t.Helper()
	if p, err := find(name, gopathBins()); err == nil {
		return p
	}
	missing(t, name+" not found on PATH or in $(go env GOPATH)/bin", envVar, installHint)
	return ""
}

// RequirePythonModule returns the path of a python3 that imports module:
// the first python3 on PATH, else Debian's /usr/bin/python3, where the
// apt-get packages install their modules (a python3 from pyenv or a
// virtualenv earlier on PATH does not see them). Run the test's script
// with the returned path, not "python3". Without one t fails when envVar
// is "1" and is skipped otherwise; both messages name installHint.
func RequirePythonModule(t testing.TB, module, envVar, installHint string) string {
	t.Helper()
	python, why := findPython(module, pythons())
	if python == "" {
		missing(t, why, envVar, installHint)
	}
	return python
}

// pythons lists the python3 interpreters to try, in order.
func pythons() []string {
	var list []string
	if p, err := exec.LookPath("python3"); err == nil {
		list = append(list, p)
	}
	if p := "/usr/bin/python3"; !slices.Contains(list, p) {
		if _, err := os.Stat(p); err == nil {
			list = append(list, p)
		}
	}
	return list
}

// findPython returns the first of candidates that imports module, or ""
// and why none does.
func findPython(module string, candidates []string) (string, string) {
	if len(candidates) == 0 {
		return "", "python3 not found (on PATH or at /usr/bin/python3), needed for the Python module " + module
	}
	var failed []string
	for _, python := range candidates {
		out, err := exec.Command(python, "-c", "import "+module).CombinedOutput()
		if err == nil {
			return python, ""
		}
		failed = append(failed, python+": "+lastLine(out))
	}
	return "", "no python3 imports " + module + " (" + strings.Join(failed, "; ") + ")"
}

func missing(t testing.TB, what, envVar, installHint string) {
	t.Helper()
	if os.Getenv(envVar) == "1" {
		t.Fatalf("%s, and %s=1 (install: %s)", what, envVar, installHint)
		return
	}
	t.Skipf("%s: skipping (install: %s; `make test` does where it may)", what, installHint)
}

// gopathBins is every $(go env GOPATH) entry's bin directory, asked once.
var gopathBins = sync.OnceValue(func() []string {
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return nil
	}
	var dirs []string
	for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
		dirs = append(dirs, filepath.Join(dir, "bin"))
	}
	return dirs
})

// find looks for name on PATH, then in dirs.
func find(name string, dirs []string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, dir := range dirs {
		if q, lerr := exec.LookPath(filepath.Join(dir, name)); lerr == nil {
			return q, nil
		}
	}
	return "", err
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}
