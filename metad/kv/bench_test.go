package kv

import (
	"fmt"
	"testing"

	"github.com/strata-log/strata/proto/metadpb"
)

// loadKeys fills a store with n keys "p<i%100>/<i>" at one revision per
// 1000 keys.
func loadKeys(b *testing.B, n int) *applier {
	b.Helper()
	a := newApplier(b, Options{})
	batch := make([]*metadpb.Op, 0, 1000)
	for i := range n {
		batch = append(batch, put(fmt.Sprintf("p%02d/%08d", i%100, i), "value-of-about-32-bytes-0123456"))
		if len(batch) == cap(batch) || i == n-1 {
			a.must(ops(batch...))
			batch = batch[:0]
		}
	}
	return a
}

// BenchmarkApplyPut measures one single-put txn through Apply: creating new
// keys and updating existing ones, in stores of different sizes.
func BenchmarkApplyPut(b *testing.B) {
	for _, size := range []int{0, 100_000, 1_000_000} {
		for _, mode := range []string{"create", "update"} {
			if mode == "update" && size == 0 {
				continue
			}
			b.Run(fmt.Sprintf("keys=%d/%s", size, mode), func(b *testing.B) {
				a := loadKeys(b, size)
				value := []byte("value-of-about-32-bytes-0123456")
				// Keys are made up front so that the loop measures Apply only:
				// creates get a fresh key every time, spread over the key
				// space; updates revisit existing keys in a scattered order.
				keys := make([]string, 1<<16)
				for i := range keys {
					if mode == "create" {
						keys[i] = fmt.Sprintf("p%02d/n%09d", i%100, i)
					} else {
						j := (i * 7919) % size
						keys[i] = fmt.Sprintf("p%02d/%08d", j%100, j)
					}
				}
				putOp := &metadpb.PutOp{Value: value}
				cmd := ops(&metadpb.Op{Op: &metadpb.Op_Put{Put: putOp}})
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					putOp.Key = keys[i%len(keys)]
					if mode == "create" && i >= len(keys) {
						putOp.Key += fmt.Sprint("/", i) // still fresh after a lap
					}
					a.index++
					if _, err := a.s.Apply(a.index, cmd); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkList measures a 100-key page under a prefix that holds 1% of
// the keys, in stores of different sizes.
func BenchmarkList(b *testing.B) {
	for _, size := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", size), func(b *testing.B) {
			a := loadKeys(b, size)
			b.ReportAllocs()
			for b.Loop() {
				kvs, _, _ := a.s.List("p42/", "", 100, false)
				if len(kvs) != 100 {
					b.Fatalf("listed %d keys", len(kvs))
				}
			}
		})
	}
}

// BenchmarkEvents measures a watcher catching up on 100 revisions of a
// prefix that 1 in 10 revisions touches.
func BenchmarkEvents(b *testing.B) {
	a := newApplier(b, Options{})
	for i := range 1000 {
		a.must(ops(put(fmt.Sprintf("p%d/%d", i%10, i), "v")))
	}
	b.ReportAllocs()
	for b.Loop() {
		resps, _, err := a.s.Events("p3/", 1, 100)
		if err != nil || len(resps) != 100 {
			b.Fatalf("%d responses, %v", len(resps), err)
		}
	}
}
