package main

import (
	"testing"

	"github.com/strata-log/strata/broker/brokertest"
)

// testBroker is one real broker (broker/brokertest: in-process metad and
// in-memory bookies) that the record commands run against in-process.
type testBroker struct {
	*brokertest.Cluster
	addr string
}

func startTestBroker(t *testing.T) *testBroker {
	t.Helper()
	cl := brokertest.Start(t, brokertest.Options{})
	return &testBroker{Cluster: cl, addr: cl.Addr()}
}
