package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-log/strata/internal/proctest"
)

// TestCLILedger drives `strata ledger` against metad and three real
// bookies: simpletest (which writes through the gRPC bookie client, reads
// back through a Reader and deletes), then a kept ledger through list,
// describe, read and delete.
func TestCLILedger(t *testing.T) {
	skipShort(t)
	meta := proctest.StartMetad(t, bins["metad"], 3)
	for i := 1; i <= 3; i++ {
		proctest.StartBookie(t, bins["bookie"], meta, fmt.Sprintf("b%d", i))
	}
	env := []string{"STRATA_METAD=" + strings.Join(meta.Endpoints(), ",")}

	out, errOut, code := strata(t, env, "ledger", "simpletest", "--entries", "3000", "--entry-size", "2000")
	if code != 0 || !strings.Contains(out, "OK") || !strings.Contains(out, "3000 of 3000 entries verified") ||
		!strings.Contains(out, "deleted") || !strings.Contains(out, "p99.9") {
		t.Fatalf("simpletest: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Logf("simpletest:\n%s", out)
	if !strings.Contains(errOut, "write: 3000/3000") || !strings.Contains(errOut, "read: 3000/3000") {
		t.Fatalf("simpletest progress on stderr: %q", errOut)
	}

	out, errOut, code = strata(t, env, "ledger", "simpletest", "--entries", "500", "--keep", "--output", "json")
	var res struct {
		LedgerID uint64 `json:"ledger_id"`
		Verified int    `json:"verified"`
		OK       bool   `json:"ok"`
		Deleted  bool   `json:"deleted"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || !res.OK || res.Verified != 500 || res.Deleted {
		t.Fatalf("simpletest --keep: exit %d, %+v, %v\nstdout: %s\nstderr: %s", code, res, err, out, errOut)
	}
	id := fmt.Sprint(res.LedgerID)

	out, _, code = strata(t, env, "ledger", "list")
	if code != 0 || !strings.Contains(out, id+"  ") || !strings.Contains(out, "CLOSED") || !strings.Contains(out, "500") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	out, _, code = strata(t, env, "ledger", "describe", id)
	if code != 0 || !strings.Contains(out, "E=3 Qw=3 Qa=2") || !strings.Contains(out, "last entry  499") ||
		!strings.Contains(out, "creator=strata ledger simpletest") {
		t.Fatalf("describe: exit %d\n%s", code, out)
	}
	out, _, code = strata(t, env, "ledger", "describe", id, "--output", "json")
	var desc struct {
		State     string `json:"state"`
		Entries   int64  `json:"entries"`
		Fragments []struct {
			Bookies []string `json:"bookies"`
		} `json:"fragments"`
	}
	if err := json.Unmarshal([]byte(out), &desc); err != nil || code != 0 || desc.State != "CLOSED" || desc.Entries != 500 ||
		len(desc.Fragments) != 1 || len(desc.Fragments[0].Bookies) != 3 {
		t.Fatalf("describe json: exit %d, %+v, %v\n%s", code, desc, err, out)
	}
	out, _, code = strata(t, env, "ledger", "read", id, "--from", "10", "--to", "19")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 10 || !strings.HasPrefix(lines[0], "10\t1024\t") || !strings.HasSuffix(lines[9], "\tOK") {
		t.Fatalf("read: exit %d\n%s", code, out)
	}
	_, errOut, code = strata(t, env, "ledger", "read", id, "--to", "500")
	if code != 1 || !strings.Contains(errOut, "last add confirmed") {
		t.Fatalf("read beyond the end: exit %d, %q", code, errOut)
	}
	out, _, code = strata(t, env, "ledger", "delete", id)
	if code != 0 || !strings.Contains(out, "OK deleted ledger "+id) {
		t.Fatalf("delete: exit %d\n%s", code, out)
	}
	_, errOut, code = strata(t, env, "ledger", "describe", id)
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("describe deleted: exit %d, %q", code, errOut)
	}
	_, errOut, code = strata(t, env, "ledger", "simpletest", "--ensemble", "4", "--write-quorum", "4")
	if code != 1 || !strings.Contains(errOut, "not enough bookies") {
		t.Fatalf("simpletest with too few bookies: exit %d, %q", code, errOut)
	}
}
