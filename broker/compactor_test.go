package broker

import (
	"math"
	"strings"
	"testing"
)

// TestCompactionTopicConfigs: the compaction keys parse with Kafka's
// defaults, bad values are refused, and the policy handed to the log
// compacts (and never tiers) a compacted topic.
func TestCompactionTopicConfigs(t *testing.T) {
	c, err := ParseTopicConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Compacted() || c.Policy().Compact || c.MinCleanableDirtyRatio != 0.5 || c.MaxCompactionLagMs != math.MaxInt64 ||
		c.DeleteRetentionMs != 86400000 || c.MinCompactionLagMs != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = ParseTopicConfig(map[string]string{"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.1",
		"max.compaction.lag.ms": "60000", "min.compaction.lag.ms": "1000", "delete.retention.ms": "5000", "remote.storage.enable": "true"})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy()
	if !p.Compact || !p.Delete || !p.RemoteStorage || p.DeleteRetentionMs != 5000 || p.Compaction.MinCleanableDirtyRatio != 0.1 ||
		p.Compaction.MaxCompactionLagMs != 60000 || p.Compaction.MinCompactionLagMs != 1000 {
		t.Fatalf("policy: %+v", p)
	}
	if err := p.Compaction.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"},
		{map[string]string{"min.cleanable.dirty.ratio": "half"}, "min.cleanable.dirty.ratio"},
		{map[string]string{"max.compaction.lag.ms": "0"}, "max.compaction.lag.ms"},
		{map[string]string{"max.compaction.lag.ms": "10", "min.compaction.lag.ms": "20"}, "below min.compaction.lag.ms"},
	} {
		if _, err := ParseTopicConfig(tc.set); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.set, err, tc.want)
		}
	}
}
