package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/strata-log/strata/client"
)

// Modes of a benchmark.
const (
	ModeProduce = "produce"
	ModeConsume = "consume"
	ModeE2E     = "e2e"
)

// Latency kinds a benchmark reports.
const (
	LatPublishAck     = "publish->ack"
	LatAckConsume     = "ack->consume"
	LatPublishConsume = "publish->consume"
)

// FlushTimeout bounds waiting for outstanding acknowledgements (and, for
// e2e, for the consumer to catch up) after Options.Duration.
const FlushTimeout = 30 * time.Second

// Options are a benchmark's parameters: `strata bench`'s flags, named in
// the errors of Validate.
type Options struct {
	Topic       string
	RecordSize  int
	Rate        float64 // records/s across all producers; 0: as fast as possible
	Duration    time.Duration
	Producers   int
	Acks        string
	Linger      time.Duration
	BatchBytes  int
	Compression string
	Partitions  int32 // of the topic when the benchmark creates it
}

// Validate reports every flag that does not fit mode.
func (o *Options) Validate(mode string) error {
	var errs []error
	if o.RecordSize < 0 || (mode == ModeE2E && o.RecordSize < 8) {
		errs = append(errs, fmt.Errorf("--record-size %d: want at least 8 for e2e, 0 otherwise", o.RecordSize))
	}
	if o.Rate < 0 {
		errs = append(errs, fmt.Errorf("--rate %g: want 0 or more", o.Rate))
	}
	if o.Duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration %s: must be positive", o.Duration))
	}
	if o.Producers < 1 {
		errs = append(errs, fmt.Errorf("--producers %d: want at least 1", o.Producers))
	}
	if o.Partitions < 1 {
		errs = append(errs, fmt.Errorf("--partitions %d: want at least 1", o.Partitions))
	}
	return errors.Join(errs...)
}

// ProducerConfig parses Acks and Compression into the producers' config.
func (o *Options) ProducerConfig() (client.ProducerConfig, error) {
	acks, err := client.ParseAcks(o.Acks)
	if err != nil {
		return client.ProducerConfig{}, err
	}
	codec, err := client.ParseCompression(o.Compression)
	if err != nil {
		return client.ProducerConfig{}, err
	}
	return client.ProducerConfig{Acks: acks, Linger: o.Linger, BatchBytes: o.BatchBytes, Compression: codec}, nil
}

// Describe is the benchmark's parameters in a line, for its header.
func (o *Options) Describe(mode string, pcfg client.ProducerConfig) string {
	rate := "max rate"
	if o.Rate > 0 {
		rate = fmt.Sprintf("%g records/s", o.Rate)
	}
	if mode == ModeConsume {
		return fmt.Sprintf("at most %s", o.Duration)
	}
	producers := "1 producer"
	if o.Producers != 1 {
		producers = fmt.Sprintf("%d producers", o.Producers)
	}
	return fmt.Sprintf("%s, %s, %d-byte records, acks=%s, compression=%s, linger %s, for %s",
		producers, rate, o.RecordSize, pcfg.Acks, pcfg.Compression, o.Linger, o.Duration)
}
