package netfault_test

import (
	"log"

	"github.com/strata-log/strata/cmd/strata/internal/chaos/netfault"
)

// A runner gives every node a host, starts it there listening on the
// host's address, and cuts links between rounds.
func Example() {
	if err := netfault.Cleanup("sc1"); err != nil { // leftovers of a crashed run
		log.Fatal(err)
	}
	n, err := netfault.New("sc1")
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	ip, err := n.AddHost("broker1")
	if err != nil {
		log.Fatal(err)
	}
	// The node's flags make it listen on and advertise ip, not 127.0.0.1.
	args := []string{"broker", "--config", "broker1-" + ip + ".yaml"}
	broker := n.Command("broker1", "./strata", args...)
	if err := broker.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = broker.Process.Kill(); _ = broker.Wait() }() // before Close
	// ... more hosts; then, each round:
	if err := n.CutClients("broker1"); err != nil {
		log.Fatal(err)
	}
	log.Printf("faults: %q", n.Faults())
	if err := n.Heal(); err != nil {
		log.Fatal(err)
	}
}
