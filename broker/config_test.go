package broker

import (
	"strings"
	"testing"
	"time"
)

// Validate refuses group timing that cannot work and the compaction
// buffer's bounds; the defaults pass.
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
	} {
		c := valid()
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want an error naming %q", name, err, tc.want)
		}
	}
}
