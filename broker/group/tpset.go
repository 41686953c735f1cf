package group

import (
	"cmp"
	"slices"

	"github.com/strata-log/strata/proto/brokerpb"
)

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func compareTP(a, b TopicPartition) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// tpSet is a set of partitions. The nil set is empty and readable.
type tpSet map[TopicPartition]struct{}

func (s tpSet) has(tp TopicPartition) bool { _, ok := s[tp]; return ok }

func (s tpSet) clone() tpSet {
	out := make(tpSet, len(s))
	for tp := range s {
		out[tp] = struct{}{}
	}
	return out
}

// minus returns s \ o.
func (s tpSet) minus(o tpSet) tpSet {
	out := tpSet{}
	for tp := range s {
		if !o.has(tp) {
			out[tp] = struct{}{}
		}
	}
	return out
}

// intersect returns s ∩ o.
func (s tpSet) intersect(o tpSet) tpSet {
	out := tpSet{}
	for tp := range s {
		if o.has(tp) {
			out[tp] = struct{}{}
		}
	}
	return out
}

// subsetOf says whether every element of s is in o.
func (s tpSet) subsetOf(o tpSet) bool {
	for tp := range s {
		if !o.has(tp) {
			return false
		}
	}
	return true
}

func (s tpSet) equal(o tpSet) bool { return len(s) == len(o) && s.subsetOf(o) }

func (s tpSet) sorted() []TopicPartition {
	out := make([]TopicPartition, 0, len(s))
	for tp := range s {
		out = append(out, tp)
	}
	slices.SortFunc(out, compareTP)
	return out
}

// toProto renders s grouped by topic, topics and partitions sorted.
func (s tpSet) toProto() []*brokerpb.TopicPartitions {
	var out []*brokerpb.TopicPartitions
	for _, tp := range s.sorted() {
		if n := len(out); n == 0 || out[n-1].Topic != tp.Topic {
			out = append(out, &brokerpb.TopicPartitions{Topic: tp.Topic})
		}
		last := out[len(out)-1]
		last.Partitions = append(last.Partitions, tp.Partition)
	}
	return out
}

func tpSetFromProto(in []*brokerpb.TopicPartitions) tpSet {
	out := tpSet{}
	for _, t := range in {
		for _, p := range t.GetPartitions() {
			out[TopicPartition{t.GetTopic(), p}] = struct{}{}
		}
	}
	return out
}
