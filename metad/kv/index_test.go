package kv

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// checkIndex verifies the keyIndex invariants.
func checkIndex(t testing.TB, x *keyIndex) {
	t.Helper()
	n := 0
	prev := ""
	for ci, c := range x.chunks {
		if len(c) == 0 || len(c) > maxChunkKeys {
			t.Fatalf("chunk %d has %d keys", ci, len(c))
		}
		for i, key := range c {
			if (ci > 0 || i > 0) && key <= prev {
				t.Fatalf("chunk %d key %d: %q after %q", ci, i, key, prev)
			}
			prev = key
		}
		n += len(c)
	}
	if n != x.count {
		t.Fatalf("count %d, chunks hold %d", x.count, n)
	}
}

// TestKeyIndexRandom drives the index and a plain sorted slice with the same
// random inserts and deletes, and checks they agree on membership and on
// every ascent.
func TestKeyIndexRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var x keyIndex
	var ref []string
	key := func() string { return fmt.Sprintf("k%05d", rng.Intn(5000)) }
	for step := 0; step < 60000; step++ {
		// Grow for the first half, shrink for the second, so that both
		// splits and merges happen.
		insertBias := 70
		if step > 30000 {
			insertBias = 25
		}
		k := key()
		i, found := slices.BinarySearch(ref, k)
		if rng.Intn(100) < insertBias {
			if got := x.insert(k); got == found {
				t.Fatalf("step %d: insert(%q) = %v, present %v", step, k, got, found)
			}
			if !found {
				ref = slices.Insert(ref, i, k)
			}
		} else {
			if got := x.delete(k); got != found {
				t.Fatalf("step %d: delete(%q) = %v, present %v", step, k, got, found)
			}
			if found {
				ref = slices.Delete(ref, i, i+1)
			}
		}
		if step%1000 == 0 {
			checkIndex(t, &x)
			if got := slices.Collect(x.ascend("")); !slices.Equal(got, ref) {
				t.Fatalf("step %d: ascend differs from reference", step)
			}
			from := key()
			j, _ := slices.BinarySearch(ref, from)
			if got := slices.Collect(x.ascend(from)); !slices.Equal(got, ref[j:]) {
				t.Fatalf("step %d: ascend(%q) differs from reference", step, from)
			}
		}
	}
	checkIndex(t, &x)
	if x.len() != len(ref) {
		t.Fatalf("len %d, want %d", x.len(), len(ref))
	}
}

func TestKeyIndexEdges(t *testing.T) {
	var x keyIndex
	if got := slices.Collect(x.ascend("")); len(got) != 0 {
		t.Fatalf("empty index yields %q", got)
	}
	if x.delete("a") {
		t.Fatal("delete from empty index reported a key")
	}
	for _, k := range []string{"b", "a", "c", "a\x00", ""} {
		x.insert(k)
	}
	if got, want := strings.Join(slices.Collect(x.ascend("")), ","), ",a,a\x00,b,c"; got != want {
		t.Fatalf("ascend = %q, want %q", got, want)
	}
	if got, want := strings.Join(slices.Collect(x.ascend("a\x00")), ","), "a\x00,b,c"; got != want {
		t.Fatalf("ascend(a\\x00) = %q, want %q", got, want)
	}
	if got := slices.Collect(x.ascend("d")); len(got) != 0 {
		t.Fatalf("ascend past the end yields %q", got)
	}
	// Stopping early must not panic.
	for range x.ascend("") {
		break
	}
}

func TestNewKeyIndex(t *testing.T) {
	for _, n := range []int{0, 1, maxChunkKeys, 10*maxChunkKeys + 7} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%08d", i)
		}
		x := newKeyIndex(keys)
		checkIndex(t, &x)
		if got := slices.Collect(x.ascend("")); !slices.Equal(got, keys) {
			t.Fatalf("n=%d: ascend differs", n)
		}
	}
}
