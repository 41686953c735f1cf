// Package localdir is the objstore.Store of a local directory: the file://
// store of a single machine and of `strata dev`.
//
// # Layout
//
// The object with key K is the file ROOT/K ("/" in keys are directory
// separators; objstore.ValidateKey keeps keys from leaving the root, and
// the top-level name ".objstore-uploads" is reserved). Puts in progress
// write ROOT/.objstore-uploads/UPLOADID, where UPLOADID is 32 random hex
// digits; those files are the store's incomplete uploads.
//
// # Object file format
//
//	bytes 0-7     magic "STRATOBJ"
//	bytes 8-11    H, the header length, uint32 big-endian (at most 64 KiB)
//	bytes 12-12+H the header, JSON: {"v":1, "key":K,
//	              "created_unix_nano":T, "meta":{...}} (meta omitted when
//	              empty)
//	rest          the object's bytes
//
// The header carries the key so an upload file names its object, and the
// metadata so an object is one file (there is nothing to keep in step).
// Object size is the file size minus 12+H; LastModified is the file's
// modification time. A file without the magic is reported as corrupt
// (ErrPermanent), never served.
//
// # Durability and atomicity
//
// Put writes the upload file (header, then data), fsyncs it, creates the
// missing directories of the key (fsyncing each parent), then link(2)s it
// to ROOT/K and fsyncs K's directory before returning. link fails with
// EEXIST where rename(2) would silently replace, which makes "never
// overwrite" hold even between racing writers (ErrPreconditionFailed).
// The upload file is then unlinked; a crash before that leaves it listed
// as an incomplete upload, to be aborted. AbortIncompleteUpload removes
// the upload file, and a Put still writing it then fails at the link.
// An upload file without a valid header (a crash right after its
// creation) names no key: a listing removes it once an hour old.
//
// A tree emptied behind the store's back still takes uploads (as an
// emptied bucket does); a root directory that is gone fails every call
// with ErrPermanent (as a deleted bucket does), rather than being quietly
// recreated.
//
// Delete removes the files and fsyncs their directories; emptied
// directories stay, because removing one would race with a Put creating a
// key inside it.
//
// # Listing
//
// List walks the tree depth first, sorting each directory's entries by the
// keys they hold (a directory "d" as "d/"), which yields byte-wise key
// order even where "-" or "0" sort around "/", and skips subtrees outside
// the prefix or entirely before startAfter.
//
// Errors: ENOENT and ENOTDIR (a segment of the key is an object) are
// ErrNotFound, EEXIST ErrPreconditionFailed; EACCES, EPERM, EROFS, EIO,
// EISDIR, ENAMETOOLONG and corrupt files are ErrPermanent; anything else
// (ENOSPC, EINTR, ...) is ErrTransient.
package localdir
