package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
)

// MaxInputLine bounds one line of produce input; the broker's
// max.message.bytes usually rejects far smaller records.
const MaxInputLine = 32 << 20

// lineQueue bounds the lines read ahead of the producer.
const lineQueue = 64

// Flush graces: how long Produce waits for outstanding acknowledgements
// after the input ended, and after Ctrl-C.
const (
	flushGrace       = 2 * time.Minute
	interruptedGrace = 5 * time.Second
)

// Producer is the part of *client.Producer that Produce uses.
type Producer interface {
	Produce(ctx context.Context, r *client.Record, cb func(*client.Record, error)) error
	Close(ctx context.Context) error
}

// ProduceOptions say what record each input line becomes.
type ProduceOptions struct {
	Topic     string
	Partition int32 // -1: by key hash
	Split     cli.LineSplitter
	Headers   []client.Header
}

// ProduceResult counts what Produce handed over.
type ProduceResult struct {
	Acked, Failed int64
	FirstErr      error // of the failed records
	ReadErr       error // reading the input, other than EOF
	Interrupted   bool  // ctx ended (Ctrl-C)
}

// Err is the command's error: the first failure, then a read error, then
// an interruption; nil when every record was acknowledged.
func (r ProduceResult) Err() error {
	switch {
	case r.Failed > 0:
		return fmt.Errorf("%d records failed; first error: %w", r.Failed, r.FirstErr)
	case r.ReadErr != nil:
		return fmt.Errorf("reading stdin: %w", r.ReadErr)
	case r.Interrupted:
		return errors.New("interrupted")
	}
	return nil
}

// produceCounts is shared with the producer's callbacks.
type produceCounts struct {
	acked, failed atomic.Int64
	mu            sync.Mutex
	firstErr      error // REQUIRES: mu held
}

func (c *produceCounts) fail(err error) {
	c.failed.Add(1)
	c.mu.Lock()
	if c.firstErr == nil {
		c.firstErr = err
	}
	c.mu.Unlock()
}

func (c *produceCounts) done(_ *client.Record, err error) {
	if err != nil {
		c.fail(err)
		return
	}
	c.acked.Add(1)
}

// Produce produces one record per line of in until its end, an error of
// the producer, or ctx ending, then closes prod (flushing: S1).
func Produce(ctx context.Context, in io.Reader, prod Producer, o ProduceOptions) ProduceResult {
	var counts produceCounts
	readErr := produceLines(ctx, readLines(ctx, in), prod, o, &counts)
	// Flush what was handed over: on Ctrl-C for a short while only.
	grace := flushGrace
	if ctx.Err() != nil {
		grace = interruptedGrace
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := prod.Close(closeCtx); err != nil && counts.failed.Load() == 0 {
		counts.fail(fmt.Errorf("flush: %w", err))
	}
	counts.mu.Lock()
	defer counts.mu.Unlock()
	return ProduceResult{Acked: counts.acked.Load(), Failed: counts.failed.Load(), FirstErr: counts.firstErr,
		ReadErr: readErr, Interrupted: ctx.Err() != nil}
}

type lineOrErr struct {
	line []byte
	err  error
}

// readLines reads in from a goroutine so that Ctrl-C ends a produce that
// waits for input on a terminal; the channel's bound keeps memory
// bounded. On Ctrl-C the goroutine may stay blocked in a read until the
// process exits.
func readLines(ctx context.Context, in io.Reader) <-chan lineOrErr {
	lines := make(chan lineOrErr, lineQueue)
	go func() {
		defer close(lines)
		r := cli.NewLineReader(in, MaxInputLine)
		for {
			line, err := r.Next()
			select {
			case lines <- lineOrErr{line, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return lines
}

// produceLines hands each line to prod; it returns a read error other
// than EOF.
func produceLines(ctx context.Context, lines <-chan lineOrErr, prod Producer, o ProduceOptions, counts *produceCounts) error {
	for {
		var in lineOrErr
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case in, ok = <-lines:
		}
		if !ok || errors.Is(in.err, io.EOF) {
			return nil
		}
		if in.err != nil {
			return in.err
		}
		key, value := o.Split.Split(in.line)
		rec := &client.Record{Topic: o.Topic, Partition: o.Partition, Key: key, Value: value, Headers: o.Headers, Offset: -1}
		if err := prod.Produce(ctx, rec, counts.done); err != nil {
			counts.fail(err)
			if errors.Is(err, client.ErrClosed) || ctx.Err() != nil {
				return nil
			}
		}
	}
}
