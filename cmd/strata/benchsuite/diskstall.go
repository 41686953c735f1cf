package benchsuite

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// Device stalls. On a virtual machine the host may hold every request of
// the VM's disk for hundreds of milliseconds and then complete them at
// once; each such stall sets the p99 of whatever window of a load it
// falls in, whatever the nodes did. The suite samples /proc/diskstats
// for the device under the cluster's data every DiskSampleInterval
// while a workload runs and reports the stalls it saw, per window where
// a workload compares windows, so that a reader can tell a ratio set by
// the device from one set by Strata.
const (
	DiskSampleInterval = 50 * time.Millisecond
	// MinDiskStall: shorter stalls are not reported (at the sampling
	// interval, a stall is seen as at least one interval with requests in
	// flight and none completed).
	MinDiskStall = 100 * time.Millisecond
)

// DiskCounters are the fields of one device's /proc/diskstats line that
// stalls are found from.
type DiskCounters struct {
	// Completed: reads, writes, discards and flushes completed.
	Completed uint64
	// InFlight: requests issued to the device and not completed yet.
	InFlight uint64
}

// ParseDiskstats returns the name and counters of device major:minor in
// the content of /proc/diskstats.
func ParseDiskstats(data []byte, major, minor uint32) (string, DiskCounters, error) {
	want := [2][]byte{strconv.AppendUint(nil, uint64(major), 10), strconv.AppendUint(nil, uint64(minor), 10)}
	for line := range bytes.Lines(data) {
		f := bytes.Fields(line)
		if len(f) < 14 || !bytes.Equal(f[0], want[0]) || !bytes.Equal(f[1], want[1]) {
			continue
		}
		// After major, minor and name: reads completed (field 4), ...,
		// writes completed (8), ..., in flight (12); since Linux 4.18
		// discards completed (15) and since 5.5 flushes completed (19).
		var c DiskCounters
		for _, i := range []int{3, 7, 14, 18} {
			if i >= len(f) {
				break
			}
			n, err := strconv.ParseUint(string(f[i]), 10, 64)
			if err != nil {
				return "", DiskCounters{}, fmt.Errorf("benchsuite: /proc/diskstats %s field %d: %w", f[2], i+1, err)
			}
			c.Completed += n
		}
		n, err := strconv.ParseUint(string(f[11]), 10, 64)
		if err != nil {
			return "", DiskCounters{}, fmt.Errorf("benchsuite: /proc/diskstats %s in flight: %w", f[2], err)
		}
		c.InFlight = n
		return string(f[2]), c, nil
	}
	return "", DiskCounters{}, fmt.Errorf("benchsuite: device %d:%d is not in /proc/diskstats", major, minor)
}

// DiskSample is one sample of the device, with the phase the load was in
// (the compaction workload's windows; 0 for the others).
type DiskSample struct {
	At time.Time
	DiskCounters
	Phase int
}

// DiskStall is a time in which the device completed nothing while
// requests were in flight: from the last sample before it to the last
// that still saw no completion (it lasted at least End - Start, less
// than two sampling intervals more).
type DiskStall struct {
	Start, End time.Time
	// Phase: the load's phase at the sample that saw completions again
	// (at End if sampling stopped first), when the requests it held
	// complete and their latencies are observed.
	Phase int
}

// FindDiskStalls returns the stalls of at least shortest in samples (in
// time order).
func FindDiskStalls(samples []DiskSample, shortest time.Duration) []DiskStall {
	var out []DiskStall
	start := -1 // the sample the current stall began at
	for i := 1; i <= len(samples); i++ {
		stuck := i < len(samples) && samples[i].Completed == samples[i-1].Completed && samples[i-1].InFlight > 0
		if stuck {
			if start < 0 {
				start = i - 1
			}
			continue
		}
		if start >= 0 {
			s := DiskStall{Start: samples[start].At, End: samples[i-1].At, Phase: samples[min(i, len(samples)-1)].Phase}
			if s.End.Sub(s.Start) >= shortest {
				out = append(out, s)
			}
			start = -1
		}
	}
	return out
}

// DiskStalls sums the stalls of a workload or of some of its windows.
type DiskStalls struct {
	Count     int     `json:"count"`
	Seconds   float64 `json:"seconds"`
	LongestMs float64 `json:"longest_ms"`
}

// SumDiskStalls sums the stalls whose phase in says is wanted (every
// stall when in is nil).
func SumDiskStalls(stalls []DiskStall, in func(phase int) bool) DiskStalls {
	var s DiskStalls
	for _, st := range stalls {
		if in != nil && !in(st.Phase) {
			continue
		}
		d := st.End.Sub(st.Start)
		s.Count++
		s.Seconds += d.Seconds()
		s.LongestMs = max(s.LongestMs, millis(d))
	}
	return s
}

func (s DiskStalls) String() string {
	if s.Count == 0 {
		return "none"
	}
	return fmt.Sprintf("%d (%.2f s, longest %.0f ms)", s.Count, s.Seconds, s.LongestMs)
}

// Disk is what the device under the cluster's data did during a
// workload.
type Disk struct {
	// Device: its name in /proc/diskstats; Samples were taken every
	// SampleMs (nominally).
	Device   string  `json:"device"`
	SampleMs float64 `json:"sample_ms"`
	Samples  int     `json:"samples"`
	// MinStallMs: the shortest stall counted in Stalls.
	MinStallMs float64    `json:"min_stall_ms"`
	Stalls     DiskStalls `json:"stalls"`
}

// SummarizeDisk is what device did over samples (taken every
// DiskSampleInterval), and its stalls of at least MinDiskStall.
func SummarizeDisk(device string, samples []DiskSample) (*Disk, []DiskStall) {
	stalls := FindDiskStalls(samples, MinDiskStall)
	return &Disk{Device: device, SampleMs: millis(DiskSampleInterval), Samples: len(samples),
		MinStallMs: millis(MinDiskStall), Stalls: SumDiskStalls(stalls, nil)}, stalls
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
