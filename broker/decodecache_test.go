package broker

import (
	"strconv"
	"testing"

	"github.com/strata-log/strata/proto/metadpb"
)

// A record is decoded again only when its mod revision changed; keys gone
// from the snapshot are forgotten; records that do not decode are left out.
func TestDecodeCache(t *testing.T) {
	decoded := 0
	c := newDecodeCache(func(kv *metadpb.KeyValue) (int, bool) {
		decoded++
		n, err := strconv.Atoi(string(kv.Value))
		return n, err == nil
	})
	sum := func(snap map[string]*metadpb.KeyValue) (s int) {
		c.each(snap, func(v int) { s += v })
		return s
	}
	snap := map[string]*metadpb.KeyValue{
		"a": {Key: "a", Value: []byte("1"), ModRevision: 1},
		"b": {Key: "b", Value: []byte("2"), ModRevision: 2},
		"x": {Key: "x", Value: []byte("bad"), ModRevision: 3},
	}
	if s := sum(snap); s != 3 || decoded != 3 {
		t.Fatalf("first round: sum %d, %d decodes; want 3, 3", s, decoded)
	}
	if s := sum(snap); s != 3 || decoded != 3 {
		t.Fatalf("unchanged round: sum %d, %d decodes; want 3, still 3", s, decoded)
	}
	snap["b"] = &metadpb.KeyValue{Key: "b", Value: []byte("5"), ModRevision: 4}
	delete(snap, "a")
	if s := sum(snap); s != 5 || decoded != 4 {
		t.Fatalf("after a change and a delete: sum %d, %d decodes; want 5, 4", s, decoded)
	}
	if _, ok := c.entries["a"]; ok || len(c.entries) != 2 {
		t.Fatalf("entries %v: a deleted key is remembered", c.entries)
	}
}
