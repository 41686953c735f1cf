package broker

import "github.com/prometheus/client_golang/prometheus/testutil"

// FetchPartitionReads is the partition reads b's fetches made.
func FetchPartitionReads(b *Broker) float64 { return testutil.ToFloat64(b.fetchBudget.metrics.reads) }

// FetchBudget is what b's fetch responses hold now and at most so far,
// and their limit.
func FetchBudget(b *Broker) (used, peak, limit int64) {
	r := b.fetchBudget.responses
	return r.Used(), r.Peak(), r.Limit()
}

// FetchConnShare is the most one connection's fetches may hold.
func FetchConnShare(b *Broker) int64 { return b.fetchBudget.perConn }
