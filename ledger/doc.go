// Package ledger is the client half of Strata's replication protocol
// (BookKeeper's): creating ledgers, writing them with quorum acknowledgement
// and ensemble changes, reading them, fencing and recovering them, and
// closing them exactly once. The bookie, the server half, lives in
// ledger/bookie over ledger/storage, ledger/journal and ledger/index,
// on the file-system seam vfs.
//
// The protocol runs against an Env of three small interfaces and imports
// neither gRPC nor metad's client: BookieClient (real one:
// ledger/ledgergrpc), MetadataStore and BookieRegistry (real ones:
// ledger/ledgermetad, over the metad key layout of MetadataKey, NextIDKey
// and MetadataPrefix); ledger/ledgertest holds the in-memory twins.
//
// See DESIGN.md §3 for the invariants (W1–W7 in writer.go, R1–R10 in
// recovery_machine.go); every one of them but R10 comes from a data-loss
// bug in BookKeeper's history. R10 and V1–V3 below come from a client
// that writes to a bookie and is not the ledger's writer.
//
// An OPEN ledger's metadata has one other writer besides its Writer: the
// replicator (ledger/replication) may swap bookies in the fragments before
// the last one, whose entries are all acknowledged and never change (W4).
// The Writer accepts exactly that change when one of its compare-and-sets
// conflicts, and builds on top of it (W7); any other change still stops it
// (W5, or ErrWriterFailed wrapping ErrMetadataConflict).
//
// # Trusting a LAC
//
// A LAC is the writer's word that every entry up to it is acknowledged;
// bookies keep it, and recovery starts after the highest one the fenced
// bookies report (R4). Nothing authenticates it: an entry's digest tag
// (digest.go) covers the ledger, the entry id and the payload, not the
// LAC the add carries, and any client that may write to a bookie can send
// one: anyone without TLS, broker and bookie certificates with it
// (internal/authz).
//
//   - V1 What a bookie verifies. It keeps a LAC only up to the highest
//     entry of the ledger it holds whose tag it checked against the
//     ledger's key, read from the ledger's metadata (H2 in
//     ledger/storage/doc.go, package bookie), and a LAC piggybacked on
//     entry e only up to e-1 (H1: the writer sends e before e is
//     acknowledged). A tag that checks out proves that a holder of the
//     key (the writer, or whoever read the key) wrote those bytes as
//     that entry of that ledger; it proves neither that the entry was
//     acknowledged nor anything of the LAC that came with it.
//   - V2 What can be forged. Without the key (a client that reaches a
//     bookie but cannot read the ledger's metadata, a writer of another
//     ledger that mixed up ids): no entry that checks out, so no LAC past
//     the highest entry the writer itself sent that bookie; a replay of
//     one of the writer's entries, or a WriteLAC, can still call an entry
//     the writer sent acknowledged before it is (recovery then keeps that
//     entry with the copies it has instead of rewriting it). With the
//     key: whatever the writer can do, entries of any id with good tags
//     and LACs up to them. Every broker certificate may read every
//     ledger's key (a broker reads any partition's ledgers when it takes
//     the partition over; bookies read them to re-replicate), so V1
//     stops clients without the key, not holders of a broker or bookie
//     certificate; such a holder can also write entries past the writer's
//     end to enough bookies that recovery takes them (one copy makes an
//     entry present, R3). The protocol trusts writers; what keeps other
//     clients from being one is the certificate's role.
//   - V3 No LAC, forged or not, makes recovery lose an acknowledged entry
//     or wait forever (R10). Recovery reads every entry below its start;
//     an entry of the last fragment that (Qw-Qa)+1 members of its write
//     set explicitly lack, on fencing reads, proves every LAC at or above
//     it false; those are dropped and the ledger ends before that entry,
//     unless a copy turns up. Trusting only the entries bookies serve is
//     safe under BookKeeper's assumptions (a bookie keeps what it
//     acknowledged: the journal is fsynced before the answer, cookies
//     refuse wiped disks, limbo answers no negatives after lost journal
//     records; BookKeeper #2908, BP-46):
//     (1) an acknowledged entry was fsynced by Qa members of its write
//     set, so at most Qw-Qa lack it, and (Qw-Qa+1)+Qa > Qw: it never
//     gathers (Qw-Qa)+1 explicit negatives (the quorum intersection of
//     BookKeeper PR #1077; an error is never a negative, R3);
//     (2) the writer acknowledges in order (entry e only once every lower
//     entry is), so nothing above an unacknowledged entry is acknowledged:
//     ending before the first absent entry keeps every acknowledged one;
//     (3) after fencing (R1) the old writer reaches at most Qa-1 members
//     of any write set, and every read fences (BookKeeper #2614), so an
//     entry absent now never becomes acknowledged later;
//     (4) the entries below the absent one were served with good tags:
//     the closed ledger can be read; those above the highest LAC left are
//     rewritten to their write sets (R5) as in any recovery.
//     Entries below the last fragment are acknowledged by the metadata
//     itself (the writer starts a fragment after its own LAC), so none is
//     ever taken for absent: one missing there is lost data, which
//     recovery reports and waits on.
package ledger
