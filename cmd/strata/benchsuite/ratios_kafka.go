package benchsuite

import "fmt"

// The targets of the Kafka workloads against their gRPC twins: the Kafka
// listener is a second front end over the same service, so a client of
// either should see about the same cluster.
const (
	// kafka-produce-max's and kafka-catch-up's MB/s at least this share
	// of produce-max's and catch-up's.
	TargetKafkaMBPerSecFraction = 0.9
	// kafka-produce-max's CPU per GB (brokers and bookies; brokers) at
	// most this many times produce-max's.
	TargetKafkaCPUFactor = 1.1
	// kafka-e2e-5000's publish->ack p99 at most this many times
	// e2e-5000's.
	TargetKafkaP99Factor = 1.2
)

// KafkaRatios states each Kafka workload of run against its gRPC twin
// (KafkaTwin): a workload whose twin did not run, or measured nothing to
// divide by, contributes nothing.
func KafkaRatios(run Run) []Ratio {
	var out []Ratio
	if k, g, ok := twins(run, WorkloadKafkaProduce); ok {
		out = append(out, twinRatio(k.Name, "MB/s Kafka ÷ gRPC", fmt.Sprintf("%s %.1f MB/s, Kafka %.1f MB/s", g.Name, g.MBPerSec, k.MBPerSec),
			k.MBPerSec, g.MBPerSec, TargetKafkaMBPerSecFraction, true)...)
		out = append(out, twinRatio(k.Name, "CPU brokers+bookies Kafka ÷ gRPC",
			fmt.Sprintf("%s %.2f core-s/GB, Kafka %.2f", g.Name, g.CPU.PerGBBrokersBookies, k.CPU.PerGBBrokersBookies),
			k.CPU.PerGBBrokersBookies, g.CPU.PerGBBrokersBookies, TargetKafkaCPUFactor, false)...)
		out = append(out, twinRatio(k.Name, "CPU brokers Kafka ÷ gRPC",
			fmt.Sprintf("%s %.2f core-s/GB, Kafka %.2f", g.Name, g.CPU.PerGBBrokers, k.CPU.PerGBBrokers),
			k.CPU.PerGBBrokers, g.CPU.PerGBBrokers, TargetKafkaCPUFactor, false)...)
	}
	if k, g, ok := twins(run, WorkloadKafkaE2E5k); ok {
		kl, okK := k.LatencyOf(LatencyPublishAck)
		gl, okG := g.LatencyOf(LatencyPublishAck)
		if okK && okG {
			bound := fmt.Sprintf("%s p99 %.2f ms, Kafka %.2f ms", g.Name, gl.P99, kl.P99)
			if k.Disk != nil && g.Disk != nil {
				bound += stallCounts(&k.Disk.Stalls, &g.Disk.Stalls)
			}
			out = append(out, twinRatio(k.Name, "pub->ack p99 Kafka ÷ gRPC", bound, kl.P99, gl.P99, TargetKafkaP99Factor, false)...)
		}
	}
	for _, name := range []string{WorkloadKafkaCatchUp, WorkloadKafkaGroupCatchUp} {
		if k, g, ok := twins(run, name); ok {
			out = append(out, readRatio(k, g)...)
		}
	}
	return out
}

// readRatio states a Kafka read workload's MB/s against its gRPC twin's
// (both read produce-max's topic), with the share each read from the
// bookies and, for groups, when each read its first record.
func readRatio(k, g Workload) []Ratio {
	bound := fmt.Sprintf("%s %.1f MB/s, Kafka %.1f MB/s", g.Name, g.MBPerSec, k.MBPerSec)
	if k.Reads != nil && g.Reads != nil {
		bound += fmt.Sprintf("; from bookies %.0f%% ÷ %.0f%%", 100*k.Reads.FromBookies, 100*g.Reads.FromBookies)
	}
	if k.Group != nil && g.Group != nil {
		bound += fmt.Sprintf("; first record after %.2f s ÷ %.2f s", k.Group.JoinSeconds, g.Group.JoinSeconds)
	}
	return twinRatio(k.Name, "MB/s Kafka ÷ gRPC", bound, k.MBPerSec, g.MBPerSec, TargetKafkaMBPerSecFraction, true)
}

// twins returns the named Kafka workload and its gRPC twin, when both
// ran.
func twins(run Run, kafka string) (k, g Workload, ok bool) {
	twin, isKafka := KafkaTwin(kafka)
	if !isKafka {
		return Workload{}, Workload{}, false
	}
	k, okK := run.Workload(kafka)
	g, okG := run.Workload(twin)
	return k, g, okK && okG
}

// twinRatio is the ratio kafka ÷ grpc, none when grpc is not positive.
func twinRatio(workload, metric, bound string, kafka, grpc, target float64, atLeast bool) []Ratio {
	if grpc <= 0 {
		return nil
	}
	return []Ratio{ratio(workload, metric, "x", bound, kafka/grpc, target, atLeast)}
}
