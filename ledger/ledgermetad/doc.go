// Package ledgermetad keeps the ledger protocol's state in metad: Store,
// the ledger.MetadataStore, and Registry, the ledger.BookieRegistry.
//
// Layout in metad (the key helpers are package ledger's, which links no
// metad client):
//
//   - ledger.MetadataKey(id) = ledger.MetadataPrefix + the id as 20
//     zero-padded decimal digits ("/strata/ledgers/00000000000000000042"),
//     so key order is id order. The value is the ledgerpb.LedgerMetadata
//     protobuf; every change is a compare-and-set on the key's version.
//   - ledger.NextIDKey ("/strata/ledgers-next-id") holds the next id to
//     hand out as decimal text, from 1. A Store reserves ids 64 at a time
//     by advancing it by compare-and-set, and hands them out in order;
//     Create then writes the metadata key with "must be absent", so an id
//     already taken is skipped and a ledger is never overwritten. Ids are
//     unique and never reused, not dense, and ledgers of different
//     processes are not created in id order.
//   - bookies.RegistryPrefix + bookie id holds a running bookie's
//     bookiepb.BookieInfo (written by the bookie, on its lease); Registry
//     reads these and keeps the WRITABLE ones.
//
// A key under ledger.MetadataPrefix that is not a metadata key, or a value
// that does not decode, is an error, never skipped: something other than
// Strata writes there.
package ledgermetad
