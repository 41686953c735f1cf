package metad

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/metad/kv"
	"github.com/strata-log/strata/proto/metadpb"
)

// fsm adapts the key-value store to hashicorp/raft. Log entries carry a
// marshalled metadpb.Command; snapshots are one marshalled metadpb.Snapshot.
type fsm struct {
	store *kv.Store
}

// applyResult is what Apply returns to the proposer through the future.
type applyResult struct {
	msg proto.Message
	err error
}

func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var cmd metadpb.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		// A command that does not decode was written by a broken proposer;
		// every replica rejects it the same way.
		return applyResult{err: fmt.Errorf("metad: undecodable command at index %d: %w", l.Index, err)}
	}
	msg, err := f.store.Apply(l.Index, &cmd)
	return applyResult{msg: msg, err: err}
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	// Taken on the FSM goroutine: a consistent deep copy, persisted later.
	return &fsmSnapshot{snap: f.store.Snapshot()}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("metad: read snapshot: %w", err)
	}
	var snap metadpb.Snapshot
	if err := proto.Unmarshal(data, &snap); err != nil {
		return fmt.Errorf("metad: decode snapshot: %w", err)
	}
	f.store.Restore(&snap, 0)
	return nil
}

type fsmSnapshot struct {
	snap *metadpb.Snapshot
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	data, err := proto.Marshal(s.snap)
	if err == nil {
		_, err = sink.Write(data)
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("metad: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
