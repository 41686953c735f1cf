package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/strata-log/strata/internal/proctest"
)

// strata runs the CLI and returns stdout, stderr and the exit code.
func strata(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bins["strata"], args...)
	cmd.Env = append(cmd.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("strata %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestCLIMeta drives `strata meta` against a real cluster the way a user
// would, endpoints from STRATA_METAD.
func TestCLIMeta(t *testing.T) {
	skipShort(t)
	c := proctest.StartMetad(t, bins["metad"], 3)
	env := []string{"STRATA_METAD=" + strings.Join(c.Endpoints(), ",")}

	out, errOut, code := strata(t, env, "meta", "put", "/greeting", "hello")
	if code != 0 || !strings.HasPrefix(out, "OK revision=") {
		t.Fatalf("put: %d %q %q", code, out, errOut)
	}
	if out, _, code = strata(t, env, "meta", "get", "/greeting"); code != 0 || out != "hello\n" {
		t.Fatalf("get: %d %q", code, out)
	}
	_, errOut, code = strata(t, env, "meta", "get", "/missing")
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("get missing: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = strata(t, env, "meta", "put", "/greeting", "hi", "--expected-version", "7")
	if code != 1 || !strings.Contains(errOut, "version conflict") {
		t.Fatalf("cas conflict: exit %d, stderr %q", code, errOut)
	}
	if _, _, code = strata(t, env, "meta", "put", "/greeting", "hi", "--expected-version", "1"); code != 0 {
		t.Fatalf("cas at the right version: exit %d", code)
	}
	out, _, code = strata(t, env, "meta", "list", "/", "--output", "json")
	if code != 0 || !strings.Contains(out, "/greeting") {
		t.Fatalf("list: %d %q", code, out)
	}
	out, errOut, code = strata(t, env, "meta", "status", "--output", "json")
	if code != 0 {
		t.Fatalf("status: exit %d %q %q", code, out, errOut)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	if out, _, code = strata(t, env, "meta", "del", "/greeting"); code != 0 {
		t.Fatalf("del: %d %q", code, out)
	}
	if _, _, code = strata(t, env, "meta", "get", "/greeting"); code != 1 {
		t.Fatalf("get after delete: exit %d", code)
	}

	// An unhealthy cluster makes status exit non-zero.
	c.Members[2].Kill()
	out, _, code = strata(t, env, "meta", "status")
	if code == 0 || !strings.Contains(out, "unreachable") {
		t.Fatalf("status with a member down: exit %d\n%s", code, out)
	}
	t.Logf("status with a member down:\n%s", out)
}
