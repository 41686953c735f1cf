package devcluster

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
)

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"KILL": syscall.SIGKILL, "sigterm": syscall.SIGTERM, "9": syscall.SIGKILL,
		"SIGINT": syscall.SIGINT, "stop": syscall.SIGSTOP, "CONT": syscall.SIGCONT, "15": syscall.SIGTERM} {
		if got, err := ParseSignal(in); err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	if _, err := ParseSignal("HUP"); err == nil || err.Error() != `--signal "HUP": want KILL, TERM, INT, STOP or CONT` {
		t.Errorf("HUP: %v", err)
	}
}

func TestReportChanges(t *testing.T) {
	nodes := []Node{{Name: "broker-1", PID: 7}, {Name: "bookie-1", PID: 8}}
	up := map[string]bool{"broker-1": true, "bookie-1": false}
	running := func(n Node) bool { return up[n.Name] }
	reported := map[string]bool{}
	var out bytes.Buffer
	reportChanges(&out, nodes, reported, running)
	reportChanges(&out, nodes, reported, running) // no news: no line
	up["bookie-1"] = true
	reportChanges(&out, nodes, reported, running)
	want := "bookie-1 (pid 8) is not running; 'strata dev start bookie-1' restarts it\nbookie-1 is running again (pid 8)\n"
	if out.String() != want {
		t.Fatalf("%q, want %q", out.String(), want)
	}
}

func TestPrintSummaryAndStatuses(t *testing.T) {
	st := &State{Dir: "/d", Nodes: []Node{
		{Name: "metad-1", Role: RoleMetad, Listen: "127.0.0.1:7001", Admin: "127.0.0.1:7201", DataDir: "/d/metad-1"},
		{Name: "bookie-1", Role: RoleBookie, Listen: "127.0.0.1:7301"},
		{Name: "broker-1", Role: RoleBroker, Listen: "127.0.0.1:7501", Admin: "127.0.0.1:7601", Kafka: "127.0.0.1:9092", DataDir: "/d/broker-1"},
		{Name: "broker-2", Role: RoleBroker, Listen: "127.0.0.1:7502", Admin: "127.0.0.1:7602", Kafka: "127.0.0.1:9093", DataDir: "/d/broker-2"},
	}}
	var out bytes.Buffer
	PrintSummary(&out, st, Profile{Metad: "127.0.0.1:7001", Brokers: "127.0.0.1:7501,127.0.0.1:7502"}, "file:///d/tier", []string{"/d/profile.json"})
	for _, want := range []string{"  metad:   127.0.0.1:7001\n", "  bookies: 127.0.0.1:7301\n", "  brokers: 127.0.0.1:7501,127.0.0.1:7502\n",
		"  kafka:   127.0.0.1:9092,127.0.0.1:9093\n",
		"  objects: file:///d/tier (local directory; 'make minio' installs MinIO)\n", "  profile: /d/profile.json\n",
		"Kafka: kcat -b 127.0.0.1:9092 -L\n", "Try:  strata cluster status"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	rows := []NodeStatus{{Node: st.Nodes[0], Running: true}, {Node: st.Nodes[2], Running: false}}
	if err := PrintStatuses(&out, rows); err != nil {
		t.Fatal(err)
	}
	want := "NODE      ROLE    PID  RUNNING  LISTEN          ADMIN           KAFKA           DATA DIR\n" +
		"metad-1   metad   0    true     127.0.0.1:7001  127.0.0.1:7201  -               /d/metad-1\n" +
		"broker-1  broker  0    false    127.0.0.1:7501  127.0.0.1:7601  127.0.0.1:9092  /d/broker-1\n"
	if out.String() != want {
		t.Fatalf("%q\nwant %q", out.String(), want)
	}
}

// TestPrintSummaryTLS: on a --tls cluster the summary says how a Kafka
// client authenticates: the profile's admin certificate, or a SASL user.
func TestPrintSummaryTLS(t *testing.T) {
	st := &State{Dir: "/d", Nodes: []Node{
		{Name: "metad-1", Role: RoleMetad, Listen: "127.0.0.1:7001"},
		{Name: "broker-1", Role: RoleBroker, Listen: "127.0.0.1:7501", Kafka: "127.0.0.1:9092"},
	}}
	prof := Profile{Metad: "127.0.0.1:7001", Brokers: "127.0.0.1:7501", TLSCA: "/d/tls/ca.crt", TLSCert: "/d/tls/admin.crt", TLSKey: "/d/tls/admin.key"}
	var out bytes.Buffer
	PrintSummary(&out, st, prof, "file:///d/tier", []string{"/d/profile.json"})
	for _, want := range []string{
		"kcat -b 127.0.0.1:9092 -X security.protocol=ssl -X ssl.ca.location=/d/tls/ca.crt " +
			"-X ssl.certificate.location=/d/tls/admin.crt -X ssl.key.location=/d/tls/admin.key -L\n",
		"'strata user create NAME --password-stdin'",
		"kcat -b 127.0.0.1:9092 -X security.protocol=sasl_ssl -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=NAME " +
			"-X sasl.password=PASSWORD -X ssl.ca.location=/d/tls/ca.crt -L\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Kafka: kcat -b 127.0.0.1:9092 -L") {
		t.Errorf("a TLS cluster's summary gives the plaintext kcat line:\n%s", out.String())
	}
}
