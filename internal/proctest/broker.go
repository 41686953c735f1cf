package proctest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// BrokerNode is a broker process started by StartBroker.
type BrokerNode struct {
	*Process
	ID, Listen, AdminAddr string
	// KafkaAddr is the broker's Kafka protocol listener.
	KafkaAddr string
}

// StartBroker starts a broker against meta and waits until it is ready.
// The process is killed when the test ends.
func StartBroker(t testing.TB, bin string, meta *MetadCluster, id string, extra ...string) *BrokerNode {
	t.Helper()
	return StartBrokerEnv(t, bin, meta, id, nil, extra...)
}

// StartBrokerEnv is StartBroker with env ("KEY=value") added to the
// broker's environment (StartEnv).
func StartBrokerEnv(t testing.TB, bin string, meta *MetadCluster, id string, env []string, extra ...string) *BrokerNode {
	t.Helper()
	b := &BrokerNode{ID: id, Listen: FreeAddr(t), AdminAddr: FreeAddr(t), KafkaAddr: FreeAddr(t)}
	b.Process = StartEnv(t, "broker-"+id, bin, env, b.Args(meta, extra...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// Args are the broker's command-line arguments.
func (b *BrokerNode) Args(meta *MetadCluster, extra ...string) []string {
	return append([]string{
		"--id", b.ID, "--listen", b.Listen, "--admin-listen", b.AdminAddr, "--kafka-listen", b.KafkaAddr,
		"--metad", strings.Join(meta.Endpoints(), ","), "--session-ttl", "3s",
	}, extra...)
}

// WaitReady polls the broker's /readyz.
func (b *BrokerNode) WaitReady(ctx context.Context) error {
	if err := b.Process.WaitHTTP(ctx, "http://"+b.AdminAddr+"/readyz"); err != nil {
		return fmt.Errorf("broker %s: %w", b.ID, err)
	}
	return nil
}
