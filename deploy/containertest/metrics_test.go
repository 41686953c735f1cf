package containertest

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

// scrape reads addr's /metrics into name -> value for the series without
// labels (and the last value seen of each labelled family under its bare
// name; enough for the gauges the tests read).
func scrape(addr string) (map[string]float64, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", addr, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			// "# TYPE name kind" names families that have no sample yet.
			if f := strings.Fields(line); len(f) >= 3 && f[1] == "TYPE" {
				if _, ok := out[f[2]]; !ok {
					out[f[2]] = 0
				}
			}
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name, rest = line[:i], line[strings.LastIndexByte(line, '}')+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

var metricName = regexp.MustCompile(`strata_[a-z0-9_]+`)

// monitoringNames lists every strata_* metric name the dashboards and the
// alert rules use, histogram suffixes removed.
func monitoringNames(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("../monitoring/grafana/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards under deploy/monitoring/grafana: %v", err)
	}
	files = append(files, "../monitoring/alerts.yaml")
	names := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range metricName.FindAllString(string(b), -1) {
			for _, suf := range []string{"_bucket", "_count", "_sum"} {
				n = strings.TrimSuffix(n, suf)
			}
			if !contains(names[n], filepath.Base(f)) {
				names[n] = append(names[n], filepath.Base(f))
			}
		}
	}
	return names
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Every metric a dashboard or an alert names is exported by some role.
// Labelled families appear on /metrics only once they have a sample, so
// this runs after the fault scenarios (produce, fetch, ownership moves,
// re-election, restarts) and a group consume.
func testMonitoringNamesExistingMetrics(t *testing.T, c *cluster) {
	// A consumer group, so the group coordinator's metrics exist.
	if out, err := c.exec("broker-1", "consume", "kill-each", "-g", "dash", "-e", "-f", "%o\n"); err != nil {
		t.Fatalf("group consume: %v\n%s", err, out)
	}
	// Group lag is recomputed every --lag-interval (1 s here): poll.
	want := monitoringNames(t)
	var missing []string
	present := func() bool {
		exported := map[string]bool{}
		for _, s := range c.sortedServices() {
			m, err := scrape(c.nodes[s].adminAddr())
			if err != nil {
				t.Fatalf("scrape %s: %v", s, err)
			}
			for n := range m {
				for _, suf := range []string{"_bucket", "_count", "_sum"} {
					n = strings.TrimSuffix(n, suf)
				}
				exported[n] = true
			}
		}
		missing = missing[:0]
		for n, where := range want {
			if !exported[n] {
				missing = append(missing, fmt.Sprintf("%s (in %s)", n, strings.Join(where, ", ")))
			}
		}
		return len(missing) == 0
	}
	// Some series appear only once their first event happens: give them
	// 30 s, then report what is still missing.
	_ = testwait.Poll(30*time.Second, "every metric named by dashboards and alerts", func() error {
		if !present() {
			return fmt.Errorf("%d missing", len(missing))
		}
		return nil
	})
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("dashboards or alerts name %d metrics no role exports:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
}
