package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
)

// The ids a broker hands out or answers with: node ids (Kafka's int32 per
// broker), the cluster id, and topic ids.

// Keys of the brokers' numbers: Kafka clients name brokers by an int32.
const (
	nodeIDsPrefix  = "/strata/broker-node-ids/"
	nodeIDNextKey  = "/strata/broker-node-ids-next"
	firstNodeID    = 1
	maxNodeIDValue = math.MaxInt32
)

func nodeIDKey(id string) string { return nodeIDsPrefix + id }

// nodeID returns the broker's node id: the number stored under its broker
// id, taken from a counter the first time that id registers. A number is
// never given to two broker ids, nor reused after a broker id is gone.
func (b *Broker) nodeID(ctx context.Context) (int32, error) {
	if n := b.node.Load(); n != 0 {
		return n, nil
	}
	for {
		kv, err := b.meta.Get(ctx, nodeIDKey(b.cfg.ID))
		if err == nil {
			n, err := strconv.ParseInt(string(kv.Value), 10, 32)
			if err != nil || n < firstNodeID {
				return 0, fmt.Errorf("broker: corrupt node id %q under %s", kv.Value, kv.Key)
			}
			b.node.Store(int32(n))
			return int32(n), nil
		}
		if !errors.Is(err, metaclient.ErrNotFound) {
			return 0, err
		}
		first, err := b.takeFromCounter(ctx, nodeIDNextKey, firstNodeID, 1)
		if err != nil {
			return 0, err
		}
		if first > maxNodeIDValue {
			return 0, fmt.Errorf("broker: node ids exhausted (%d)", first)
		}
		_, err = b.meta.Put(ctx, nodeIDKey(b.cfg.ID), []byte(strconv.FormatInt(first, 10)), metaclient.WithExpectedVersion(0))
		if err != nil && !errors.Is(err, metaclient.ErrVersionConflict) {
			return 0, err
		}
		// Written, or written by a racing start of the same id: read it.
	}
}

// takeFromCounter takes n numbers from the counter at key (absent: it
// starts at start) by compare-and-set and returns the first.
func (b *Broker) takeFromCounter(ctx context.Context, key string, start, n int64) (int64, error) {
	for {
		next, version := start, int64(0)
		kv, err := b.meta.Get(ctx, key)
		switch {
		case err == nil:
			next, err = strconv.ParseInt(string(kv.Value), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("broker: corrupt counter %q under %s", kv.Value, key)
			}
			version = kv.Version
		case !errors.Is(err, metaclient.ErrNotFound):
			return 0, err
		}
		_, err = b.meta.Put(ctx, key, []byte(strconv.FormatInt(next+n, 10)), metaclient.WithExpectedVersion(version))
		if errors.Is(err, metaclient.ErrVersionConflict) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return next, nil
	}
}

// ClusterID is the cluster's id (Kafka's cluster id): random, made once
// and kept in metad; the object store's keys are prefixed with it too.
func (s *Service) ClusterID(ctx context.Context) (string, error) {
	b := s.b
	if id, ok := b.cluster.Load().(string); ok {
		return id, nil
	}
	id, err := b.clusterID(ctx)
	if err != nil {
		return "", err
	}
	b.cluster.Store(id)
	return id, nil
}

// TopicName is the name of the live topic whose id is id (TopicRecord.id,
// 32 hex digits: Kafka's topic UUID), from an index of the topics mirror
// rebuilt when it changes.
func (s *Service) TopicName(id string) (string, bool) {
	return s.b.topicIDs.lookup(s.b.topics, id)
}

// topicIndex maps topic ids to names, rebuilt from the topics mirror
// after it changed.
type topicIndex struct {
	mu      sync.Mutex
	byID    map[string]string
	changed <-chan struct{} // nil before the first build
}

func (x *topicIndex) lookup(topics *mirror, id string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	stale := x.changed == nil
	if !stale {
		select {
		case <-x.changed:
			stale = true
		default:
		}
	}
	if stale {
		snap, changed := topics.snapshot()
		x.byID = make(map[string]string, len(snap))
		for _, kv := range snap {
			if rec, err := unmarshalled[brokerpb.TopicRecord](kv.Value); err == nil && !rec.Deleting {
				x.byID[rec.Id] = rec.Name
			}
		}
		x.changed = changed
	}
	name, ok := x.byID[id]
	return name, ok
}
