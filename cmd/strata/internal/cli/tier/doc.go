// Package tier is the tiered-storage side of the strata command-line
// tool: `strata tier status` (per partition, what is in the object store,
// what is still on the bookies, and the upload lag, computed from topic
// descriptions alone: StatusRows) and `strata tier scrub` (the committed
// segment objects listed from metad, Segments, checked by tiering/scrub,
// with a progress line, a summary and JSON: Scrub). cmd/strata only
// parses flags and calls it.
//
// Exit codes of Scrub: 2 (cli.ExitUsage) when an object is damaged, 1
// when some could not be read but none was found damaged.
package tier
