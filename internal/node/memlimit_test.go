package node

import (
	"testing"
	"testing/fstest"
)

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		files  fstest.MapFS
		limit  int64
		source string
		err    bool
	}{
		{"v2 limit", fstest.MapFS{"memory.max": {Data: []byte("2147483648\n")}}, 2 << 30, "memory.max", false},
		{"v2 none", fstest.MapFS{"memory.max": {Data: []byte("max\n")}}, 0, "memory.max", false},
		{"v1 limit", fstest.MapFS{"memory/memory.limit_in_bytes": {Data: []byte("1073741824\n")}}, 1 << 30, "memory/memory.limit_in_bytes", false},
		{"v1 none", fstest.MapFS{"memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")}}, 0, "memory/memory.limit_in_bytes", false},
		{"v2 before v1", fstest.MapFS{"memory.max": {Data: []byte("4096\n")}, "memory/memory.limit_in_bytes": {Data: []byte("8192\n")}}, 4096, "memory.max", false},
		{"no cgroup", fstest.MapFS{}, 0, "", false},
		{"garbage", fstest.MapFS{"memory.max": {Data: []byte("lots\n")}}, 0, "memory.max", true},
		{"negative", fstest.MapFS{"memory.max": {Data: []byte("-1\n")}}, 0, "memory.max", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit, source, err := cgroupMemoryLimit(tc.files)
			if (err != nil) != tc.err || limit != tc.limit || source != tc.source {
				t.Fatalf("cgroupMemoryLimit = %d, %q, %v; want %d, %q, error %v", limit, source, err, tc.limit, tc.source, tc.err)
			}
		})
	}
}
