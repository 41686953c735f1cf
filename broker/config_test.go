package broker

import (
	"strings"
	"testing"
	"time"
)

// Validate refuses group timing that cannot work, the compaction buffer's
// bounds and a fetch budget too small for two responses; the defaults
// pass.
func TestConfigValidateGroupAndCompaction(t *testing.T) {
	valid := func() Config {
		c := DefaultConfig()
		c.ID = "k1"
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, tc := range map[string]struct {
		change func(*Config)
		want   string
	}{
		"min session 0":              {func(c *Config) { c.GroupMinSessionTimeout = 0 }, "session"},
		"default below min":          {func(c *Config) { c.GroupMinSessionTimeout = c.GroupSessionTimeout + time.Second }, "session"},
		"max below default":          {func(c *Config) { c.GroupMaxSessionTimeout = c.GroupSessionTimeout - time.Second }, "session"},
		"heartbeat 0":                {func(c *Config) { c.GroupHeartbeatInterval = 0 }, "heartbeat"},
		"heartbeat at min session":   {func(c *Config) { c.GroupHeartbeatInterval = c.GroupMinSessionTimeout }, "heartbeat"},
		"negative tick":              {func(c *Config) { c.GroupTickInterval = -time.Second }, "GroupTickInterval"},
		"negative compaction buffer": {func(c *Config) { c.CompactionBufferBytes = -1 }, "--compaction-buffer-bytes"},
		"fetch budget below 40 MiB":  {func(c *Config) { c.MaxInflightFetchBytes = 32 << 20 }, "--max-inflight-fetch-bytes"},
	} {
		c := valid()
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want an error naming %q", name, err, tc.want)
		}
	}
}

// A plaintext Kafka listener on a network address needs --insecure, as the
// gRPC one does; loopback and TLS do not.
func TestConfigValidateKafkaListenerExposure(t *testing.T) {
	c := DefaultConfig()
	c.ID, c.KafkaListen = "k1", "10.1.2.3:9092"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--kafka-listen 10.1.2.3:9092") {
		t.Fatalf("plaintext Kafka on a network address: %v", err)
	}
	c.Insecure = true
	if err := c.Validate(); err != nil {
		t.Fatalf("with --insecure: %v", err)
	}
	c.Insecure, c.KafkaListen = false, "127.0.0.1:9092"
	if err := c.Validate(); err != nil {
		t.Fatalf("on loopback: %v", err)
	}
}
