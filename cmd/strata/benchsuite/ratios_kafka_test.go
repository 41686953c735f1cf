package benchsuite

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestKafkaRatios: each Kafka workload is stated against its gRPC twin,
// only when both ran and the twin measured something; the Kafka rows
// also get the absolute targets of their twins' shape.
func TestKafkaRatios(t *testing.T) {
	r := sampleReport()
	run := &r.Runs[0]
	kcpu := CPU{PerRole: map[string]float64{"broker": 1.2, "bookie": 3.2, "client": 1}}
	kcpu.FillPerGB(1e9)
	run.Workloads = append(run.Workloads,
		Workload{Name: WorkloadKafkaProduce, MBPerSec: 85, Bytes: 1e9, CPU: kcpu, Journal: &Journal{Groups: 5, BytesPerGroup: 500000}},
		Workload{Name: WorkloadKafkaE2E5k, MBPerSec: 5, Bytes: 1e9, CPU: kcpu,
			Latency: []Latency{{Kind: LatencyPublishAck, P50: 3, P99: 11.7}}},
		Workload{Name: WorkloadKafkaCatchUp, MBPerSec: 216, Reads: &Reads{FromBookies: 1}})
	got := map[string]Ratio{}
	for _, x := range Ratios(r.Limits, *run) {
		got[x.Workload+"/"+x.Metric] = x
	}
	checkRatios(t, got, []ratioCase{
		{WorkloadKafkaProduce + "/MB/s Kafka ÷ gRPC", 85.0 / 90, true},
		{WorkloadKafkaProduce + "/CPU brokers+bookies Kafka ÷ gRPC", 4.4 / 4, true},
		{WorkloadKafkaProduce + "/CPU brokers Kafka ÷ gRPC", 1.2, false},
		{WorkloadKafkaE2E5k + "/pub->ack p99 Kafka ÷ gRPC", 11.7 / 9, false},
		{WorkloadKafkaCatchUp + "/MB/s Kafka ÷ gRPC", 0.8, false},
		// The absolute rows of the twins' shape.
		{WorkloadKafkaProduce + "/ack MB/s ÷ journal MB/s", 0.85, true},
		{WorkloadKafkaE2E5k + "/pub->ack p99", 11.7, false},
		{WorkloadKafkaCatchUp + "/catch-up MB/s ÷ produce MB/s", 2.4, true},
	})
	var buf bytes.Buffer
	if err := r.Fprint(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kafka-produce-max", "MB/s Kafka ÷ gRPC", "produce-max 90.0 MB/s, Kafka 85.0 MB/s",
		"CPU core-s/GB: broker 1.20, bookie 3.20, client 1.00", "100% of fetched bytes from bookies"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}

	// Without its twin, or with a twin that measured nothing, a Kafka
	// workload gets no Kafka ÷ gRPC row.
	run.Workloads = slices.DeleteFunc(run.Workloads, func(w Workload) bool { return w.Name == WorkloadCatchUp })
	run.Workloads[0].MBPerSec = 0
	for _, x := range KafkaRatios(*run) {
		if x.Workload == WorkloadKafkaCatchUp || x.Metric == "MB/s Kafka ÷ gRPC" {
			t.Errorf("%s %s: stated against a twin that is missing or measured nothing", x.Workload, x.Metric)
		}
	}
}

func TestKafkaTwin(t *testing.T) {
	for kafka, grpc := range map[string]string{WorkloadKafkaProduce: WorkloadProduce, WorkloadKafkaE2E5k: WorkloadE2E5k,
		WorkloadKafkaCatchUp: WorkloadCatchUp} {
		if twin, ok := KafkaTwin(kafka); !ok || twin != grpc {
			t.Errorf("KafkaTwin(%s) = %s, %v; want %s", kafka, twin, ok, grpc)
		}
	}
	if _, ok := KafkaTwin(WorkloadProduce); ok {
		t.Error("a gRPC workload is a Kafka one")
	}
}
