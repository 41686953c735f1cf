// Package group is the consumer-group side of the strata command-line
// tool: listing groups, describing one (members, and per partition the
// committed offset, end, lag in records and in time), and planning and
// applying offset resets. It talks to brokers through Admin (a
// *client.Client) and prints text tables or JSON through cli.Printer;
// cmd/strata only parses flags and calls it.
//
// Invariants:
//
//	G1 A partition's Committed and Lag are -1 when nothing is committed;
//	   LagMs is 0 when caught up and -1 when unknown.
//	G2 A deleted topic keeps its commits: Describe lists them.
//	G3 A reset changes nothing unless executed, and refuses a group with
//	   members; an absolute offset is clamped to [log start, end].
package group
