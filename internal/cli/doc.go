// Package cli holds the logic of the strata command-line tool that is worth
// testing without a process: endpoint resolution, text and JSON output of
// metad data, the cluster status report, and exit codes. cmd/strata only
// wires cobra commands to it.
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
// # Exit codes
//
// 0 success; 1 a runtime error (printed as "strata: <message>" on stderr),
// including a missing key for get and a version conflict for put; 2 a usage
// error, or (status) a cluster without a leader or with an unreachable
// member.
package cli
