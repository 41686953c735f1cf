// Package objstoretest is the conformance suite of objstore.Store: one
// set of tests every implementation passes (memstore and localdir always,
// s3 against a real MinIO server), so code tested against the in-memory
// twin behaves the same on S3.
//
// Each test gets a fresh, empty store from the factory. What the suite
// checks, in terms of the contract in objstore's doc.go: Put round trips
// (known and unknown size, empty objects, objects of several parts), user
// metadata, never-overwrite (also with racing writers), PutIfAbsent, short
// and failing sources, every GetRange bound, ErrNotFound, the key and
// metadata rules, List order (including keys where "-" and "0" sort
// around "/"), prefixes and startAfter, Delete (missing keys count as
// deleted), calls with an ended ctx, readers that outlive their ctx, and
// an incomplete upload listed, aborted, and its Put failing.
package objstoretest
