package group

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// errBadSubscription: a classic member's metadata that is not a Kafka
// consumer subscription.
var errBadSubscription = errors.New("group: not a consumer protocol subscription")

// subscriptionTopics reads the topics of a "consumer" protocol member's
// metadata (Kafka's ConsumerProtocolSubscription, versions 0-3, not
// flexible):
//
//	version int16 (>= 0)
//	topics  int32 count, then count times: int16 length, UTF-8 name
//	...     user data, owned partitions, generation, rack: not read
//
// The coordinator reads subscriptions only to refuse deleting the offsets
// of subscribed topics (GROUP_SUBSCRIBED_TO_TOPIC); it never interprets
// assignments.
func subscriptionTopics(b []byte) ([]string, error) {
	if len(b) < 6 {
		return nil, fmt.Errorf("%w: %d bytes", errBadSubscription, len(b))
	}
	if v := int16(binary.BigEndian.Uint16(b)); v < 0 {
		return nil, fmt.Errorf("%w: version %d", errBadSubscription, v)
	}
	n := int32(binary.BigEndian.Uint32(b[2:]))
	b = b[6:]
	// Each name takes at least its 2-byte length: a count the bytes cannot
	// hold is refused before anything is allocated.
	if n < 0 || int(n) > len(b)/2 {
		return nil, fmt.Errorf("%w: %d topics in %d bytes", errBadSubscription, n, len(b))
	}
	topics := make([]string, 0, n)
	for range n {
		if len(b) < 2 {
			return nil, fmt.Errorf("%w: truncated", errBadSubscription)
		}
		l := int16(binary.BigEndian.Uint16(b))
		b = b[2:]
		if l < 0 || int(l) > len(b) {
			return nil, fmt.Errorf("%w: topic name of %d bytes", errBadSubscription, l)
		}
		topics = append(topics, string(b[:l]))
		b = b[l:]
	}
	return topics, nil
}
