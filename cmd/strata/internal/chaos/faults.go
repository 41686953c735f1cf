package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/cmd/strata/internal/chaos/history"
	"github.com/strata-log/strata/internal/clockfault"
	"github.com/strata-log/strata/vfs/faultfs"
)

// A fault is one kind of trouble: apply starts it on a target the fault
// picks with rng and returns the target's description and how to end it.
type fault struct {
	kind string
	// hold is the range of how long the fault lasts.
	minHold, maxHold time.Duration
	apply            func(ctx context.Context, c *cluster, rng *rand.Rand) (target string, heal func(context.Context) error, err error)
}

// lanes are the nemesis's independent schedules, each applying one fault
// at a time, so that up to one fault of each lane overlaps: a process
// fault, a network fault, a disk or object-store fault. Only the network
// lane changes the network.
var lanes = [][]fault{
	{
		{"kill", 2 * time.Second, 10 * time.Second, killFault},
		{"pause-short", 500 * time.Millisecond, 2 * time.Second, pauseFault},
		// Longer than a broker's session (4s) and a bookie's lease (3s):
		// the node wakes up after others took over its work.
		{"pause-long", 6 * time.Second, 12 * time.Second, pauseFault},
		{"clock-jump", 5 * time.Second, 20 * time.Second, clockJumpFault},
	},
	{
		{"isolate", 3 * time.Second, 12 * time.Second, isolateFault},
		{"metad-split", 3 * time.Second, 12 * time.Second, metadSplitFault},
		{"bridge", 3 * time.Second, 12 * time.Second, bridgeFault},
		{"one-way", 3 * time.Second, 12 * time.Second, oneWayFault},
		{"broker-bookies", 3 * time.Second, 12 * time.Second, brokerBookiesFault},
		{"clients-cut", 3 * time.Second, 12 * time.Second, clientsCutFault},
		{"loss", 3 * time.Second, 12 * time.Second, lossFault},
		{"delay", 3 * time.Second, 12 * time.Second, delayFault},
		{"object-store-cut", 3 * time.Second, 15 * time.Second, objectStoreCutFault},
		{"object-store-slow", 3 * time.Second, 15 * time.Second, objectStoreSlowFault},
	},
	{
		{"disk-full", 3 * time.Second, 12 * time.Second, diskFullFault},
		{"disk-stall", 2 * time.Second, 8 * time.Second, diskModeFault("sync-stall 3s")},
		{"disk-eio-write", 2 * time.Second, 6 * time.Second, diskModeFault("write-eio")},
		{"disk-eio-read", 2 * time.Second, 6 * time.Second, diskModeFault("read-eio")},
		{"disk-eio-sync", 2 * time.Second, 6 * time.Second, diskModeFault("sync-eio")},
		{"object-store-pause", 3 * time.Second, 15 * time.Second, objectStorePauseFault},
	},
}

// Kinds lists every fault kind.
func Kinds() []string {
	var out []string
	for _, lane := range lanes {
		for _, f := range lane {
			out = append(out, f.kind)
		}
	}
	return out
}

// nemesis runs one lane until ctx ends: a healthy gap, a fault, its heal,
// again. Every choice comes from rng, so a seed replays the same schedule
// (kinds, targets, durations), if not the same timing of its effects.
func nemesis(ctx context.Context, c *cluster, lane []fault, kinds map[string]bool, rng *rand.Rand, rec *history.Recorder) {
	var enabled []fault
	for _, f := range lane {
		if kinds[f.kind] {
			enabled = append(enabled, f)
		}
	}
	if len(enabled) == 0 {
		return
	}
	for {
		if !sleep(ctx, between(rng, 2*time.Second, 8*time.Second)) {
			return
		}
		f := enabled[rng.IntN(len(enabled))]
		hold := between(rng, f.minHold, f.maxHold)
		start := time.Now()
		target, heal, err := f.apply(ctx, c, rng)
		if err != nil {
			fmt.Fprintf(c.log, "%s fault %-17s %s: not applied: %v\n", stamp(), f.kind, target, err)
			continue
		}
		fmt.Fprintf(c.log, "%s fault %-17s %s for %s\n", stamp(), f.kind, target, hold.Round(100*time.Millisecond))
		sleep(ctx, hold)
		// Heal even when the run is over: the final read needs a whole
		// cluster.
		if err := heal(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintf(c.log, "%s heal  %-17s %s: %v\n", stamp(), f.kind, target, err)
		}
		rec.RecordFault(history.Fault{Kind: f.kind, Target: target, Start: start, End: time.Now()})
		fmt.Fprintf(c.log, "%s healed %-16s %s\n", stamp(), f.kind, target)
	}
}

// stamp is the time of a log line.
func stamp() string { return time.Now().Format("15:04:05.000") }

// between picks a duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// pick returns one of names.
func pick(rng *rand.Rand, names []string) string { return names[rng.IntN(len(names))] }

// allNodes lists every node but MinIO, whose faults are the object
// store's lane.
func allNodes(c *cluster) []string {
	return slices.Concat(c.names(devcluster.RoleMetad), c.names(devcluster.RoleBookie), c.names(devcluster.RoleBroker))
}

func killFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, allNodes(c))
	if err := c.kill(n); err != nil {
		return n, nil, err
	}
	return n, func(ctx context.Context) error { return c.revive(ctx, n) }, nil
}

func pauseFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, allNodes(c))
	if err := c.pause(n); err != nil {
		return n, nil, err
	}
	return n, func(ctx context.Context) error { return c.revive(ctx, n) }, nil
}

// netFault applies a network fault: the network lane is the only one
// that changes the network, so its heal lifts every rule.
func netFault(c *cluster, target string, apply func() error) (string, func(context.Context) error, error) {
	if err := apply(); err != nil {
		_ = c.net.Heal()
		return target, nil, err
	}
	return target, func(context.Context) error { return c.net.Heal() }, nil
}

func isolateFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, allNodes(c))
	return netFault(c, n, func() error { return c.net.Isolate(n) })
}

// metadSplitFault puts one metad member (the leader or not) on the
// minority side, with a random half of the other nodes.
func metadSplitFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	metad := c.names(devcluster.RoleMetad)
	minority := []string{metad[rng.IntN(len(metad))]}
	var majority []string
	for _, n := range allNodes(c) {
		switch {
		case n == minority[0]:
		case strings.HasPrefix(n, "metad-"), rng.IntN(2) == 0:
			majority = append(majority, n)
		default:
			minority = append(minority, n)
		}
	}
	target := strings.Join(minority, ",") + " | " + strings.Join(majority, ",")
	return netFault(c, target, func() error { return c.net.Split(minority, majority) })
}

// bridgeFault splits the nodes into two sides with one node, the bridge,
// on neither: it reaches both, they do not reach each other.
func bridgeFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	nodes := allNodes(c)
	rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	bridge, rest := nodes[0], nodes[1:]
	a, b := rest[:len(rest)/2], rest[len(rest)/2:]
	target := fmt.Sprintf("%s | bridge %s | %s", strings.Join(a, ","), bridge, strings.Join(b, ","))
	return netFault(c, target, func() error { return c.net.Split(a, b) })
}

func oneWayFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	nodes := allNodes(c)
	from := pick(rng, nodes)
	to := from
	for to == from {
		to = pick(rng, nodes)
	}
	return netFault(c, from+" -> "+to, func() error { return c.net.CutOneWay(from, to) })
}

// brokerBookiesFault cuts a broker from two bookies, leaving it metad and
// the other bookies: it keeps its session while writes to ledgers on the
// cut bookies fail.
func brokerBookiesFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	b := pick(rng, c.names(devcluster.RoleBroker))
	bk := c.names(devcluster.RoleBookie)
	rng.Shuffle(len(bk), func(i, j int) { bk[i], bk[j] = bk[j], bk[i] })
	cut := bk[:2]
	return netFault(c, b+" x "+strings.Join(cut, ","), func() error { return c.net.Split([]string{b}, cut) })
}

func clientsCutFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	b := pick(rng, c.names(devcluster.RoleBroker))
	return netFault(c, b, func() error { return c.net.CutClients(b) })
}

func lossFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, allNodes(c))
	p := 0.1 + 0.3*rng.Float64()
	return netFault(c, fmt.Sprintf("%s %.0f%%", n, 100*p), func() error { return c.net.Loss(n, p) })
}

// delayFault delays every packet a node receives by 50-500 ms.
func delayFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, allNodes(c))
	d := between(rng, 50*time.Millisecond, 500*time.Millisecond).Round(time.Millisecond)
	return netFault(c, fmt.Sprintf("%s %s", n, d), func() error { return c.net.Delay(n, d) })
}

func diskFullFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, c.names(devcluster.RoleBookie))
	d := c.disks[n]
	if err := d.fill(); err != nil {
		_ = d.free()
		return n, nil, err
	}
	return n, func(context.Context) error { return d.free() }, nil
}

// diskFaultVar names the variable through which a bookie's file-system
// calls can be faulted (vfs/faultfs).
const diskFaultVar = faultfs.EnvVar

// diskFaultEnv is the environment that lets the nemesis fault a bookie's
// file-system calls through its control file.
func diskFaultEnv(dir, name string) string {
	return diskFaultVar + "=" + diskControl(dir, name)
}

// diskControl is node name's disk-fault control file.
func diskControl(dir, name string) string { return filepath.Join(dir, "faults", name) }

// diskModeFault writes mode to a random bookie's control file and empties
// it to heal.
func diskModeFault(mode string) func(context.Context, *cluster, *rand.Rand) (string, func(context.Context) error, error) {
	return func(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
		n := pick(rng, c.names(devcluster.RoleBookie))
		file := diskControl(c.dir, n)
		if err := writeAtomically(file, mode+"\n"); err != nil {
			return n, nil, err
		}
		return n, func(context.Context) error { return writeAtomically(file, "") }, nil
	}
}

// clockFaultEnv is the environment that lets the nemesis move a broker's
// or a bookie's clock through its control file (internal/clockfault).
func clockFaultEnv(dir, name string) string {
	return clockfault.EnvVar + "=" + clockControl(dir, name)
}

// clockControl is node name's clock control file.
func clockControl(dir, name string) string { return filepath.Join(dir, "faults", name+".clock") }

// clockJumpFault makes a random broker's or bookie's clock jump forward or
// back by 5 s to 5 min, and back to the true time to heal (a second jump).
func clockJumpFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	n := pick(rng, slices.Concat(c.names(devcluster.RoleBroker), c.names(devcluster.RoleBookie)))
	offset := between(rng, 5*time.Second, 5*time.Minute).Round(time.Second)
	if rng.IntN(2) == 0 {
		offset = -offset
	}
	file := clockControl(c.dir, n)
	jump := fmt.Sprintf("%+ds", int64(offset/time.Second))
	if err := writeAtomically(file, jump+"\n"); err != nil {
		return n, nil, err
	}
	return n + " " + jump, func(context.Context) error { return writeAtomically(file, "0s\n") }, nil
}

// writeAtomically replaces file's content by content (a temporary file
// renamed over it), as the control files want.
func writeAtomically(file, content string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// objectStorePauseFault pauses MinIO while the brokers tier.
func objectStorePauseFault(_ context.Context, c *cluster, _ *rand.Rand) (string, func(context.Context) error, error) {
	if err := c.pause(devcluster.MinIOName); err != nil {
		return devcluster.MinIOName, nil, err
	}
	return devcluster.MinIOName, func(ctx context.Context) error { return c.revive(ctx, devcluster.MinIOName) }, nil
}

// objectStoreCutFault cuts MinIO off from everyone while the brokers tier.
func objectStoreCutFault(_ context.Context, c *cluster, _ *rand.Rand) (string, func(context.Context) error, error) {
	return netFault(c, devcluster.MinIOName, func() error { return c.net.Isolate(devcluster.MinIOName) })
}

// objectStoreSlowFault delays every packet MinIO receives by 200 ms to 1 s
// while the brokers tier and read back.
func objectStoreSlowFault(_ context.Context, c *cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	d := between(rng, 200*time.Millisecond, time.Second).Round(time.Millisecond)
	return netFault(c, fmt.Sprintf("%s %s", devcluster.MinIOName, d), func() error { return c.net.Delay(devcluster.MinIOName, d) })
}
