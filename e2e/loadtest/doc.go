// Package loadtest is the skeleton of every fault-under-load test, shared by
// the process tests (e2e) and the container tests (deploy/containertest): a
// producer writing keyed, numbered records while a fault is injected, what
// it had acknowledged where, and the check that the log holds every
// acknowledged record exactly once, at its acknowledged offset, in per-key
// order.
//
// A test starts a Load, waits for acknowledgements (AwaitAcks) instead of
// sleeping, injects its fault, waits for more, and ends with Finish (no
// record may fail) or Stop (failures counted, for faults where an unknown
// outcome is allowed), then Verify.
package loadtest
