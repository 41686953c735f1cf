package kv

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/metadpb"
)

// FuzzApply feeds arbitrary commands (a sequence of uvarint-length-prefixed
// encoded metadpb.Commands) to two stores, the second restored from the
// first's snapshot halfway: no command may panic, every answer is a
// response or an error, both stores answer alike (Apply is deterministic,
// also across a snapshot) and keep their invariants after every command.
// A command is what a member proposes and Raft commits, so this is what
// one hostile or buggy proposer can do to every replica at once.
func FuzzApply(f *testing.F) {
	g := &commandGen{rng: rand.New(rand.NewSource(1))}
	for range 8 {
		var in []byte
		for range 6 {
			in = appendCommand(in, g.command())
		}
		f.Add(in)
	}
	f.Add(appendCommand(nil, limited(&metadpb.Limits{MaxKeys: 1, MaxDataBytes: 10, MaxLeases: 1},
		ops(put("a/1", "0123456789"), put("a/2", "x")))))
	f.Add(appendCommand(appendCommand(nil, grant(7, 0)), ops(putL("k", "v", 7), delPrefix(""))))

	f.Fuzz(func(t *testing.T, in []byte) {
		var cmds []*metadpb.Command
		for len(in) > 0 && len(cmds) < 64 {
			n, used := binary.Uvarint(in)
			if used <= 0 || n > uint64(len(in)-used) {
				break
			}
			cmd := &metadpb.Command{}
			if proto.Unmarshal(in[used:used+int(n)], cmd) == nil {
				cmds = append(cmds, cmd)
			}
			in = in[used+int(n):]
		}
		a := newApplier(t, Options{HistoryRevisions: 16})
		b := newApplier(t, Options{HistoryRevisions: 16})
		for i, cmd := range cmds {
			if i == len(cmds)/2 {
				restored := New(Options{HistoryRevisions: 16})
				restored.Restore(b.s.Snapshot(), b.index)
				b.s = restored
				checkInvariants(t, b.s)
			}
			ra, ea := a.apply(cmd)
			rb, eb := b.apply(cmd)
			if fmt.Sprint(ea) != fmt.Sprint(eb) || (ra == nil) != (rb == nil) || (ra != nil && !proto.Equal(ra, rb)) {
				t.Fatalf("command %d %v:\noriginal %v, %v\nrestored %v, %v", i, cmd, ra, ea, rb, eb)
			}
			checkInvariants(t, a.s)
			checkInvariants(t, b.s)
		}
		if da, db := dumpKVs(a.s), dumpKVs(b.s); da != db {
			t.Fatalf("stores differ:\n%s\n---\n%s", da, db)
		}
		if a.s.DataBytes() != b.s.DataBytes() || a.s.KeyCount() != b.s.KeyCount() {
			t.Fatalf("accounting differs: %d bytes %d keys vs %d bytes %d keys",
				a.s.DataBytes(), a.s.KeyCount(), b.s.DataBytes(), b.s.KeyCount())
		}
	})
}

func appendCommand(b []byte, cmd *metadpb.Command) []byte {
	enc, err := proto.Marshal(cmd)
	if err != nil {
		panic(err)
	}
	return append(binary.AppendUvarint(b, uint64(len(enc))), enc...)
}
