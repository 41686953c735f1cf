package broker

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/proto/metadpb"
)

func TestValidateTopicName(t *testing.T) {
	for _, ok := range []string{"orders", "a", "A.b_c-9", strings.Repeat("x", 249)} {
		if err := ValidateTopicName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                       "empty",
		strings.Repeat("x", 250): "250 characters",
		".":                      "not allowed",
		"..":                     "not allowed",
		"a/b":                    "only ASCII",
		"é":                      "only ASCII",
		"a b":                    "only ASCII",
	} {
		if err := ValidateTopicName(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", name, err, want)
		}
	}
}

func TestParseTopicConfig(t *testing.T) {
	c, err := ParseTopicConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.SegmentBytes != 1<<30 || c.Ensemble != 3 || c.WriteQuorum != 3 || c.AckQuorum != 2 ||
		c.CleanupPolicy != "delete" || c.RetentionMs != 604800000 || c.MaxMessageBytes != 1048588 {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = ParseTopicConfig(map[string]string{"cleanup.policy": "delete, compact", "segment.bytes": "16384", "ack.quorum": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.CleanupPolicy != "compact,delete" || c.SegmentBytes != 16384 || c.AckQuorum != 1 {
		t.Fatalf("parsed: %+v", c)
	}
	for _, tc := range []struct {
		set  map[string]string
		want []string
	}{
		{map[string]string{"retention.ms": "soon"}, []string{"retention.ms", `integer, got "soon"`}},
		{map[string]string{"segment.bytes": "10"}, []string{"segment.bytes", "out of range"}},
		{map[string]string{"cleanup.policy": "keep"}, []string{"cleanup.policy", "delete, compact or compact,delete"}},
		{map[string]string{"bogus": "1", "retention.bytes": "x"}, []string{`unknown topic config "bogus"`, "retention.bytes"}},
		{map[string]string{"ack.quorum": "3", "write.quorum": "2"}, []string{"ensemble >= write.quorum >= ack.quorum"}},
	} {
		_, err := ParseTopicConfig(tc.set)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want an error containing %q", tc.set, err, w)
			}
		}
	}
	entries := effectiveConfigs(map[string]string{"retention.ms": "1000"})
	if len(entries) != len(topicConfigDefs) {
		t.Fatalf("%d entries", len(entries))
	}
	for _, e := range entries {
		if (e.Name == "retention.ms") == e.IsDefault || (e.Name == "retention.ms" && e.Value != "1000") {
			t.Errorf("entry %v", e)
		}
	}
}

func TestParseTP(t *testing.T) {
	p, err := parseTP("a.b-c/12")
	if err != nil || p.topic != "a.b-c" || p.partition != 12 || p.String() != "a.b-c/12" {
		t.Fatalf("%v %v", p, err)
	}
	for _, bad := range []string{"", "x", "/1", "x/", "x/-1", "x/y"} {
		if _, err := parseTP(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestLoadChoice(t *testing.T) {
	load := map[string]int{"k1": 3, "k2": 1, "k3": 1, "k4": 5}
	if got := leastLoaded(load); got != "k2" {
		t.Errorf("least loaded %s, want k2 (ties by id)", got)
	}
	if got := mostLoaded(load); got != "k4" {
		t.Errorf("most loaded %s", got)
	}
}

// topicConfig parses a topic's record once per revision: the cached
// answer serves until the record changes, and a deleted topic is unknown.
func TestTopicConfigFollowsRevisions(t *testing.T) {
	b := &Broker{topics: newMirror(nil, topicsPrefix, slog.New(slog.DiscardHandler))}
	put := func(rev int64, retentionMs string) {
		b.topics.kvs[topicKey("t")] = &metadpb.KeyValue{Key: topicKey("t"), ModRevision: rev,
			Value: topicMarshal(&brokerpb.TopicRecord{Name: "t", Partitions: 1, Configs: map[string]string{"retention.ms": retentionMs}})}
	}
	check := func(want int64) {
		t.Helper()
		tc, internal, err := b.topicConfig("t")
		if err != nil || internal || tc.RetentionMs != want {
			t.Fatalf("topicConfig: %+v internal=%v err=%v, want retention.ms %d", tc, internal, err, want)
		}
	}
	put(5, "1000")
	check(1000)
	check(1000)
	put(9, "2000")
	check(2000)
	// A record changed under the same revision is not parsed again: the
	// revision is what says it changed.
	b.topics.kvs[topicKey("t")].Value = topicMarshal(&brokerpb.TopicRecord{Name: "t", Partitions: 1,
		Configs: map[string]string{"retention.ms": "3000"}})
	check(2000)
	put(10, "not a number")
	if _, _, err := b.topicConfig("t"); err == nil {
		t.Fatal("a bad config parsed")
	}
	delete(b.topics.kvs, topicKey("t"))
	if _, _, err := b.topicConfig("t"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("deleted topic: %v", err)
	}
}
