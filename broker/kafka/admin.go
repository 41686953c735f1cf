package kafka

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-log/strata/broker"
	"github.com/strata-log/strata/proto/brokerpb"
)

// adminCodeOf is codeOf for topic administration, where Kafka names the
// rule an invalid request broke.
func adminCodeOf(err error) int16 {
	switch {
	case errors.Is(err, broker.ErrInvalidTopicName):
		return kerr.InvalidTopicException.Code
	case errors.Is(err, broker.ErrInvalidPartitions):
		return kerr.InvalidPartitions.Code
	case errors.Is(err, broker.ErrInvalidConfig):
		return kerr.InvalidConfig.Code
	case errors.Is(err, broker.ErrLimit):
		return kerr.PolicyViolation.Code
	}
	return codeOf(err)
}

// createTopics answers CreateTopics v0-7. Partitions -1 is the broker's
// default; any replication factor (-1 or positive) is accepted and not
// used: a topic's durability is its ensemble/write.quorum/ack.quorum
// configs on the bookies, and Metadata reports one replica, the owner.
// Configs are checked as `strata topic create` checks them.
func (a *Adapter) createTopics(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.CreateTopicsRequest)
	resp := kmsg.NewPtrCreateTopicsResponse()
	seen := map[string]bool{}
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		desc, err := a.createTopic(ctx, t, req.ValidateOnly, seen[t.Topic])
		seen[t.Topic] = true
		code := adminCodeOf(err)
		if err != nil && (t.ReplicationFactor == 0 || t.ReplicationFactor < -1) {
			code = kerr.InvalidReplicationFactor.Code
		}
		rt.ErrorCode, rt.ErrorMessage = c.ErrorCode(19, code), messageOf(err)
		if desc != nil {
			rt.TopicID = topicUUID(desc.Id)
			rt.NumPartitions, rt.ReplicationFactor = desc.PartitionCount, 1
			for _, e := range desc.Configs {
				ct := kmsg.NewCreateTopicsResponseTopicConfig()
				ct.Name, ct.Value = e.Name, kmsg.StringPtr(e.Value)
				ct.Source = int8(configSource(e))
				rt.Configs = append(rt.Configs, ct)
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return Respond(resp), nil
}

func (a *Adapter) createTopic(ctx context.Context, t kmsg.CreateTopicsRequestTopic, validateOnly, repeated bool) (*brokerpb.TopicDescription, error) {
	switch {
	case repeated:
		return nil, errInvalid("topic %q is named twice in the request", t.Topic)
	case t.ReplicationFactor == 0 || t.ReplicationFactor < -1:
		return nil, errInvalid("replication factor %d: want -1 or a positive number", t.ReplicationFactor)
	case len(t.ReplicaAssignment) > 0:
		return nil, errInvalid("manual replica assignment is not supported: brokers own partitions by lease and bookies hold the copies")
	}
	partitions := t.NumPartitions
	if partitions == -1 {
		partitions = a.cfg.DefaultPartitions
	}
	configs := map[string]string{}
	for _, cfg := range t.Configs {
		if cfg.Value != nil {
			configs[cfg.Name] = *cfg.Value
		}
	}
	r, err := a.admin.CreateTopic(ctx, &brokerpb.CreateTopicRequest{Name: t.Topic, Partitions: partitions, Configs: configs, ValidateOnly: validateOnly})
	if err != nil {
		return nil, err
	}
	return r.Topic, nil
}

// errInvalid is a request the adapter refuses itself.
func errInvalid(format string, args ...any) error {
	return errors.Join(broker.ErrInvalid, errUnsupported(format, args...))
}

// deleteTopics answers DeleteTopics v0-6 (by id from v6). Deletion is
// asynchronous, as in Kafka: the topic is unknown at once and its data
// goes in the background.
func (a *Adapter) deleteTopics(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.DeleteTopicsRequest)
	resp := kmsg.NewPtrDeleteTopicsResponse()
	type target struct {
		name string
		id   [16]byte
	}
	var targets []target
	for _, name := range req.TopicNames {
		targets = append(targets, target{name: name})
	}
	for _, t := range req.Topics {
		tg := target{id: t.TopicID}
		if t.Topic != nil {
			tg.name = *t.Topic
		}
		targets = append(targets, tg)
	}
	for _, tg := range targets {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.TopicID = tg.id
		name, err := tg.name, error(nil)
		if name == "" {
			var code int16
			if name, code = a.topicOf("", tg.id, true); code != 0 {
				rt.ErrorCode = c.ErrorCode(20, code)
				resp.Topics = append(resp.Topics, rt)
				continue
			}
		}
		rt.Topic = kmsg.StringPtr(name)
		_, err = a.admin.DeleteTopic(ctx, &brokerpb.DeleteTopicRequest{Name: name})
		rt.ErrorCode, rt.ErrorMessage = c.ErrorCode(20, adminCodeOf(err)), messageOf(err)
		resp.Topics = append(resp.Topics, rt)
	}
	return Respond(resp), nil
}

// createPartitions answers CreatePartitions v0-3: grow only; manual
// assignments are refused.
func (a *Adapter) createPartitions(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.CreatePartitionsRequest)
	resp := kmsg.NewPtrCreatePartitionsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		var err error
		if len(t.Assignment) > 0 {
			err = errInvalid("manual replica assignment is not supported")
		} else {
			_, err = a.admin.AddPartitions(ctx, &brokerpb.AddPartitionsRequest{Name: t.Topic, Total: t.Count, ValidateOnly: req.ValidateOnly})
		}
		rt.ErrorCode, rt.ErrorMessage = c.ErrorCode(37, adminCodeOf(err)), messageOf(err)
		resp.Topics = append(resp.Topics, rt)
	}
	return Respond(resp), nil
}

// configSource is where a topic config's value comes from.
func configSource(e *brokerpb.ConfigEntry) kmsg.ConfigSource {
	if e.IsDefault {
		return kmsg.ConfigSourceDefaultConfig
	}
	return kmsg.ConfigSourceDynamicTopicConfig
}

// configTypes are Kafka's types of Strata's topic configs.
var configTypes = map[string]kmsg.ConfigType{
	"retention.ms": kmsg.ConfigTypeLong, "retention.bytes": kmsg.ConfigTypeLong,
	"cleanup.policy": kmsg.ConfigTypeList, "segment.ms": kmsg.ConfigTypeLong,
	"segment.bytes": kmsg.ConfigTypeInt, "ensemble": kmsg.ConfigTypeInt,
	"write.quorum": kmsg.ConfigTypeInt, "ack.quorum": kmsg.ConfigTypeInt,
	"max.message.bytes": kmsg.ConfigTypeInt, "max.compression.ratio": kmsg.ConfigTypeInt,
	"min.compaction.lag.ms": kmsg.ConfigTypeLong,
	"delete.retention.ms":   kmsg.ConfigTypeLong, "max.compaction.lag.ms": kmsg.ConfigTypeLong,
	"min.cleanable.dirty.ratio": kmsg.ConfigTypeDouble, "message.timestamp.after.max.ms": kmsg.ConfigTypeLong,
	"remote.storage.enable": kmsg.ConfigTypeBoolean, "local.retention.ms": kmsg.ConfigTypeLong,
}

// describeConfigs answers DescribeConfigs v0-4 for topics (every Strata
// topic config, set or default, with its source and type) and brokers
// (the Kafka listener's own settings, read-only).
func (a *Adapter) describeConfigs(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.DescribeConfigsRequest)
	resp := kmsg.NewPtrDescribeConfigsResponse()
	for _, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		var entries []*brokerpb.ConfigEntry
		var err error
		switch r.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			entries, err = a.topicConfigs(ctx, r.ResourceName)
		case kmsg.ConfigResourceTypeBroker:
			entries = a.brokerConfigs()
		default:
			err = errInvalid("config resource type %d is not supported", r.ResourceType)
		}
		rr.ErrorCode, rr.ErrorMessage = c.ErrorCode(32, codeOf(err)), messageOf(err)
		for _, e := range entries {
			if r.ConfigNames != nil && !slices.Contains(r.ConfigNames, e.Name) {
				continue
			}
			rr.Configs = append(rr.Configs, describedConfig(req, r.ResourceType, e))
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return Respond(resp), nil
}

func (a *Adapter) topicConfigs(ctx context.Context, name string) ([]*brokerpb.ConfigEntry, error) {
	r, err := a.admin.DescribeTopic(ctx, &brokerpb.DescribeTopicRequest{Name: name})
	if err != nil {
		return nil, err
	}
	return r.Topic.Configs, nil
}

// brokerConfigs are the settings of this broker a Kafka tool may ask for.
func (a *Adapter) brokerConfigs() []*brokerpb.ConfigEntry {
	auto := "false"
	if a.cfg.AutoCreateTopics {
		auto = "true"
	}
	return []*brokerpb.ConfigEntry{
		{Name: "auto.create.topics.enable", Value: auto},
		{Name: "num.partitions", Value: itoa(a.cfg.DefaultPartitions)},
	}
}

func describedConfig(req *kmsg.DescribeConfigsRequest, rt kmsg.ConfigResourceType, e *brokerpb.ConfigEntry) kmsg.DescribeConfigsResponseResourceConfig {
	dc := kmsg.NewDescribeConfigsResponseResourceConfig()
	dc.Name, dc.Value = e.Name, kmsg.StringPtr(e.Value)
	dc.Source, dc.IsDefault = configSource(e), e.IsDefault
	if rt == kmsg.ConfigResourceTypeBroker {
		dc.Source, dc.ReadOnly = kmsg.ConfigSourceStaticBrokerConfig, true
	}
	dc.ConfigType = configTypes[e.Name]
	if req.IncludeSynonyms {
		syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
		syn.Name, syn.Value, syn.Source = dc.Name, dc.Value, dc.Source
		dc.ConfigSynonyms = append(dc.ConfigSynonyms, syn)
	}
	return dc
}

// alterConfigs answers AlterConfigs v0-2: each topic's whole explicit
// configuration is replaced (keys not sent go back to their defaults).
func (a *Adapter) alterConfigs(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.AlterConfigsRequest)
	resp := kmsg.NewPtrAlterConfigsResponse()
	for _, r := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		set := map[string]string{}
		for _, cfg := range r.Configs {
			if cfg.Value != nil {
				set[cfg.Name] = *cfg.Value
			}
		}
		err := a.alterTopic(ctx, r.ResourceType, &brokerpb.AlterTopicConfigsRequest{Name: r.ResourceName, Set: set, Replace: true, ValidateOnly: req.ValidateOnly})
		rr.ErrorCode, rr.ErrorMessage = c.ErrorCode(33, adminCodeOf(err)), messageOf(err)
		resp.Resources = append(resp.Resources, rr)
	}
	return Respond(resp), nil
}

func (a *Adapter) alterTopic(ctx context.Context, rt kmsg.ConfigResourceType, req *brokerpb.AlterTopicConfigsRequest) error {
	if rt != kmsg.ConfigResourceTypeTopic {
		return errInvalid("only topic configs can be altered (resource type %d)", rt)
	}
	_, err := a.admin.AlterTopicConfigs(ctx, req)
	return err
}

// incrementalAlterConfigs answers IncrementalAlterConfigs v0-1: SET,
// DELETE (back to the default), and APPEND / SUBTRACT on cleanup.policy,
// Strata's one list config.
func (a *Adapter) incrementalAlterConfigs(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.IncrementalAlterConfigsRequest)
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	for _, r := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		areq, err := a.incrementalChange(ctx, r)
		if err == nil {
			areq.ValidateOnly = req.ValidateOnly
			err = a.alterTopic(ctx, r.ResourceType, areq)
		}
		rr.ErrorCode, rr.ErrorMessage = c.ErrorCode(44, adminCodeOf(err)), messageOf(err)
		resp.Resources = append(resp.Resources, rr)
	}
	return Respond(resp), nil
}

// incrementalChange turns a resource's operations into one config change.
func (a *Adapter) incrementalChange(ctx context.Context, r kmsg.IncrementalAlterConfigsRequestResource) (*brokerpb.AlterTopicConfigsRequest, error) {
	areq := &brokerpb.AlterTopicConfigsRequest{Name: r.ResourceName, Set: map[string]string{}}
	var current map[string]string
	for _, op := range r.Configs {
		value := ""
		if op.Value != nil {
			value = *op.Value
		}
		switch op.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			areq.Set[op.Name] = value
		case kmsg.IncrementalAlterConfigOpDelete:
			areq.Delete = append(areq.Delete, op.Name)
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			if configTypes[op.Name] != kmsg.ConfigTypeList {
				return nil, errors.Join(broker.ErrInvalidConfig, errInvalid("%s is not a list config", op.Name))
			}
			if current == nil {
				entries, err := a.topicConfigs(ctx, r.ResourceName)
				if err != nil {
					return nil, err
				}
				current = map[string]string{}
				for _, e := range entries {
					current[e.Name] = e.Value
				}
			}
			base := current[op.Name]
			if v, ok := areq.Set[op.Name]; ok {
				base = v
			}
			areq.Set[op.Name] = listOp(base, value, op.Op == kmsg.IncrementalAlterConfigOpAppend)
		default:
			return nil, errInvalid("unknown config operation %d", op.Op)
		}
	}
	return areq, nil
}

// listOp appends to or removes from a comma-separated list the items of
// value.
func listOp(list, value string, add bool) string {
	items := splitList(list)
	for _, v := range splitList(value) {
		i := slices.Index(items, v)
		switch {
		case add && i < 0:
			items = append(items, v)
		case !add && i >= 0:
			items = slices.Delete(items, i, i+1)
		}
	}
	return strings.Join(items, ",")
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// describeCluster answers DescribeCluster v0-1 (brokers only: there are
// no KRaft controllers to list).
func (a *Adapter) describeCluster(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.DescribeClusterRequest)
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.EndpointType = req.EndpointType
	if req.Version >= 1 && req.EndpointType != 1 {
		resp.ErrorCode = c.ErrorCode(60, kerr.UnsupportedEndpointType.Code)
		return Respond(resp), nil
	}
	if _, err := a.admin.DescribeCluster(ctx, &brokerpb.DescribeClusterRequest{}); err != nil {
		resp.ErrorCode, resp.ErrorMessage = c.ErrorCode(60, codeOf(err)), messageOf(err)
		return Respond(resp), nil
	}
	brokers := a.svc.Brokers()
	ns := nodes(brokers)
	for _, bi := range brokers {
		n, ok := ns[bi.Id]
		if !ok {
			continue
		}
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port, rb.Rack = n.id, n.host, n.port, n.rack
		resp.Brokers = append(resp.Brokers, rb)
	}
	if id, err := a.svc.ClusterID(ctx); err == nil {
		resp.ClusterID = id
	}
	resp.ControllerID = a.controller(ns, a.svc.ControllerID())
	return Respond(resp), nil
}

// deleteRecords answers DeleteRecords v0-2: the log start moves to the
// offset (-1: the high watermark), as retention moves it.
func (a *Adapter) deleteRecords(ctx context.Context, c *Conn, kreq kmsg.Request) (Reply, error) {
	req := kreq.(*kmsg.DeleteRecordsRequest)
	resp := kmsg.NewPtrDeleteRecordsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition = p.Partition
			low, err := a.svc.DeleteRecords(ctx, t.Topic, p.Partition, p.Offset)
			rp.LowWatermark, rp.ErrorCode = low, c.ErrorCode(21, adminCodeOf(err))
			if err != nil {
				rp.LowWatermark = -1
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return Respond(resp), nil
}
