package raftstore

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkStoreLogs measures raft's append path: one StoreLogs call of
// batch entries of 256 bytes. ns/op is per call (one fsync with sync=true);
// ns/entry divides by the batch.
func BenchmarkStoreLogs(b *testing.B) {
	for _, batch := range []int{1, 64} {
		for _, sync := range []bool{true, false} {
			b.Run(fmt.Sprintf("batch=%d/sync=%v", batch, sync), func(b *testing.B) {
				s, err := Open(b.TempDir(), Options{NoSync: !sync, Logger: quietLogger()})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				data := bytes.Repeat([]byte{'x'}, 256)
				logs := make([]*raft.Log, batch)
				for i := range logs {
					logs[i] = &raft.Log{Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Now()}
				}
				b.SetBytes(int64(batch * len(data)))
				b.ReportAllocs()
				next := uint64(1)
				for b.Loop() {
					for _, l := range logs {
						l.Index = next
						next++
					}
					if err := s.StoreLogs(logs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(next-1), "ns/entry")
			})
		}
	}
}

// BenchmarkGetLog measures the read path replication uses, over entries
// still in the memtable and, after a flush, in sstables.
func BenchmarkGetLog(b *testing.B) {
	for _, flushed := range []bool{false, true} {
		b.Run(fmt.Sprintf("flushed=%v", flushed), func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{NoSync: true, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const count = 10000
			data := bytes.Repeat([]byte{'x'}, 256)
			logs := make([]*raft.Log, 0, count)
			for index := uint64(1); index <= count; index++ {
				logs = append(logs, &raft.Log{Index: index, Term: 1, Data: data, AppendedAt: time.Now()})
			}
			if err := s.StoreLogs(logs); err != nil {
				b.Fatal(err)
			}
			if flushed {
				if err := s.db.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			var l raft.Log
			index := uint64(0)
			for b.Loop() {
				index = index%count + 1
				if err := s.GetLog(index, &l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeLog(b *testing.B) {
	encoded := appendLog(nil, &raft.Log{Index: 12345, Term: 6, Data: bytes.Repeat([]byte{'x'}, 256), AppendedAt: time.Now()})
	b.SetBytes(int64(len(encoded)))
	b.ReportAllocs()
	var l raft.Log
	for b.Loop() {
		if err := decodeLog(encoded, &l); err != nil {
			b.Fatal(err)
		}
	}
}
