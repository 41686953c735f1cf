package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/cmd/strata/internal/chaos/history"
)

// Options configures a run.
type Options struct {
	// Seed chooses every fault, target and duration.
	Seed int64
	// Duration is how long faults are injected under the workload.
	Duration time.Duration
	// Kinds are the fault kinds to inject (default: every kind, Kinds).
	Kinds []string
	// BinDir holds the metad, bookie and broker binaries; MinIO is the
	// minio binary.
	BinDir, MinIO string
	// Dir holds the nodes' data and logs; it is created, and removed after
	// a run that found nothing wrong unless Keep.
	Dir  string
	Keep bool
	// Name prefixes the network's namespaces and links (default "sc").
	Name string
	// Report, when set, receives the report as JSON.
	Report string
	// Out receives progress and the report's table.
	Out io.Writer
}

// Validate says what is wrong with o.
func (o Options) Validate() error {
	var errs []error
	if o.Duration < 10*time.Second {
		errs = append(errs, fmt.Errorf("--duration %s: at least 10s", o.Duration))
	}
	for _, k := range o.Kinds {
		if !slices.Contains(Kinds(), k) {
			errs = append(errs, fmt.Errorf("--faults: unknown kind %q (kinds: %s)", k, strings.Join(Kinds(), ", ")))
		}
	}
	if o.MinIO == "" {
		errs = append(errs, errors.New("no minio binary found (run 'make minio')"))
	}
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("needs root: network namespaces, iptables and loop-mounted disks"))
	}
	return errors.Join(errs...)
}

// Run starts a cluster, runs the workload for o.Duration while the
// nemesis injects faults, heals everything, reads every partition back
// and checks the whole history. It returns the report; err is about the
// run itself (a cluster that would not start, a final read that could not
// finish), not about what the checker found: Report.OK says that.
func Run(ctx context.Context, o Options) (*history.Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Name == "" {
		o.Name = "sc"
	}
	kinds := map[string]bool{}
	for _, k := range cmpOr(o.Kinds, Kinds()) {
		kinds[k] = true
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	out := o.Out
	fmt.Fprintf(out, "chaos: seed %d, %s of faults (%s); data and logs in %s\n", o.Seed, o.Duration, strings.Join(cmpOr(o.Kinds, Kinds()), ","), o.Dir)
	c, err := startCluster(ctx, o.Name, o.Dir, o.BinDir, o.MinIO, out)
	if err != nil {
		return nil, err
	}
	defer c.close()
	rec := history.NewRecorder()
	rec.MarkCompacted(topicCompacted)
	began := time.Now()
	if err := runWorkload(ctx, c, o, kinds, rec); err != nil {
		return nil, err
	}
	report := rec.Check()
	report.Seed = o.Seed
	report.DurationSeconds = time.Since(began).Seconds()
	if err := report.WriteTable(out); err != nil {
		return nil, err
	}
	if !report.OK() {
		fmt.Fprintf(out, "reproduce: strata chaos --seed %d --duration %s --faults %s   (logs in %s)\n",
			o.Seed, o.Duration, strings.Join(cmpOr(o.Kinds, Kinds()), ","), filepath.Join(o.Dir, "logs"))
		o.Keep = true
	}
	if o.Report != "" {
		data, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(o.Report, append(data, '\n'), 0o644); err != nil {
			return nil, err
		}
	}
	if !o.Keep {
		c.close()
		_ = os.RemoveAll(o.Dir)
	}
	return &report, nil
}

// runWorkload creates the topics, runs the writers, readers, group
// members and the nemesis for o.Duration, stops the writers (waiting for
// every answer), heals every fault, and reads everything back.
func runWorkload(ctx context.Context, c *cluster, o Options, kinds map[string]bool, rec *history.Recorder) error {
	cl, err := client.New(ctx, client.Config{Brokers: c.addrs(devcluster.RoleBroker, false), RequestTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, t := range topics {
		if _, err := cl.CreateTopic(ctx, t.name, t.partitions, t.configs); err != nil {
			return fmt.Errorf("chaos: create %s: %w", t.name, err)
		}
	}
	faultCtx, stopFaults := context.WithTimeout(ctx, o.Duration)
	defer stopFaults()
	readCtx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	var writing, reading, faulting sync.WaitGroup
	for _, w := range writers {
		writing.Go(func() {
			if err := produce(faultCtx, w, cl, c.addrs(devcluster.RoleBroker, true), c.dir, rec, c.log); err != nil {
				fmt.Fprintf(c.log, "chaos: writer %s: %v\n", w.name, err)
			}
		})
	}
	for _, t := range topics {
		reading.Go(func() { tail(readCtx, cl, t.name, t.partitions, rec, c.log) })
	}
	for i := range 3 {
		reading.Go(func() { member(readCtx, cl, fmt.Sprintf("member-%d", i+1), rec, c.log) })
	}
	kafka := c.addrs(devcluster.RoleBroker, true)
	reading.Go(func() { kafkaTail(readCtx, kafka, rec, c.log) })
	for i := range 2 {
		logFile := filepath.Join(c.dir, "logs", fmt.Sprintf("kafka-member-%d.log", i+1))
		reading.Go(func() { kafkaMember(readCtx, kafka, logFile, rec, c.log) })
	}
	reading.Go(func() { watchCommits(readCtx, cl, rec) })
	faulting.Go(func() { c.supervise(faultCtx) })
	for i, lane := range lanes {
		rng := rand.New(rand.NewPCG(uint64(o.Seed), uint64(i)))
		faulting.Go(func() { nemesis(faultCtx, c, lane, kinds, rng, rec) })
	}
	faulting.Wait()
	fmt.Fprintf(c.log, "%s faults over; waiting for every write's answer\n", stamp())
	writing.Wait()
	if err := c.reviveAll(ctx); err != nil {
		return err
	}
	if err := c.net.Heal(); err != nil {
		return err
	}
	fmt.Fprintf(c.log, "%s cluster healed; reading every partition back\n", stamp())
	readAllCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err = finalRead(readAllCtx, cl, rec)
	stopReaders()
	reading.Wait()
	if err != nil {
		return fmt.Errorf("chaos: final read: %w", err)
	}
	return nil
}

// cmpOr returns a if it is not empty, else b.
func cmpOr(a, b []string) []string {
	if len(a) > 0 {
		return a
	}
	return b
}
