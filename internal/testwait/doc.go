// Package testwait is the one way Strata's tests wait for something to
// happen: poll a condition until it holds, with a deadline, and say on
// failure what was awaited, for how long and what the condition last
// reported. It replaces the per-package waitFor / eventually copies and the
// bare time.Sleep calls that STYLE.md rules out ("No time.Sleep to wait for
// a condition: poll with a deadline, or drive a fake clock").
//
// # Contract
//
//   - The condition is evaluated at once, then after intervals that start
//     at FirstInterval and double up to MaxInterval, so a condition that
//     holds soon is seen soon and a slow one (an RPC, a container exec) is
//     not hammered.
//   - It is evaluated one last time at or after the deadline, so a
//     condition that became true while the poller slept is never reported
//     as a timeout.
//   - Until and UntilNil call t.Fatalf and so belong to the test's
//     goroutine; Poll returns an error (wrapping ErrTimeout and the
//     condition's last error) and is safe anywhere, e.g. inside a helper
//     goroutine or a cleanup that must not stop the test.
//
// A test that asserts several parties agree (every raft node, every
// replica) waits for the agreement itself, not for one party and then
// compares: the condition passed here is the assertion.
//
// Waiting deliberately for time to pass, to show that something does
// *not* happen, is not polling; such a sleep stays a time.Sleep with a
// comment saying so.
package testwait
