package benchsuite

import (
	"fmt"
	"net"
	"time"
)

// Ports are the first ports of a cluster's roles (devcluster.Options)
// and of the brokers' Kafka listeners.
type Ports struct{ Metad, Bookie, Broker, Kafka int }

// FreePorts finds ports for a cluster of up to 5 metad, 20 bookies and 20
// brokers on host, off devcluster's defaults so that the suite does not
// collide with a developer's `strata dev`: metad base..+4, +100, +200;
// bookies +300..+319, +400..; brokers +500.., +600.. (each role's admin
// ports +100 from its own); the brokers' Kafka listeners +700...
func FreePorts(host string) (Ports, error) {
	offsets := []int{}
	for _, first := range []int{0, 100, 200} {
		for i := range 5 {
			offsets = append(offsets, first+i)
		}
	}
	for _, first := range []int{300, 400, 500, 600, 700} {
		for i := range 20 {
			offsets = append(offsets, first+i)
		}
	}
	// Bases from 21000 to 31200, so every port stays below 32000 (under
	// the ephemeral range, where the kernel picks ports for connections).
	const lo, span = 21000, 10200
	start := int(time.Now().UnixNano() % span)
	for i := 0; i < span; i += 1009 {
		base := lo + (start+i)%span
		ok := true
		for _, off := range offsets {
			ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", host, base+off))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return Ports{Metad: base, Bookie: base + 300, Broker: base + 500, Kafka: base + 700}, nil
		}
	}
	return Ports{}, fmt.Errorf("benchsuite: no free port range on %s", host)
}

// listenLoopback listens on a free port of 127.0.0.1 in [20000, 21000),
// below the ephemeral range.
func listenLoopback() (net.Listener, error) {
	start := int(time.Now().UnixNano() % 1000)
	var err error
	for i := range 1000 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+(start+i)%1000)); err == nil {
			return ln, nil
		}
	}
	return nil, fmt.Errorf("benchsuite: no free port in 127.0.0.1:20000-20999: %w", err)
}
