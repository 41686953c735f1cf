package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/proto/brokerpb"
)

// Sentinel errors. Errors that come from a broker also wrap the gRPC status
// they arrived as, so rpcerror.Reason and status.Code work on them.
var (
	// ErrUnknownTopic: the topic does not exist (reason NOT_FOUND).
	ErrUnknownTopic = errors.New("client: unknown topic")
	// ErrUnknownPartition: the partition number is not below the topic's
	// partition count.
	ErrUnknownPartition = errors.New("client: unknown partition")
	// ErrOffsetOutOfRange: a fetch position is outside [log start, high
	// watermark]. Poll returns an *OffsetOutOfRangeError wrapping it.
	ErrOffsetOutOfRange = errors.New("client: offset out of range")
	// ErrRecordTooLarge: a record does not fit in ProducerConfig.BatchBytes,
	// or the broker rejected its batch as larger than max.message.bytes.
	ErrRecordTooLarge = errors.New("client: record too large")
	// ErrClosed: the client, producer or consumer is closed.
	ErrClosed = errors.New("client: closed")
	// ErrUnknownOutcome: a write may or may not have been stored, and the
	// producer could not retry it safely (idempotence off, or the delivery
	// timeout expired after it was sent).
	ErrUnknownOutcome = errors.New("client: unknown outcome")
	// ErrProducerFenced: a newer producer took over the producer id; the
	// producer is unusable.
	ErrProducerFenced = errors.New("client: producer fenced")
	// ErrDeliveryTimeout: a record was not acknowledged within
	// ProducerConfig.DeliveryTimeout. The error names the last retried
	// attempt's error, when there was one: why it was still waiting.
	ErrDeliveryTimeout = errors.New("client: delivery timeout")
	// ErrBatchTooLarge: a fetched batch decodes to more than
	// ConsumerConfig.MaxDecodedBytes on its own. Poll returns it (wrapped,
	// naming the partition and the batch's offset) once, and the
	// partition is not read again until Seek moves it past the batch.
	ErrBatchTooLarge = errors.New("client: batch decodes past ConsumerConfig.MaxDecodedBytes")
)

// OffsetOutOfRangeError is the error Poll returns when a partition's
// position is outside the log. The consumer stops fetching the partition
// until Seek or Assign gives it a new position; it never resets silently.
type OffsetOutOfRangeError struct {
	TopicPartition TopicPartition
	Offset         int64 // the position that was out of range
	LogStartOffset int64 // valid range as reported by the broker
	HighWatermark  int64
	Err            error // the broker's status
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("client: %s: offset %d out of range [%d, %d]: %v",
		e.TopicPartition, e.Offset, e.LogStartOffset, e.HighWatermark, e.Err)
}

// Is makes errors.Is(err, ErrOffsetOutOfRange) true.
func (e *OffsetOutOfRangeError) Is(target error) bool { return target == ErrOffsetOutOfRange }

// Unwrap returns the broker's status error.
func (e *OffsetOutOfRangeError) Unwrap() error { return e.Err }

// partitionError turns a per-partition wire error into a Go error that
// wraps both the status and the matching sentinel.
func partitionError(pe *brokerpb.PartitionError) error {
	if pe == nil {
		return nil
	}
	return classify(rpcerror.Error(codes.Code(pe.Code), pe.Info, pe.Message))
}

// classify wraps a status error with the sentinel its reason maps to.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var sentinel error
	switch rpcerror.Reason(err) {
	case rpcerror.ReasonNotFound:
		sentinel = ErrUnknownTopic
	case rpcerror.ReasonOutOfRange:
		sentinel = ErrOffsetOutOfRange
	case rpcerror.ReasonTooLarge:
		sentinel = ErrRecordTooLarge
	case rpcerror.ReasonUnknownOutcome:
		sentinel = ErrUnknownOutcome
	case rpcerror.ReasonProducerFenced:
		sentinel = ErrProducerFenced
	}
	if sentinel == nil || errors.Is(err, sentinel) {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

// retryableCall reports whether a failed call that did not change state
// (metadata, admin reads, fetch, list offsets) may be repeated: the server
// said so, or the connection failed.
func retryableCall(err error) bool {
	if rpcerror.Retryable(err) {
		return true
	}
	if rpcerror.Info(err) != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

// ctxErr returns ctx's error wrapped with the last failure, when ctx is done.
func ctxErr(ctx context.Context, last error) error {
	if ctx.Err() == nil {
		return nil
	}
	if last != nil {
		return fmt.Errorf("%w (last error: %w)", ctx.Err(), last)
	}
	return ctx.Err()
}
