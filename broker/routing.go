package broker

// Routing: where topics and partitions are, as this broker's mirrors see
// them, for the service layer.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// maxResponseBytes keeps a fetch response under the gRPC message limit
// (internal/grpcserve: 16 MiB) with room for framing.
const maxResponseBytes = 15 << 20

// topicRecord returns a live (not deleting) topic from the mirror.
func (b *Broker) topicRecord(name string) (*brokerpb.TopicRecord, error) {
	kv := b.topics.get(topicKey(name))
	if kv == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownTopic, name)
	}
	return liveTopic(name, kv)
}

// liveTopic decodes a topic's record, unknown while it is being deleted.
func liveTopic(name string, kv *metadpb.KeyValue) (*brokerpb.TopicRecord, error) {
	rec, err := unmarshalled[brokerpb.TopicRecord](kv.Value)
	if err != nil {
		return nil, err
	}
	if rec.Deleting {
		return nil, fmt.Errorf("%w %q (being deleted)", ErrUnknownTopic, name)
	}
	return rec, nil
}

// currentTopicRecord is topicRecord for a client that names the topic:
// a miss in the mirror is checked against metad before it is answered as
// unknown. The mirror trails metad, so a topic created through another
// broker (or through this one, a moment ago) may not be in it yet, and a
// client that creates a topic and then produces to it must not be told it
// does not exist. The extra read costs one metad Get per miss (metadata
// requests name at most MaxMetadataTopics topics).
//
// The mirror is read once: reading it twice (a miss, then "is it there
// now?") answered unknown for a topic that arrived between the two reads.
func (b *Broker) currentTopicRecord(ctx context.Context, name string) (*brokerpb.TopicRecord, error) {
	if kv := b.topics.get(topicKey(name)); kv != nil {
		return liveTopic(name, kv) // found, or found being deleted
	}
	kv, err := b.meta.Get(ctx, topicKey(name))
	if errors.Is(err, metaclient.ErrNotFound) {
		return nil, fmt.Errorf("%w %q", ErrUnknownTopic, name)
	}
	if err != nil {
		return nil, err
	}
	return liveTopic(name, kv)
}

// partitionLog returns the served log of a partition, or the error a client
// should see: unknown topic or partition, or not-owner with the owner's
// address.
func (b *Broker) partitionLog(topic string, partition int32) (*partlog.Log, error) {
	k := tp{topic, partition}
	if l := b.serving(k); l != nil {
		return l, nil
	}
	rec, err := b.topicRecord(topic)
	if err != nil {
		return nil, err
	}
	if partition < 0 || partition >= rec.Partitions {
		return nil, fmt.Errorf("%w: topic %q has partitions 0..%d, not %d", ErrUnknownPartition, topic, rec.Partitions-1, partition)
	}
	return nil, b.redirect(ErrNotOwner, k, k.String())
}

// redirect is err (ErrNotOwner or ErrNotCoordinator) naming k's serving
// owner, when there is one and it is not this broker (still taking over).
func (b *Broker) redirect(err error, k tp, detail string) *RedirectError {
	r := &RedirectError{err: err, detail: detail}
	if o := b.owner(k); o != nil && o.BrokerId != b.cfg.ID {
		r.Address, r.BrokerID = o.Address, o.BrokerId
	}
	return r
}

// internalTopic: names starting with "__" are reserved for the broker's
// own topics (CreateTopic refuses them).
func internalTopic(name string) bool { return strings.HasPrefix(name, "__") }

// forEachBounded runs f(0..n-1) on at most workers goroutines and returns
// when all are done; with one entry it runs inline.
func forEachBounded(n, workers int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// waitAny waits until one of chans is closed (true), or d passes or ctx
// ends (false).
func waitAny(ctx context.Context, chans []<-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	if len(chans) == 1 {
		select {
		case <-chans[0]:
			return true
		case <-timer.C:
		case <-ctx.Done():
		}
		return false
	}
	cases := make([]reflect.SelectCase, 0, len(chans)+2)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for _, c := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	i, _, _ := reflect.Select(cases)
	return i >= 2
}

// metadataTopics dedups the requested topics, keeping the first-seen
// order, and caps their number: a repeated topic was described once per
// repeat (300 repeats of a 10,000-partition topic cost 11.8 s and 1 GB for a response that was then discarded).
func metadataTopics(requested []string) ([]string, error) {
	if len(requested) == 0 {
		return nil, nil
	}
	seen := make(map[string]struct{}, min(len(requested), MaxMetadataTopics))
	names := make([]string, 0, min(len(requested), MaxMetadataTopics))
	for _, name := range requested {
		if _, dup := seen[name]; dup {
			continue
		}
		if len(names) == MaxMetadataTopics {
			return nil, invalidf("metadata request names more than %d distinct topics", MaxMetadataTopics)
		}
		seen[name] = struct{}{}
		names = append(names, name)
	}
	return names, nil
}

func (b *Broker) liveBrokers() []*brokerpb.BrokerInfo {
	snap, _ := b.brokers.snapshot()
	out := make([]*brokerpb.BrokerInfo, 0, len(snap))
	for _, kv := range snap {
		if info, err := unmarshalled[brokerpb.BrokerInfo](kv.Value); err == nil {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// topicNames lists live topics, sorted.
func (b *Broker) topicNames(includeInternal bool) []string {
	snap, _ := b.topics.snapshot()
	var names []string
	for _, kv := range snap {
		rec, err := unmarshalled[brokerpb.TopicRecord](kv.Value)
		if err != nil || rec.Deleting || (rec.Internal && !includeInternal) {
			continue
		}
		names = append(names, rec.Name)
	}
	sort.Strings(names)
	return names
}

// topicMarshal encodes a topic record.
func topicMarshal(rec *brokerpb.TopicRecord) []byte {
	v, _ := proto.Marshal(rec)
	return v
}
