package kafka

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/proto/brokerpb"
)

// AdapterConfig is what the adapter decides itself.
type AdapterConfig struct {
	// AutoCreateTopics: a Metadata request that asks for it creates
	// missing topics (Kafka's auto.create.topics.enable).
	AutoCreateTopics bool
	// DefaultPartitions: partitions of a topic created without a count.
	DefaultPartitions int32
}

// Adapter answers Kafka's APIs from Strata's service layer: it translates
// requests, results and errors (codes.go) and nothing else. Kafka
// concepts with no Strata twin are mapped in one place each: node ids
// (broker.Service's, kept in metad), leader = the partition's owner,
// leader epoch = its owner epoch, replicas = ISR = [owner], topic ids =
// TopicRecord ids, the last stable offset = the high watermark (no
// transactions).
type Adapter struct {
	svc   *broker.Service
	admin *broker.Admin
	cfg   AdapterConfig
	log   *slog.Logger
	// grp answers the consumer-group APIs (groups.go, groupoffsets.go,
	// groupadmin.go).
	grp *groupAPI
}

// groupAPI answers the consumer-group APIs over the broker's Groups
// service.
type groupAPI struct {
	svc    *broker.Service
	groups *broker.Groups
}

// NewAdapter returns the adapter over b's service layer.
func NewAdapter(b *broker.Broker, cfg AdapterConfig, log *slog.Logger) *Adapter {
	if cfg.DefaultPartitions < 1 {
		cfg.DefaultPartitions = 1
	}
	if log == nil {
		log = slog.Default()
	}
	return &Adapter{svc: b.Service(), admin: b.Admin(), cfg: cfg, log: log.With("component", "kafka"),
		grp: &groupAPI{svc: b.Service(), groups: b.Groups()}}
}

// api is one registration: a key, the versions served and the handler.
type api struct {
	key, min, max int16
	h             HandlerFunc
}

// Register adds every API the adapter serves to r; ApiVersions
// advertises exactly these ranges.
func (a *Adapter) Register(r *Registry) error {
	for _, x := range a.apis() {
		if err := r.Register(x.key, x.min, x.max, x.h); err != nil {
			return err
		}
	}
	return nil
}

// node is a broker as Kafka clients see it.
type node struct {
	id   int32
	host string
	port int32
	rack *string
}

// nodes maps broker ids to the Kafka nodes of the live brokers that serve
// the Kafka protocol (a broker without a listener is not a node).
func nodes(brokers []*brokerpb.BrokerInfo) map[string]node {
	out := make(map[string]node, len(brokers))
	for _, bi := range brokers {
		if bi.KafkaAddress == "" || bi.NodeId <= 0 {
			continue
		}
		host, portStr, err := net.SplitHostPort(bi.KafkaAddress)
		if err != nil {
			continue
		}
		port, err := strconv.ParseInt(portStr, 10, 32)
		if err != nil {
			continue
		}
		n := node{id: bi.NodeId, host: host, port: int32(port)}
		if bi.Rack != "" {
			rack := bi.Rack
			n.rack = &rack
		}
		out[bi.Id] = n
	}
	return out
}

// topicUUID is a topic id as Kafka's 16 bytes (zero when the record's id
// is not 32 hex digits: clients then stay on name-based versions).
func topicUUID(id string) [16]byte {
	var out [16]byte
	if raw, err := hex.DecodeString(id); err == nil && len(raw) == 16 {
		copy(out[:], raw)
	}
	return out
}

// topicIDString is topicUUID's inverse.
func topicIDString(id [16]byte) string { return hex.EncodeToString(id[:]) }

// leader is the partition's owner as a Kafka node and epoch; ok false when
// it has none or its owner serves no Kafka listener.
func leader(ns map[string]node, o *brokerpb.Ownership) (n node, epoch int32, ok bool) {
	if o == nil {
		return node{}, -1, false
	}
	n, ok = ns[o.BrokerId]
	if !ok {
		return node{}, -1, false
	}
	return n, int32(o.Epoch), true
}

// controller is the node id answered as Kafka's controller: any broker
// runs admin calls, so the controller broker when it serves Kafka, else
// this one (franz-go sends admin requests to it); -1 when neither does.
func (a *Adapter) controller(ns map[string]node, controllerID string) int32 {
	if n, ok := ns[controllerID]; ok {
		return n.id
	}
	if n, ok := ns[a.svc.BrokerID()]; ok {
		return n.id
	}
	return -1
}

// errUnsupported is a request the adapter refuses whole.
func errUnsupported(format string, args ...any) error {
	return fmt.Errorf("kafka: "+format, args...)
}

var _ = kmsg.NewPtrMetadataResponse
var _ = context.Background
