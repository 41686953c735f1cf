package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/internal/testtool"
	"github.com/strata-log/strata/recordbatch"
)

// quickstartCommands returns the shell code blocks of README.md between
// <!-- quickstart --> and <!-- /quickstart -->, as lists of command lines
// (comment lines dropped).
func quickstartCommands(t *testing.T) [][]string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "<!-- quickstart -->")
	end := strings.Index(text, "<!-- /quickstart -->")
	if start < 0 || end < start {
		t.Fatal("README.md has no <!-- quickstart --> ... <!-- /quickstart --> section")
	}
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(text[start:end], "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			if in {
				blocks = append(blocks, cur)
				cur = nil
			}
			in = !in
		case in && strings.TrimSpace(line) != "" && !strings.HasPrefix(strings.TrimSpace(line), "#"):
			cur = append(cur, line)
		}
	}
	return blocks
}

// TestQuickstart runs README.md's quick start the way a new user would: a
// cluster with `strata dev` in a fresh directory, then every command of the
// second block, exactly as written, through sh in that directory (bin/
// holds the test's binaries). The records must come back in order. The
// kcat lines run when kcat is installed (they are skipped, saying so,
// otherwise; STRATA_REQUIRE_KCAT=1 makes that a failure), against the
// test's Kafka port instead of 9092: kcat must list the brokers, and its
// consumer must read every record, the CLI's and kcat's own, on the
// partition Strata's partitioner gives its key.
func TestQuickstart(t *testing.T) {
	skipShort(t)
	blocks := quickstartCommands(t)
	if len(blocks) != 2 || len(blocks[0]) != 1 || blocks[0][0] != "make run" {
		t.Fatalf("quick start: want a `make run` block and a block of commands, got %q", blocks)
	}
	if bins["broker"] == "" {
		t.Skip("no broker binary in this test run (e2e TestMain builds cmd/broker once it exists)")
	}
	var kcat string
	t.Run("kcat", func(t *testing.T) { kcat = testtool.Kcat(t) })

	// A fresh directory, with bin/ holding the binaries `make build` makes.
	dir := t.TempDir()
	if err := os.Symlink(filepath.Dir(bins["strata"]), filepath.Join(dir, "bin")); err != nil {
		t.Fatal(err)
	}
	env := []string{"STRATA_PROFILE=" + filepath.Join(dir, "profile.json"), "STRATA_METAD=", "STRATA_BROKER="}
	kafka := startQuickstartDev(t, dir, env)

	var produced []string // the produce commands' input lines, in order
	var consumed, kcatConsumed string
	for _, line := range blocks[1] {
		isKcat := strings.HasPrefix(line, "kcat ") || strings.Contains(line, "| kcat ")
		if isKcat && kcat == "" {
			t.Logf("skipping %q: kcat is not installed", line)
			continue
		}
		if isKcat {
			// The test's Kafka port, not the default one.
			line = kcatLine(line, kcat, kafka)
		}
		stdout, stderr := runQuickstartLine(t, dir, env, line)
		if strings.Contains(line, "bin/strata produce ") || (isKcat && strings.Contains(line, " -P ")) {
			m := regexp.MustCompile(`printf '([^']*)'`).FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("cannot find the produce input in %q", line)
			}
			in := strings.Split(strings.TrimSuffix(strings.ReplaceAll(m[1], `\n`, "\n"), "\n"), "\n")
			if want := fmt.Sprintf("produced %d records to orders", len(in)); !isKcat && !strings.Contains(stderr, want) {
				t.Fatalf("produce: stderr %q, want %q", stderr, want)
			}
			produced = append(produced, in...)
		}
		switch {
		case strings.Contains(line, "bin/strata consume "):
			// Before kcat produces: the CLI's records only.
			consumed = stdout
			checkQuickstartConsumed(t, consumed, produced)
		case isKcat && strings.Contains(line, " -L"):
			if !strings.Contains(stdout, "2 brokers:") || !strings.Contains(stdout, `topic "orders" with 3 partitions`) {
				t.Fatalf("kcat -L lists no 2 brokers and topic orders:\n%s", stdout)
			}
		case isKcat && strings.Contains(line, " -C "):
			kcatConsumed = stdout
			checkQuickstartConsumed(t, kcatConsumed, produced)
		}
	}
	if consumed == "" || (kcat != "" && kcatConsumed == "") {
		t.Fatalf("the quick start consumed %q with the CLI and %q with kcat", consumed, kcatConsumed)
	}
}

// startQuickstartDev runs `make run`'s `bin/strata dev` in dir, on ports
// moved off the defaults so that the test does not collide with a
// developer's cluster (the profile carries them to the commands), until
// it is ready; it returns the first broker's Kafka address.
func startQuickstartDev(t *testing.T, dir string, env []string) string {
	t.Helper()
	ports, _ := devPortFlags(t)
	dev := exec.Command(filepath.Join("bin", "strata"), append([]string{"dev"}, ports...)...)
	dev.Dir = dir
	dev.Env = append(os.Environ(), env...)
	var devOut bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	dev.Stdout, dev.Stderr = pw, pw
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() {
		_ = dev.Process.Signal(syscall.SIGINT)
		_ = dev.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			devOut.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "cluster ready") {
				ready <- nil
			}
		}
		ready <- errors.New("strata dev exited")
	}()
	start := time.Now()
	select {
	case err := <-ready:
		if err != nil {
			// The reader sends its error after the output ended: devOut
			// is complete.
			t.Fatalf("%v:\n%s", err, devOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("strata dev not ready within 30s")
	}
	t.Logf("strata dev ready in %s", time.Since(start).Round(time.Millisecond))
	st, err := devcluster.LoadState(filepath.Join(dir, ".strata"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(devcluster.KafkaBootstrap(st.Nodes), ",")[0]
}

// kcatLine is a README kcat line run with the kcat binary found, against
// kafka instead of localhost:9092.
func kcatLine(line, kcat, kafka string) string {
	line = strings.ReplaceAll(line, "localhost:9092", kafka)
	return regexp.MustCompile(`(^|\| )kcat `).ReplaceAllString(line, "${1}"+kcat+" ")
}

// runQuickstartLine runs one command line through sh in dir; it fails the
// test when the command fails.
func runQuickstartLine(t *testing.T, dir string, env []string, line string) (string, string) {
	t.Helper()
	sh := exec.Command("sh", "-c", line)
	sh.Dir = dir
	sh.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	sh.Stdout, sh.Stderr = &stdout, &stderr
	began := time.Now()
	err := sh.Run()
	t.Logf("$ %s   (%s)\n%s%s", line, time.Since(began).Round(time.Millisecond), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", line, err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// checkQuickstartConsumed checks consumed, lines "KEY=VALUE (pP@OFFSET)",
// against the records produced ("KEY:VALUE", in produce order to the
// 3-partition topic): each record on the partition its key hashes to, at
// the next offset of that partition; per partition in produce order.
func checkQuickstartConsumed(t *testing.T, consumed string, produced []string) {
	t.Helper()
	next := map[int32]int64{}
	want := map[int32][]string{}
	for _, in := range produced {
		k, v, _ := strings.Cut(in, ":")
		p := recordbatch.PartitionForKey([]byte(k), 3)
		want[p] = append(want[p], fmt.Sprintf("%s=%s (p%d@%d)", k, v, p, next[p]))
		next[p]++
	}
	got := map[int32][]string{}
	for _, l := range strings.Split(strings.TrimSuffix(consumed, "\n"), "\n") {
		var p int32
		i := strings.LastIndex(l, "(p")
		if i < 0 {
			t.Fatalf("consumed line %q: no (pP@OFFSET)", l)
		}
		if _, err := fmt.Sscanf(l[i:], "(p%d@", &p); err != nil {
			t.Fatalf("consumed line %q: %v", l, err)
		}
		got[p] = append(got[p], l)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("consumed, per partition:\n%v\nwant:\n%v", got, want)
	}
}

// freePorts finds n consecutive free ports from about first, with their
// admin ports (+adminOffset) free too, all below 32000 (under the
// ephemeral range).
func freePorts(t *testing.T, first, n, adminOffset int) int {
	t.Helper()
	for p := first; p+n-1+adminOffset < 32000; p += 7 {
		ok := true
		for i := 0; i < n && ok; i++ {
			ok = portFree(fmt.Sprintf("127.0.0.1:%d", p+i)) && portFree(fmt.Sprintf("127.0.0.1:%d", p+i+adminOffset))
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free ports")
	return 0
}

func portFree(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
