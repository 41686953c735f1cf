package index

import (
	"encoding/binary"
	"fmt"

	"github.com/strata-log/strata/ledger/journal"
)

// Key kinds: the first byte of every key. doc.go lays the keys and values
// out byte by byte. Values are stored on disk: never renumber.
const (
	kindEntry  byte = 'e' // 'e' ‖ ledger ‖ entry → location
	kindFile   byte = 'f' // 'f' ‖ file ‖ ledger → usage
	kindLedger byte = 'l' // 'l' ‖ ledger → state
	kindMeta   byte = 'm' // 'm' ‖ name → meta value
)

// Meta key names.
var (
	metaVersionKey    = []byte("m" + "version")
	metaCheckpointKey = []byte("m" + "checkpoint")
	metaLimboKey      = []byte("m" + "limbo")
)

// formatVersion is the index format this build writes and reads.
const formatVersion = 1

const (
	entryKeyLen    = 17
	ledgerKeyLen   = 9
	fileKeyLen     = 17
	locationLen    = 20
	stateLen       = 18
	tombstoneLen   = stateLen + 8 // a fenced tombstone adds its deletion time
	usageLen       = 16
	checkpointLen  = 16
	limboLen       = 12
	stateVersion   = 1
	stateFlagFence = 1 << 0
	// stateFlagTombstone marks a fenced tombstone (doc.go, invariant 4);
	// always with stateFlagFence, and the value is tombstoneLen bytes.
	stateFlagTombstone = 1 << 1
)

func entryKey(ledgerID, entryID uint64) []byte {
	k := make([]byte, entryKeyLen)
	k[0] = kindEntry
	binary.BigEndian.PutUint64(k[1:9], ledgerID)
	binary.BigEndian.PutUint64(k[9:17], entryID)
	return k
}

// entryRangeEnd is the exclusive upper bound of ledgerID's entry keys: the
// largest entry key of the ledger followed by a zero byte, so it works for
// ledger 2^64-1 too (no carry into the kind byte).
func entryRangeEnd(ledgerID uint64) []byte {
	return append(entryKey(ledgerID, ^uint64(0)), 0)
}

func decodeEntryKey(k []byte) (ledgerID, entryID uint64, ok bool) {
	if len(k) != entryKeyLen || k[0] != kindEntry {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:17]), true
}

func ledgerKey(ledgerID uint64) []byte {
	k := make([]byte, ledgerKeyLen)
	putLedgerKey(k, ledgerID)
	return k
}

// putLedgerKey writes ledgerID's key into k[:ledgerKeyLen].
func putLedgerKey(k []byte, ledgerID uint64) {
	k[0] = kindLedger
	binary.BigEndian.PutUint64(k[1:9], ledgerID)
}

func fileKey(file, ledgerID uint64) []byte {
	k := make([]byte, fileKeyLen)
	k[0] = kindFile
	binary.BigEndian.PutUint64(k[1:9], file)
	binary.BigEndian.PutUint64(k[9:17], ledgerID)
	return k
}

func encodeLocation(loc journal.Location) []byte {
	v := make([]byte, locationLen)
	binary.BigEndian.PutUint64(v[0:8], loc.File)
	binary.BigEndian.PutUint64(v[8:16], uint64(loc.Offset))
	binary.BigEndian.PutUint32(v[16:20], loc.Length)
	return v
}

func decodeLocation(v []byte) (journal.Location, error) {
	if len(v) != locationLen {
		return journal.Location{}, fmt.Errorf("%w: location value of %d bytes", ErrCorrupt, len(v))
	}
	return journal.Location{
		File:   binary.BigEndian.Uint64(v[0:8]),
		Offset: int64(binary.BigEndian.Uint64(v[8:16])),
		Length: binary.BigEndian.Uint32(v[16:20]),
	}, nil
}

// encodeState encodes a ledger state; a tombstone must be fenced (Batch
// keeps it so).
func encodeState(st LedgerState) []byte {
	n := stateLen
	if st.Tombstone {
		n = tombstoneLen
	}
	v := make([]byte, n)
	v[0] = stateVersion
	if st.Fenced {
		v[1] = stateFlagFence
	}
	binary.BigEndian.PutUint64(v[2:10], uint64(st.LAC))
	binary.BigEndian.PutUint64(v[10:18], uint64(st.LastEntryID))
	if st.Tombstone {
		v[1] |= stateFlagTombstone
		binary.BigEndian.PutUint64(v[18:26], uint64(st.DeletedUnixMs))
	}
	return v
}

func decodeState(v []byte) (LedgerState, error) {
	var flags byte
	if len(v) >= 2 {
		flags = v[1]
	}
	tombstone := flags&stateFlagTombstone != 0
	want := stateLen
	if tombstone {
		want = tombstoneLen
	}
	if len(v) != want || v[0] != stateVersion || flags&^(stateFlagFence|stateFlagTombstone) != 0 ||
		(tombstone && flags&stateFlagFence == 0) {
		return LedgerState{}, fmt.Errorf("%w: ledger state value %x", ErrCorrupt, v)
	}
	st := LedgerState{
		Fenced:      flags&stateFlagFence != 0,
		LAC:         int64(binary.BigEndian.Uint64(v[2:10])),
		LastEntryID: int64(binary.BigEndian.Uint64(v[10:18])),
		Tombstone:   tombstone,
	}
	if tombstone {
		st.DeletedUnixMs = int64(binary.BigEndian.Uint64(v[18:26]))
	}
	return st, nil
}

func encodeUsage(u Usage) []byte {
	v := make([]byte, usageLen)
	binary.BigEndian.PutUint64(v[0:8], uint64(u.Bytes))
	binary.BigEndian.PutUint64(v[8:16], uint64(u.Entries))
	return v
}

func decodeUsage(v []byte) (Usage, error) {
	if len(v) != usageLen {
		return Usage{}, fmt.Errorf("%w: usage value of %d bytes", ErrCorrupt, len(v))
	}
	u := Usage{Bytes: int64(binary.BigEndian.Uint64(v[0:8])), Entries: int64(binary.BigEndian.Uint64(v[8:16]))}
	if u.Bytes <= 0 || u.Entries <= 0 {
		return Usage{}, fmt.Errorf("%w: usage %+v", ErrCorrupt, u)
	}
	return u, nil
}

func encodePosition(pos journal.Position) []byte {
	v := make([]byte, checkpointLen)
	binary.BigEndian.PutUint64(v[0:8], pos.File)
	binary.BigEndian.PutUint64(v[8:16], uint64(pos.Offset))
	return v
}

func decodePosition(v []byte) (journal.Position, error) {
	if len(v) != checkpointLen {
		return journal.Position{}, fmt.Errorf("%w: checkpoint value of %d bytes", ErrCorrupt, len(v))
	}
	return journal.Position{File: binary.BigEndian.Uint64(v[0:8]), Offset: int64(binary.BigEndian.Uint64(v[8:16]))}, nil
}

func encodeLimbo(l Limbo) []byte {
	v := make([]byte, limboLen)
	binary.BigEndian.PutUint64(v[0:8], uint64(l.SinceUnixMs))
	binary.BigEndian.PutUint32(v[8:12], l.CorruptRanges)
	return v
}

func decodeLimbo(v []byte) (Limbo, error) {
	if len(v) != limboLen {
		return Limbo{}, fmt.Errorf("%w: limbo value of %d bytes", ErrCorrupt, len(v))
	}
	return Limbo{SinceUnixMs: int64(binary.BigEndian.Uint64(v[0:8])), CorruptRanges: binary.BigEndian.Uint32(v[8:12])}, nil
}
