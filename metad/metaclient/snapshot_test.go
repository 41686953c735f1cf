package metaclient

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/proto/metadpb"
)

// A snapshot file that is not what EncodeSnapshotFile wrote fails with
// ErrSnapshotCorrupt, marked as corruption; the file as written decodes.
func TestDecodeSnapshotFileCorrupt(t *testing.T) {
	data, err := proto.Marshal(&metadpb.Snapshot{Revision: 42})
	if err != nil {
		t.Fatal(err)
	}
	file := EncodeSnapshotFile(data)
	snap, err := DecodeSnapshotFile(file)
	if err != nil || snap.GetRevision() != 42 {
		t.Fatalf("DecodeSnapshotFile of a good file: %v, %v", snap, err)
	}
	flipped := bytes.Clone(file)
	flipped[len(snapshotMagic)] ^= 0x01
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"empty", nil},
		{"another magic", append([]byte("STRATSNP\x02"), file[len(snapshotMagic):]...)},
		{"truncated", file[:len(file)-1]},
		{"a flipped byte", flipped},
	} {
		_, err := DecodeSnapshotFile(tc.file)
		if !errors.Is(err, ErrSnapshotCorrupt) || !corruption.Is(err) {
			t.Errorf("%s: %v, want ErrSnapshotCorrupt, marked as corruption", tc.name, err)
		}
	}
}
