package broker

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/strata-log/strata/broker/drain"
)

// Keys the brokers keep in metad (proto/broker/v1/meta.proto documents the
// records). Topic names never contain '/', so "<prefix><topic>/" lists
// exactly one topic's partitions.
const (
	brokersPrefix     = "/strata/brokers/"
	controllerKey     = "/strata/controller"
	topicsPrefix      = "/strata/topics/"
	assignmentsPrefix = "/strata/assignments/"
	ownersPrefix      = "/strata/owners/"
	producerIDKey     = "/strata/producer-ids-next"
	// drainsPrefix + id: an operator's drain of the broker (package
	// broker/drain).
	drainsPrefix = drain.Prefix
)

// OffsetsTopic is the internal topic that stores consumer groups' commits.
const OffsetsTopic = "__consumer_offsets"

func brokerKey(id string) string  { return brokersPrefix + id }
func topicKey(name string) string { return topicsPrefix + name }
func assignmentKey(tp tp) string  { return assignmentsPrefix + tp.String() }
func ownerKey(tp tp) string       { return ownersPrefix + tp.String() }

// tp names one partition.
type tp struct {
	topic     string
	partition int32
}

func (p tp) String() string { return p.topic + "/" + strconv.Itoa(int(p.partition)) }

// parseTP parses "<topic>/<partition>", the tail of an assignment or owner
// key.
func parseTP(s string) (tp, error) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 {
		return tp{}, fmt.Errorf("broker: bad partition key %q", s)
	}
	n, err := strconv.ParseInt(s[i+1:], 10, 32)
	if err != nil || n < 0 {
		return tp{}, fmt.Errorf("broker: bad partition key %q", s)
	}
	return tp{topic: s[:i], partition: int32(n)}, nil
}
