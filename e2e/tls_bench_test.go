package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
)

// TestTLSCost measures what TLS on every link costs (the target: at most
// 15% of acknowledged throughput and 1 ms of publish->ack p50 at 5,000
// records/s), side by side in one run: a plaintext cluster, then the same
// cluster with mutual TLS on every link (1 metad, 3 bookies, 1 broker;
// records of 1 KiB, acks=quorum, `strata bench produce` as the client).
// On each it measures the acknowledged MB/s at the highest rate the
// producer reaches, then publish->ack latency open-loop at 5,000
// records/s, and the CPU seconds every process spent in each phase. The
// machine's own limit, 4 KiB O_DSYNC writes in the test's directory, is
// measured before and after. It only reports (no pass/fail: shared
// machines disturb it); run it on purpose:
//
//	STRATA_TLS_BENCH=1 go test ./e2e -run TestTLSCost -v -timeout 20m
//
// STRATA_TLS_BENCH_DURATION (default 20s) is the length of each phase.
func TestTLSCost(t *testing.T) {
	if os.Getenv("STRATA_TLS_BENCH") != "1" {
		t.Skip("a benchmark: set STRATA_TLS_BENCH=1 to run it")
	}
	skipShort(t)
	phase := 20 * time.Second
	if v := os.Getenv("STRATA_TLS_BENCH_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("STRATA_TLS_BENCH_DURATION: %v", err)
		}
		phase = d
	}
	diskBefore := dsyncLatency(t, t.TempDir(), 4096, 400)
	plain := measureCost(t, false, phase)
	secure := measureCost(t, true, phase)
	diskAfter := dsyncLatency(t, t.TempDir(), 4096, 400)

	var b strings.Builder
	fmt.Fprintf(&b, "4 KiB O_DSYNC write: before p50 %s p99 %s, after p50 %s p99 %s\n",
		ms(diskBefore[0]), ms(diskBefore[1]), ms(diskAfter[0]), ms(diskAfter[1]))
	fmt.Fprintf(&b, "%-9s %10s %10s %9s %9s %9s %s\n", "", "max MB/s", "rec/s", "p50 ms", "p99 ms", "@rec/s", "CPU s (max phase | 5k phase)")
	for _, r := range []costResult{plain, secure} {
		fmt.Fprintf(&b, "%-9s %10.2f %10.0f %9.2f %9.2f %9.0f %s | %s\n", r.name, r.max.MBPerSec, r.max.RecordsPerSec,
			r.rated.p50(), r.rated.p99(), r.rated.RecordsPerSec, r.maxCPU, r.ratedCPU)
	}
	fmt.Fprintf(&b, "TLS/plaintext: throughput %.1f%% (%.1f%% lower), publish->ack p50 %+.2f ms, p99 %+.2f ms, CPU per MB at max rate %.2fx\n",
		100*secure.max.MBPerSec/plain.max.MBPerSec, 100*(1-secure.max.MBPerSec/plain.max.MBPerSec),
		secure.rated.p50()-plain.rated.p50(), secure.rated.p99()-plain.rated.p99(),
		(secure.maxCPU.total()/secure.max.MBPerSec)/(plain.maxCPU.total()/plain.max.MBPerSec))
	t.Logf("TLS cost (phases of %s):\n%s", phase, b.String())
}

// benchJSON is what `strata bench produce --output json` prints.
type benchJSON struct {
	Records       int64   `json:"records"`
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
	Errors        int64   `json:"errors"`
	Latency       []struct {
		Kind string  `json:"kind"`
		P50  float64 `json:"p50_ms"`
		P99  float64 `json:"p99_ms"`
	} `json:"latency"`
}

func (b benchJSON) p50() float64 { return b.lat(func(l float64, _ float64) float64 { return l }) }
func (b benchJSON) p99() float64 { return b.lat(func(_ float64, l float64) float64 { return l }) }
func (b benchJSON) lat(pick func(p50, p99 float64) float64) float64 {
	for _, l := range b.Latency {
		if l.Kind == "publish_to_ack" {
			return pick(l.P50, l.P99)
		}
	}
	return -1
}

// cpuUse is CPU seconds by process name over a phase.
type cpuUse map[string]float64

func (c cpuUse) total() float64 {
	var s float64
	for _, v := range c {
		s += v
	}
	return s
}

func (c cpuUse) String() string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names)+1)
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f", n, c[n]))
	}
	return strings.Join(append(parts, fmt.Sprintf("total %.1f", c.total())), ", ")
}

type costResult struct {
	name             string
	max, rated       benchJSON
	maxCPU, ratedCPU cpuUse
}

// measureCost starts a cluster (TLS or not), runs the two phases and
// stops it.
func measureCost(t *testing.T, tlsOn bool, phase time.Duration) costResult {
	t.Helper()
	r := costResult{name: "plaintext"}
	var nodeArgs func(role, name string) []string
	var cliArgs []string
	if tlsOn {
		r.name = "TLS"
		p := newTestPKI(t, "strata bench CA")
		certs := map[string]pki.Files{}
		nodeArgs = func(role, name string) []string {
			if _, ok := certs[role+"-"+name]; !ok {
				certs[role+"-"+name] = p.issue(pki.Request{Role: role, Name: name})
			}
			return tlsArgs(certs[role+"-"+name])
		}
		// An admin certificate: allowed everything the bench does.
		admin := p.issue(pki.Request{Role: pki.RoleAdmin, Name: "bench"})
		cliArgs = []string{"--tls-ca", admin.CA, "--tls-cert", admin.Cert, "--tls-key", admin.Key}
	} else {
		nodeArgs = func(string, string) []string { return nil }
	}
	meta := proctest.StartMetad(t, bins["metad"], 1, nodeArgs(pki.RoleMetad, "metad")...)
	procs := map[string]*proctest.Process{"metad": meta.Members[0].Process}
	var bookies []*proctest.BookieNode
	for i := 1; i <= 3; i++ {
		b := proctest.StartBookie(t, bins["bookie"], meta, fmt.Sprintf("b%d", i), nodeArgs(pki.RoleBookie, fmt.Sprintf("b%d", i))...)
		bookies = append(bookies, b)
		procs[fmt.Sprintf("bookie-%d", i)] = b.Process
	}
	broker := proctest.StartBroker(t, bins["broker"], meta, "k1", nodeArgs(pki.RoleBroker, "k1")...)
	procs["broker"] = broker.Process
	defer func() {
		broker.Stop(10 * time.Second)
		for _, b := range bookies {
			b.Stop(10 * time.Second)
		}
		meta.Members[0].Stop(10 * time.Second)
	}()

	run := func(topic string, rate int) (benchJSON, cpuUse) {
		t.Helper()
		before := cpuOf(t, procs)
		args := append([]string{"--broker", broker.Listen, "--output", "json", "--timeout", "30s"}, cliArgs...)
		args = append(args, "bench", "produce", "--topic", topic, "--partitions", "8", "--record-size", "1024",
			"--producers", "4", "--rate", strconv.Itoa(rate), "--duration", phase.String())
		cmd := exec.Command(bins["strata"], args...)
		cmd.Env = append(cmd.Environ(), "STRATA_PROFILE="+filepath.Join(t.TempDir(), "none.json"), "STRATA_METAD=", "STRATA_BROKER=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: strata %v: %v\n%s\n%s", r.name, args, err, stdout.String(), stderr.String())
		}
		use := cpuOf(t, procs)
		for n := range use {
			use[n] -= before[n]
		}
		use["strata bench"] = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		var out benchJSON
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("%s: bench output %q: %v", r.name, stdout.String(), err)
		}
		if out.Errors != 0 {
			t.Fatalf("%s: bench errors: %s", r.name, stdout.String())
		}
		t.Logf("%s, rate %d: %.2f MB/s, %.0f records/s, publish->ack p50 %.2f ms p99 %.2f ms; CPU s: %s",
			r.name, rate, out.MBPerSec, out.RecordsPerSec, out.p50(), out.p99(), use)
		return out, use
	}
	r.max, r.maxCPU = run("max", 0)
	r.rated, r.ratedCPU = run("rated", 5000)
	return r
}

// cpuOf reads each process's user+system CPU seconds from /proc/PID/stat.
func cpuOf(t *testing.T, procs map[string]*proctest.Process) cpuUse {
	t.Helper()
	use := cpuUse{}
	for name, p := range procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Fields after the command name, which is in parentheses and may
		// hold spaces: state is field 3, utime 14, stime 15.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		use[name] = (utime + stime) / 100 // USER_HZ is 100 on Linux
	}
	return use
}

// dsyncLatency writes n blocks of size bytes with O_DSYNC in dir and
// returns the p50 and p99 write latency: the floor under any acknowledged
// (journal-synced) write on this machine at this moment.
func dsyncLatency(t *testing.T, dir string, size, n int) [2]time.Duration {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "dsync"), os.O_CREATE|os.O_WRONLY|syscall.O_DSYNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, size)
	lat := make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)
	return [2]time.Duration{lat[n/2], lat[n*99/100]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
