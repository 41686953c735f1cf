package cluster

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/strata-log/strata/broker/drain"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/metad/metaclient"
)

// brokerDrainJSON is a broker drain's progress in JSON.
type brokerDrainJSON struct {
	BrokerID      string `json:"broker_id"`
	RequestedAtMs int64  `json:"requested_at_ms"`
	Registered    bool   `json:"registered"`
	Assigned      int    `json:"partitions_assigned"`
	Owned         int    `json:"partitions_owned"`
	OtherActive   int    `json:"other_active_brokers"`
	Drained       bool   `json:"drained"`
}

// PrintBrokerDrain prints a broker drain's progress: JSON, or a line
// saying what remains, or, once drained, what the operator may do next.
func PrintBrokerDrain(p *cli.Printer, s drain.Status) error {
	id := s.Request.GetBrokerId()
	if p.Format == cli.FormatJSON {
		return p.JSON(brokerDrainJSON{BrokerID: id, RequestedAtMs: s.Request.GetRequestedAtMs(), Registered: s.Registered,
			Assigned: s.Assigned, Owned: s.Owned, OtherActive: s.OtherActive, Drained: s.Drained()})
	}
	if s.Drained() {
		_, err := fmt.Fprintf(p.W, "OK %s. It stays drained until 'strata broker undrain %s'; stopping it now moves nothing.\n", s, id)
		return err
	}
	_, err := fmt.Fprintln(p.W, s.String())
	return err
}

// WatchBrokerDrain prints how far the drain of broker id got: once, or
// with wait every interval until it is drained or ctx ends (watchProgress).
func WatchBrokerDrain(ctx context.Context, meta *metaclient.Client, id string, wait bool, interval time.Duration,
	p *cli.Printer, stderr io.Writer) error {
	read := func(ctx context.Context) (drain.Status, error) { return drain.Progress(ctx, meta, id) }
	show := func(s drain.Status) error { return PrintBrokerDrain(p, s) }
	return watchProgress(ctx, "broker "+id, read, show, wait, interval, stderr)
}
