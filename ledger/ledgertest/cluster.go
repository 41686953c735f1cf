package ledgertest

import (
	"fmt"

	"github.com/strata-log/strata/ledger"
)

// Cluster bundles the fakes for one test.
type Cluster struct {
	Bookies   *FakeBookies
	Meta      *FakeMetadata
	Registry  *FakeRegistry
	Scheduler *ManualScheduler
}

// NewCluster returns n writable bookies named bookie-0..bookie-(n-1), in
// auto mode, an empty metadata store and a manual scheduler. The bookies
// check each add's digest against the ledger's key in the store, as real
// bookies do (FakeBookies.SetVerifier), reading it even while the store
// is unavailable.
func NewCluster(n int) *Cluster {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("bookie-%d", i)
	}
	c := &Cluster{
		Bookies:   NewFakeBookies(addrs...),
		Meta:      NewFakeMetadata(),
		Registry:  NewFakeRegistry(addrs...),
		Scheduler: NewManualScheduler(),
	}
	c.Bookies.SetVerifier(func(ledgerID, entryID uint64, entry []byte) bool {
		md, _, ok := c.Meta.Ledger(ledgerID)
		return ok && ledger.NewEntryChecker(md).Check(int64(entryID), entry) == nil
	})
	return c
}

// Env is the ledger.Env over the fakes; its clock is the scheduler's and
// its placement ledger.Ordered (no randomness: with equal free space, a
// ledger gets the first bookies by address, and a replacement the next).
func (c *Cluster) Env() ledger.Env {
	return ledger.Env{Meta: c.Meta, Bookies: c.Bookies, Registry: c.Registry, Now: c.Scheduler.Now,
		Placement: ledger.Ordered}
}

// Options fills opts.Scheduler with the cluster's scheduler.
func (c *Cluster) Options(opts ledger.CreateOptions) ledger.CreateOptions {
	opts.Scheduler = c.Scheduler
	return opts
}
