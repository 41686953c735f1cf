package group

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-log/strata/recordbatch"
)

func TestConfigValidate(t *testing.T) {
	good := testConfig(&memLog{}, newTopics(), newClock())
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := good.String(); !strings.Contains(s, "SessionTimeout: 10s") {
		t.Errorf("String() = %s", s)
	}
	for name, mutate := range map[string]func(*Config){
		"no log":            func(c *Config) { c.Log = nil },
		"no topics":         func(c *Config) { c.Topics = nil },
		"negative part":     func(c *Config) { c.Partition = -1 },
		"session too small": func(c *Config) { c.SessionTimeout = time.Millisecond },
		"heartbeat >= sess": func(c *Config) { c.HeartbeatInterval = c.SessionTimeout },
		"bounds inverted":   func(c *Config) { c.MinSessionTimeout = 2 * c.MaxSessionTimeout },
	} {
		c := good
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := (Config{Log: &memLog{}, Topics: newTopics()}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestLoadSkipsUndecodableRecords: junk in the partition loses only itself.
func TestLoadSkipsUndecodableRecords(t *testing.T) {
	e := newEnv(t, newTopics("a", 1))
	if _, err := commit(e.c, "g", "", -1, oc("a", 0, 3)); err != nil {
		t.Fatal(err)
	}
	_ = e.log.Append(context.Background(), []recordbatch.Record{
		{Key: []byte{0xff, 0xff}, Value: []byte("x")},
		{Key: nil, Value: []byte("x")},
	})
	e.failover()
	if got := fetch(t, e.c, "g"); got[TopicPartition{"a", 0}] != 3 {
		t.Fatalf("offsets %v", got)
	}
}
