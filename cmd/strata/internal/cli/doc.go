// Package cli holds the logic of the strata command-line tool that is worth
// testing without a process: endpoint and broker resolution, text and JSON
// output of metad data, the metad status report, exit codes, and for the
// record commands the consume offset grammar (ParseOffset), kcat-style
// record format strings (ParseRecordFormat), the produce line splitter
// (LineSplitter: -K, -k, -Z), the latency histogram of strata bench, and
// the progress line of long commands (ProgressLine, on stderr when it is a
// terminal), and the writer that escapes control characters for a
// terminal (TerminalWriter).
// cmd/strata only wires cobra commands to it and to its subpackages, one
// per group of commands: stream (the produce and consume loops), topic,
// group, cluster (status and bookie tables), ledgers, tier, access (users
// and ACLs); the benchmark runner is cmd/strata/internal/bench and
// `strata dev`'s logic cmd/strata/devcluster.
//
// # Output
//
// Every command that prints structured data takes --output text|json.
// Text is for people: tables, or one line per item. JSON is for scripts:
// one object per command (one object per line for watch), with these
// fields for a key:
//
//	{"key": "...", "value": "...", "create_revision": 1, "mod_revision": 2,
//	 "version": 1, "lease": 7}
//
// "value" holds the value when it is valid UTF-8; otherwise the value is
// in "value_base64" instead. Keys listed with --keys-only have neither.
// "lease" is left out when 0.
//
// consume --output json prints one object per record (JSONRecord):
//
//	{"topic": "orders", "partition": 0, "offset": 7, "timestamp": 1700000000000,
//	 "key": "k1", "value": "hello", "headers": [{"key": "h", "value": "v"}]}
//
// A key or value that is not valid UTF-8 is base64 with "key_base64" or
// "value_base64": true beside it; a null key or value (tombstone) is null.
//
// # Exit codes
//
// 0 success; 1 a runtime error (printed as "strata: <message>" on stderr),
// including a missing key for get and a version conflict for put; 2 a usage
// error, or (meta status, cluster status) an unhealthy cluster, or (tier
// scrub) a damaged segment object; tier scrub exits 1 when objects could
// not be read but none was found damaged.
package cli
