package proctest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// MetadMember is one metad process of a test cluster.
type MetadMember struct {
	ID, Listen, RaftAddr, AdminAddr, DataDir string
	*Process
}

// MetadCluster is a metad cluster of real processes on loopback.
type MetadCluster struct {
	Members []*MetadMember
}

// StartMetad starts n metad members bootstrapped as one cluster, plus any
// extra flags, and waits until every member is ready.
func StartMetad(t testing.TB, bin string, n int, extra ...string) *MetadCluster {
	t.Helper()
	c := &MetadCluster{}
	var peers []string
	for i := 1; i <= n; i++ {
		m := &MetadMember{
			ID:        fmt.Sprint(i),
			Listen:    FreeAddr(t),
			RaftAddr:  FreeAddr(t),
			AdminAddr: FreeAddr(t),
			DataDir:   filepath.Join(t.TempDir(), fmt.Sprintf("metad-%d", i)),
		}
		c.Members = append(c.Members, m)
		peers = append(peers, m.ID+"="+m.RaftAddr)
	}
	for _, m := range c.Members {
		args := append([]string{
			"--id", m.ID, "--data-dir", m.DataDir, "--listen", m.Listen,
			"--raft-listen", m.RaftAddr, "--admin-listen", m.AdminAddr,
			"--peers", strings.Join(peers, ","),
		}, extra...)
		m.Process = Start(t, "metad-"+m.ID, bin, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range c.Members {
		if err := m.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// WaitReady polls the member's /readyz.
func (m *MetadMember) WaitReady(ctx context.Context) error {
	return m.Process.WaitHTTP(ctx, "http://"+m.AdminAddr+"/readyz")
}

// Endpoints lists every member's client address.
func (c *MetadCluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Listen)
	}
	return eps
}

// Member returns the member with the given id.
func (c *MetadCluster) Member(id string) *MetadMember {
	for _, m := range c.Members {
		if m.ID == id {
			return m
		}
	}
	return nil
}
