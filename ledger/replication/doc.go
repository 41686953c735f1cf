// Package replication is Strata's autorecovery (BookKeeper's auditor and
// replication worker): ledgers with a copy on a bookie that has been gone
// longer than a grace period, or that an operator decommissioned, are copied
// to other bookies until every entry is back at Qw copies. It is a client of
// the ledger protocol (package ledger) and must not import the bookie server
// (ledger/bookie), which hosts it.
//
// # Parts
//
//   - Audit (audit.go) is a pure decision over inputs: every ledger's
//     metadata, the live bookie addresses, the decommissioned addresses,
//     when each missing address was first seen missing, and the clock. It
//     returns the repair tasks, the new missing-since records and the
//     under-replicated ledger count. Table tests drive it.
//   - The worker (repair.go) repairs one fixed fragment: any fragment of a
//     CLOSED ledger, or one before the last of an OPEN ledger. It
//     chooses a replacement (writable, not in the fragment, not
//     decommissioned, preferably in a rack the fragment's other members
//     are not in, else the one they use least:
//     ledger.Placement.ChooseReplacement, the writer's rule for an
//     ensemble change too), copies every entry of the fragment whose write
//     set holds the bad bookie from a surviving replica with recovery adds
//     (accepted on fenced ledgers) and requires ADD_OK for each, then
//     compare-and-sets the metadata with the replacement at the bad
//     bookie's position, only while the fragment still names the bad
//     bookie, is still fixed and
//     holds no entry beyond those copied (re-reading on conflict or unknown
//     outcome, and deciding again). A surviving member that answers "no
//     such entry" for an entry it should hold gets a copy too.
//   - The Replicator (replicator.go) runs audits and repairs every Interval
//     while it is the elected leader (elect.go: a create-only key on a metad
//     lease). Every bookie process runs one by default (bookie.Config.
//     Autorecovery); one leads at a time.
//   - Decommissioning (decommission.go) records an operator's request, and
//     reports how many ledgers and fragments still name the bookie.
//
// # Rules
//
//  1. A bookie is "missing" while no live registration has its address
//     (registrations are on leases: a dead bookie's vanishes after its
//     TTL). It is re-replicated only once it has been missing for Grace
//     (default 30s), so a restart does not copy everything it holds. When
//     it was first seen missing is recorded in metad, so a new leader keeps
//     counting from then.
//  2. A decommissioned bookie is re-replicated at once: it is alive, and is
//     also a source of last resort for the copy.
//  3. Only fixed fragments are repaired in place: every fragment of a
//     CLOSED ledger (immutable), and every fragment but the last of an
//     OPEN ledger. The latter's entries are fixed too: its range is
//     [first entry, next fragment's first entry - 1] (last_entry_id is
//     meaningless while open), and every entry in it was acknowledged
//     before the next fragment began (ledger W4); its writer only appends
//     to the last fragment. The swap changes that one bookie and nothing
//     else (the ledger stays OPEN, later fragments as they are); when it
//     conflicts with the writer (an ensemble change, a close) it re-reads
//     and decides again, and the writer, whose own compare-and-set
//     conflicts with the swap, rebases on it (ledger W7). So a writer that
//     replaced a dead bookie by an ensemble change is not disturbed when
//     the fragments before that are repaired (as in BookKeeper).
//     An OPEN ledger with a bookie missing or decommissioned for longer
//     than Grace in its LAST fragment (its writer did not replace it: the
//     writer is gone or found no spare), and an IN_RECOVERY ledger with
//     one in any fragment (a recovery that did not finish: the writer is
//     already fenced, and the recovery owns the metadata), is recovered
//     (ledger.Recover: fenced and closed; its owner rolls to a new ledger,
//     as after any fencing), then repaired as closed in the same round.
//     This is BookKeeper's openLedgerRereplicationGracePeriod; it also
//     closes idle open ledgers whose copies would otherwise stay short
//     (Pulsar #13073).
//  4. The metadata names the replacement only after every copy is durable
//     on it, so a reader that follows the metadata never finds a copy
//     missing. A failed repair leaves at most unreferenced copies on the
//     replacement (not deleted: see below); the next round retries it.
//  5. A ledger deleted during a repair is skipped (LedgerGone), not failed.
//  6. Leadership is an efficiency, not a safety, device: two replicators
//     that both believe they lead (a lease expired before its holder
//     noticed) only duplicate work, because every step re-checks the
//     metadata by compare-and-set and concurrent recoveries converge.
//
// Not done here: copies left behind (on a replaced bookie that comes back,
// or on a replacement whose repair failed) are not deleted: deleting a
// ledger on a bookie is only safe when nothing might be copying into it,
// which a possibly concurrent replicator cannot know. The bookies' own
// sweep (ledger/bookie, rule O5) removes copies of ledgers metad no longer
// lists, and keeps these until their ledger is deleted. Nor does the auditor read every copy to find entries
// missing on live bookies (BookKeeper's checkAllLedgers); it only repairs
// gaps it meets while copying. And each round lists every ledger's
// metadata (one paged metad listing): with very many ledgers, raise the
// interval (BookKeeper's auditor instead reacts to bookie changes and
// checks everything daily).
//
// # Operating it
//
//	strata bookie decommission ID [--wait]   mark, then report (or wait for) the drain
//	strata bookie recommission ID            withdraw it
//	strata bookie list                       bookies, ledgers on each, under-replicated count
//	bookie --autorecovery=false | --autorecovery-interval 10s | --autorecovery-grace 30s
//
// # Keys and values in metad
//
// All values are JSON objects (UTF-8, no trailing newline), written with
// encoding/json; unknown fields are ignored when read.
//
//	/strata/bookies/decommissioned/<bookie id>
//	    {"bookie_id":"b2","address":"10.0.0.2:7301","requested_at_ms":1735689600000}
//	    Written by MarkDecommissioned (strata bookie decommission), removed
//	    by Recommission. The address is the one fragments name the bookie
//	    by; the replicator also treats the bookie's current registration
//	    address as decommissioned, and ignores the recorded address while
//	    another bookie registers there.
//	/strata/replication/missing/<url.PathEscape(address)>
//	    {"address":"10.0.0.2:7301","since_ms":1735689600000}
//	    Written by the leader when a ledger names an address with no live
//	    registration; deleted when the address is registered again or no
//	    ledger names it.
//	/strata/replication/addresses/<bookie id>
//	    {"bookie_id":"b2","address":"10.0.0.2:7301"}
//	    The last address each bookie registered (written by the leader when
//	    it changes), so a dead bookie can be decommissioned by id.
//	/strata/replication/leader   (on the leader's lease)
//	    {"id":"b1","since_ms":1735689600000}
//
// Bookie registrations (/strata/bookies/registry/<id>, protobuf BookieInfo)
// and cookies (/strata/bookies/cookies/<id>) are read, never written.
//
// # Metrics
//
// strata_replication_leader, _under_replicated_ledgers, _waiting_ledgers,
// _missing_bookies, _last_audit_timestamp_seconds (gauges; only the
// leader's are non-zero), _round_duration_seconds (histogram),
// _entries_copied_total, _copied_bytes_total, _repairs_total{result},
// _ledgers_recovered_total (counters).
package replication
