// Package ledgers is the ledger side of the strata command-line tool:
// the rows of `strata ledger list` and `describe` (Row: quorums, state,
// entries and length once closed, fragments with their entry ranges),
// the result of `simpletest`, and the per-entry checks of `read`, as text
// or JSON. cmd/strata only parses flags, opens the ledger and calls it.
package ledgers
