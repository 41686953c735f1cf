package compact

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/strata-log/strata/recordbatch"
)

// benchLog is 200 batches of 100 records (24-byte keys from 5,000, 100-byte
// values, 5% tombstones), so that about half the records are superseded.
func benchLog(b *testing.B, c recordbatch.Compression) ([][]byte, *OffsetMap, int64) {
	rng := rand.New(rand.NewSource(1))
	var log [][]byte
	var total int64
	off := int64(0)
	for range 200 {
		recs := make([]recordbatch.Record, 100)
		for i := range recs {
			recs[i] = recordbatch.Record{TimestampMs: off, Key: fmt.Appendf(nil, "user-%019d", rng.Intn(5000))}
			if rng.Intn(20) != 0 {
				recs[i].Value = make([]byte, 100)
				rng.Read(recs[i].Value[:20]) // compressible, like JSON
			}
		}
		buf, err := recordbatch.Encode(&recordbatch.Batch{BaseOffset: off, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Compression: c, Records: recs})
		if err != nil {
			b.Fatal(err)
		}
		log = append(log, buf)
		total += int64(len(buf))
		off += 100
	}
	m := NewOffsetMap(1 << 20)
	if _, err := Plan(m, log, off, Options{}); err != nil {
		b.Fatal(err)
	}
	return log, m, total
}

func benchRewrite(b *testing.B, c recordbatch.Compression) {
	log, m, total := benchLog(b, c)
	b.SetBytes(total)
	b.ReportAllocs()
	var st Stats
	for b.Loop() {
		var err error
		if _, st, err = CompactBatches(log, m, Options{NowMs: 1, DeleteRetentionMs: 1000}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.BytesOut)/float64(st.BytesIn), "out/in")
}

func BenchmarkRewriteNone(b *testing.B) { benchRewrite(b, recordbatch.CompressionNone) }
func BenchmarkRewriteLZ4(b *testing.B)  { benchRewrite(b, recordbatch.CompressionLZ4) }

func BenchmarkPlanNone(b *testing.B) {
	log, _, total := benchLog(b, recordbatch.CompressionNone)
	m := NewOffsetMap(1 << 20)
	b.SetBytes(total)
	for b.Loop() {
		m.Reset()
		if _, err := Plan(m, log, 1<<40, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user-%019d", i)
	}
	return keys
}

// The map is 16 MiB (559,240 keys), filled to its load limit: the worst
// case for probing.
func BenchmarkOffsetMapPut(b *testing.B) {
	m := NewOffsetMap(16 << 20)
	keys := benchKeys(m.Capacity())
	i := 0
	for b.Loop() {
		if !m.Put(keys[i], int64(i)) {
			b.Fatal("full")
		}
		if i++; i == len(keys) {
			i = 0
			m.Reset()
		}
	}
}

func BenchmarkOffsetMapGet(b *testing.B) {
	m := NewOffsetMap(16 << 20)
	keys := benchKeys(m.Capacity())
	for i, k := range keys {
		m.Put(k, int64(i))
	}
	miss := benchKeys(2 * len(keys))[len(keys):]
	b.Run("hit", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, ok := m.Get(keys[i]); !ok {
				b.Fatal("missing")
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, ok := m.Get(miss[i]); ok {
				b.Fatal("present")
			}
			if i++; i == len(miss) {
				i = 0
			}
		}
	})
}

// cycledLog is the shape of `strata bench suite`'s compaction sources:
// 128 batches of 1,000 records, 1 KiB values, keys cycling over 2,000,
// so that only the last two batches hold a key's latest record.
func cycledLog(b *testing.B) ([][]byte, *OffsetMap, *Survivors, int64) {
	value := make([]byte, 1024)
	rand.New(rand.NewSource(1)).Read(value)
	var log [][]byte
	var total int64
	for off := int64(0); off < 128_000; off += 1000 {
		recs := make([]recordbatch.Record, 1000)
		for i := range recs {
			recs[i] = recordbatch.Record{TimestampMs: off, Key: fmt.Appendf(nil, "key-%05d", (off+int64(i))%2000), Value: value}
		}
		buf, err := recordbatch.Encode(&recordbatch.Batch{BaseOffset: off, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Records: recs})
		if err != nil {
			b.Fatal(err)
		}
		log = append(log, buf)
		total += int64(len(buf))
	}
	m := NewOffsetMap(1 << 20)
	s := NewSurvivors(0)
	res, err := Plan(m, log, 128_000, Options{Survivors: s})
	if err != nil {
		b.Fatal(err)
	}
	s.AddLatest(m, res.IndexedEnd)
	return log, m, s, total
}

// BenchmarkRewriteCycled: the rewrite of cycledLog, decoding every batch
// (as a batch read again from storage is) and with the index phase's
// Survivors (as a batch the pass kept in memory is).
func BenchmarkRewriteCycled(b *testing.B) {
	log, m, s, total := cycledLog(b)
	for _, bc := range []struct {
		name string
		opt  Options
	}{
		{"decoded", Options{NowMs: 1}},
		{"survivors", Options{NowMs: 1, CRCChecked: true, Survivors: s}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				if _, _, err := CompactBatches(log, m, bc.opt, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
