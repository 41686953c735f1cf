package segfile_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-log/strata/proto/tieringpb"
	"github.com/strata-log/strata/recordbatch"
	"github.com/strata-log/strata/tiering/segfile"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// tinySegment is a fixed two-batch segment: two records at offsets
// 100-101, then a tombstone at 102.
func tinySegment(t *testing.T) ([]byte, segfile.Summary) {
	return tinySegmentWith(t, segfile.Options{})
}

// tinySegmentWith is tinySegment written with the key, name and block
// size of auth.
func tinySegmentWith(t *testing.T, auth segfile.Options) ([]byte, segfile.Summary) {
	var batches [][]byte
	for i, recs := range [][]recordbatch.Record{
		{{TimestampMs: 1000, Key: []byte("a"), Value: []byte("1")}, {TimestampMs: 1001, Key: []byte("b"), Value: []byte("2")}},
		{{TimestampMs: 1005, Key: []byte("a")}},
	} {
		b, err := recordbatch.Encode(&recordbatch.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		recordbatch.SetBaseOffset(b, int64(100+2*i))
		recordbatch.SetPartitionLeaderEpoch(b, 2)
		batches = append(batches, b)
	}
	return writeSegment(t, batches, segfile.Options{BaseOffset: 100, IndexIntervalBytes: 64, Footer: &tieringpb.SegmentFooter{
		Topic: "t", TopicId: "0123456789abcdef", SourceLedgers: []uint64{7}, CreatedAtMs: 1_700_000_000_000,
		WriterBroker: "b1", OwnerEpoch: 2, UploadId: "feedfacefeedface",
	}, Key: auth.Key, Name: auth.Name, BlockBytes: auth.BlockBytes})
}

// checkGolden compares obj's hex dump with testdata/name (rewritten with
// -update).
func checkGolden(t *testing.T, obj []byte, name string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	dump := hex.Dump(obj)
	if *update {
		if err := os.WriteFile(path, []byte(dump), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if dump != string(want) {
		t.Fatalf("segment bytes differ from %s (run with -update if intended)\ngot:\n%s", path, dump)
	}
}

// The bytes of a tiny segment are fixed: a change here is a format change
// (or a protobuf encoder change in the footer). Run with -update to
// rewrite after checking the diff is intended.
func TestGolden(t *testing.T) {
	obj, sum := tinySegment(t)
	checkGolden(t, obj, "tiny.golden")

	// The layout of doc.go, read by hand.
	be := binary.BigEndian
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	size := int64(len(obj))
	tr := obj[size-segfile.TrailerSize:]
	indexPos, count := int64(be.Uint64(tr[0:])), int64(be.Uint32(tr[8:]))
	footerPos, footerLen := int64(be.Uint64(tr[12:])), int64(be.Uint32(tr[20:]))
	checks := []struct {
		what      string
		got, want any
	}{
		{"header magic", string(obj[0:8]), "STRATSEG"},
		{"header version", be.Uint16(obj[8:]), uint16(1)},
		{"header flags", be.Uint16(obj[10:]), uint16(0)},
		{"header_len", be.Uint32(obj[12:]), uint32(32)},
		{"header base offset", int64(be.Uint64(obj[16:])), int64(100)},
		{"first batch base offset", int64(be.Uint64(obj[32:])), int64(100)},
		{"index_pos", indexPos, sum.IndexPos},
		{"index_count", count, int64(2)},
		{"footer_pos", footerPos, indexPos + 24*count},
		{"footer_len", footerPos + footerLen, size - 48},
		{"index entry 0", [3]int64{int64(be.Uint64(obj[indexPos:])), int64(be.Uint64(obj[indexPos+8:])), int64(be.Uint64(obj[indexPos+16:]))}, [3]int64{100, 32, 1001}},
		{"index entry 1 offset", int64(be.Uint64(obj[indexPos+24:])), int64(102)},
		{"index entry 1 max ts", int64(be.Uint64(obj[indexPos+40:])), int64(1005)},
		{"data crc", be.Uint32(tr[24:]), crc32.Checksum(obj[:indexPos], castagnoli)},
		{"trailer version", be.Uint16(tr[28:]), uint16(1)},
		{"meta crc", be.Uint32(tr[36:]), crc32.Checksum(obj[indexPos:size-12], castagnoli)},
		{"trailer magic", string(tr[40:]), "STRATEND"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if sum.Records != 3 || sum.Batches != 2 || sum.LastOffset != 102 || sum.MinTimestampMs != 1000 || sum.MaxTimestampMs != 1005 {
		t.Errorf("summary %+v", sum)
	}
}

// The authenticated tiny segment (version 2, 64-byte blocks, a fixed key
// and name) is fixed too, and its block tags, key id and MAC are what
// doc.go says, computed here by hand.
func TestGoldenAuthenticated(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, segfile.KeySize)
	key, err := segfile.NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	const name = "strata/c/t/0123456789abcdef/0/00000000000000000100-00000000000000000102-feedfacefeedface.seg"
	obj, sum := tinySegmentWith(t, segfile.Options{Key: key, Name: name, BlockBytes: 64})
	checkGolden(t, obj, "tiny-v2.golden")

	be := binary.BigEndian
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	size := int64(len(obj))
	tr := obj[size-segfile.TrailerSizeV2:]
	indexPos, count := int64(be.Uint64(tr[0:])), int64(be.Uint32(tr[8:]))
	footerPos, footerLen := int64(be.Uint64(tr[12:])), int64(be.Uint32(tr[20:]))
	blockBytes, blocks := int64(be.Uint32(tr[28:])), int64(be.Uint32(tr[32:]))
	tags := obj[indexPos+24*count : footerPos]
	checks := []struct {
		what      string
		got, want any
	}{
		{"header version", be.Uint16(obj[8:]), uint16(2)},
		{"index_pos", indexPos, sum.IndexPos},
		{"block_bytes", blockBytes, int64(64)},
		{"block_count", blocks, (indexPos + 63) / 64},
		{"footer_pos", footerPos, indexPos + 24*count + 16*blocks},
		{"footer_len", footerPos + footerLen, size - 96},
		{"data crc", be.Uint32(tr[24:]), crc32.Checksum(obj[:indexPos], castagnoli)},
		{"key id", be.Uint64(tr[36:]), be.Uint64(hmacOf(secret, []byte("STRATSEG-KEY-ID\n")))},
		{"key id is Key.ID", be.Uint64(tr[36:]), key.ID()},
		{"mac", string(tr[44:76]), string(hmacOf(secret, []byte("STRATSEG-MAC-v2\n"), nameBytes(name), obj[indexPos:size-52]))},
		{"trailer version", be.Uint16(tr[76:]), uint16(2)},
		{"reserved", string(tr[78:84]), string(make([]byte, 6))},
		{"meta crc", be.Uint32(tr[84:]), crc32.Checksum(obj[indexPos:size-12], castagnoli)},
		{"trailer magic", string(tr[88:]), "STRATEND"},
	}
	for k := range blocks {
		block := obj[k*64 : min((k+1)*64, indexPos)]
		checks = append(checks, struct {
			what      string
			got, want any
		}{fmt.Sprintf("tag of block %d", k), string(tags[k*16 : (k+1)*16]), string(blockTag(secret, name, uint64(k), block))})
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if !sum.Authenticated {
		t.Errorf("summary %+v", sum)
	}
}
