// Package brokertest starts real brokers in-process for tests (franz-go's
// kfake idea, but over the real broker code): a one-member metad on a temp
// dir, in-memory bookies and ledger metadata (ledger/ledgertest), and n
// brokers (package broker, built with broker.New) serving gRPC on loopback
// ports. Client and CLI tests run against it instead of hand-written fake
// brokers, so what they exercise is what production runs.
//
// Faults a test needs are options, not a second fake: Options.Interceptor
// wraps every unary call of a broker (fail it, hold it, count it), and
// Cluster.Bookies is the ledgertest fake with its crash and delay hooks.
//
// Invariants:
//
//   - BT1 Start returns once every broker is ready (registered and its
//     mirrors loaded) and a controller is elected; CreateTopic returns once
//     every partition of the topic is served (its owner record matches its
//     assignment), so a test's first request does not race a takeover.
//   - BT2 Everything started is stopped by t.Cleanup, brokers first, then
//     metad; ports come from 127.0.0.1:22000-22999.
//   - BT3 MovePartition moves only a served partition, as the controller
//     does (broker/placement.go, PL3): it never reassigns one mid-takeover,
//     so a test moving partitions in a loop does not cancel takeovers the
//     controller itself would not.
//
// The group coordinator's timers are broker.Config fields
// (GroupMinSessionTimeout, GroupHeartbeatInterval, GroupTickInterval, ...):
// a test that needs sub-second sessions sets them in Options.Configure.
package brokertest
