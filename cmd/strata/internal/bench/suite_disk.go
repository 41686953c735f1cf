package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/strata-log/strata/cmd/strata/benchsuite"
)

// watchDisk samples the device holding the cluster's data every
// benchsuite.DiskSampleInterval, each sample with run's phase, until the
// returned stop is called; stop returns what the device did and its
// stalls (nil and none when the device cannot be read: a warning, the
// workload's figures do not depend on it).
func (sr *suiteRunner) watchDisk(ctx context.Context, run *Run) (stop func() (*benchsuite.Disk, []benchsuite.DiskStall)) {
	major, minor, err := benchsuite.DiskDevice(sr.dir)
	var name string
	if err == nil {
		name, _, err = benchsuite.ReadDiskCounters(major, minor)
	}
	if err != nil {
		fmt.Fprintf(sr.progress, "bench suite: warning: no device stalls reported: %s\n", strings.TrimPrefix(err.Error(), "benchsuite: "))
		return func() (*benchsuite.Disk, []benchsuite.DiskStall) { return nil, nil }
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var samples []benchsuite.DiskSample // written by the sampler until done closes
	go func() {
		defer close(done)
		t := time.NewTicker(benchsuite.DiskSampleInterval)
		defer t.Stop()
		for {
			if _, c, err := benchsuite.ReadDiskCounters(major, minor); err == nil {
				samples = append(samples, benchsuite.DiskSample{At: time.Now(), DiskCounters: c, Phase: run.Phase()})
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() (*benchsuite.Disk, []benchsuite.DiskStall) {
		cancel()
		<-done
		return benchsuite.SummarizeDisk(name, samples)
	}
}
