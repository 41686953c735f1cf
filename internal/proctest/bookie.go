package proctest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BookieNode is one bookie process of a test cluster.
type BookieNode struct {
	ID, Listen, AdminAddr, DataDir string
	*Process
}

// StartBookie starts a bookie registered with the metad cluster and waits
// until it is ready (registered).
func StartBookie(t testing.TB, bin string, meta *MetadCluster, id string, extra ...string) *BookieNode {
	t.Helper()
	b := &BookieNode{
		ID: id, Listen: FreeAddr(t), AdminAddr: FreeAddr(t),
		DataDir: filepath.Join(t.TempDir(), "bookie-"+id),
	}
	b.Process = Start(t, "bookie-"+id, bin, b.Args(meta, extra...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// Args are the bookie's command-line arguments.
func (b *BookieNode) Args(meta *MetadCluster, extra ...string) []string {
	return append([]string{
		"--id", b.ID, "--data-dir", b.DataDir, "--listen", b.Listen, "--admin-listen", b.AdminAddr,
		"--metad", strings.Join(meta.Endpoints(), ","), "--lease-ttl", "2s",
	}, extra...)
}

// WaitReady polls the bookie's /readyz.
func (b *BookieNode) WaitReady(ctx context.Context) error {
	if err := b.Process.WaitHTTP(ctx, "http://"+b.AdminAddr+"/readyz"); err != nil {
		return fmt.Errorf("bookie %s: %w", b.ID, err)
	}
	return nil
}
