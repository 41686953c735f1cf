// Package loginlimit makes password guessing slow and keeps it from
// starving real logins. A Limiter keeps, per source address, a budget of
// failed logins, and shares a few password-verification slots (PBKDF2
// costs milliseconds of CPU on purpose) fairly between sources. The broker
// consults it for gRPC passwords and for the Kafka listener's SASL PLAIN
// and SCRAM exchanges.
//
// # Sources
//
// A source is the caller's IP address; an IPv6 address counts by its /64
// (one host usually holds a whole /64, so rotating addresses inside it
// does not buy a fresh budget). IPv4-mapped IPv6 addresses are IPv4.
// Callers without an IP address share the zero source.
//
// # Invariants
//
//   - L1 (budget): a source holds up to Config.Burst failures' worth of
//     budget, and gains one back per Config.Interval. Each failed login
//     spends one; a success spends nothing, so logging in with one's own
//     account buys no guesses at another's. The debt is capped at
//     maxDebt Intervals, so a source that failed a million times is not
//     refused forever.
//   - L2 (admission): an attempt from a source with less than one failure
//     of budget waits until it has one, if that is at most
//     Config.MaxDelay away; otherwise it is refused at once with a
//     ThrottledError naming when to retry. A refused attempt does not
//     spend budget (refusals cost no password check).
//   - L3 (one check per source): Begin gives a source's attempts the
//     verification slots one at a time (its turn), so over any window W a
//     source gets at most Burst + W/Interval password checks, whatever its
//     concurrency, and occupies at most one shared slot. Admit (for
//     exchanges that run no check here, SCRAM's) takes no turn: its
//     attempts are bounded by L2 and by the connections a source may
//     open.
//   - L4 (fair slots): at most Config.Slots checks run at once over all
//     sources. Since each source waits for a slot with at most one attempt
//     (L3), the slots go round the waiting sources; a check that finds no
//     slot within Config.SlotWait fails with ErrBusy (retryable).
//   - L5 (bounded waiting): at most Config.MaxPending attempts of one
//     source wait in the Limiter at once; more are refused at once
//     (ThrottledError). Every wait is bounded by its context and by
//     MaxDelay (the turn, the budget) or SlotWait (the slot).
//   - L6 (bounded memory): at most Config.Sources sources are remembered;
//     a new one evicts the least recently seen source that has no attempt
//     waiting (forgetting a source gives it a full budget, so the bound is
//     large). With every remembered source waiting, a new source is
//     refused with ErrBusy.
//   - L7 (logging): Failed and Refused count per source and say when to
//     log: a source's first failure at once, then one line per
//     Config.LogEvery carrying the count of failures not yet logged, and
//     at most LogBurst lines at once over all sources (one more per
//     second), so a guessing loop or many sources cannot flood the log.
//
// Time is read from a Clock (a fake one in tests); waits use its After.
package loginlimit
