package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

const testDir = "/d"

func newTestMem(t *testing.T) *MemFS {
	m := NewMem()
	must(t, m.MkdirAll(testDir))
	return m
}

func path(name string) string { return filepath.Join(testDir, name) }

func create(t *testing.T, m *MemFS, name, content string) File {
	t.Helper()
	f, err := m.Create(path(name))
	must(t, err)
	writeAll(t, f, []byte(content))
	return f
}

// contents returns every file of testDir and its content.
func contents(t *testing.T, m *MemFS) map[string]string {
	t.Helper()
	names, err := m.List(testDir)
	must(t, err)
	out := map[string]string{}
	for _, n := range names {
		out[n] = string(readAll(t, m, path(n)))
	}
	return out
}

func TestMemCrash(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, m *MemFS)
		want  map[string]string
	}{{
		name: "unsynced appends are lost",
		setup: func(t *testing.T, m *MemFS) {
			f := create(t, m, "f", "durable")
			must(t, f.Sync())
			must(t, m.SyncDir(testDir))
			writeAll(t, f, []byte(" lost"))
		},
		want: map[string]string{"f": "durable"},
	}, {
		name: "create without SyncDir is forgotten",
		setup: func(t *testing.T, m *MemFS) {
			must(t, create(t, m, "f", "data").Sync())
		},
		want: map[string]string{},
	}, {
		name: "SyncDir without file Sync keeps an empty file",
		setup: func(t *testing.T, m *MemFS) {
			create(t, m, "f", "data")
			must(t, m.SyncDir(testDir))
		},
		want: map[string]string{"f": ""},
	}, {
		name: "data synced after SyncDir is kept",
		setup: func(t *testing.T, m *MemFS) {
			f := create(t, m, "f", "")
			must(t, m.SyncDir(testDir))
			writeAll(t, f, []byte("later"))
			must(t, f.Sync())
		},
		want: map[string]string{"f": "later"},
	}, {
		name: "remove without SyncDir is undone",
		setup: func(t *testing.T, m *MemFS) {
			f := create(t, m, "f", "keep")
			must(t, f.Sync())
			must(t, m.SyncDir(testDir))
			writeAll(t, f, []byte(" unsynced"))
			must(t, m.Remove(path("f")))
		},
		want: map[string]string{"f": "keep"},
	}, {
		name: "remove with SyncDir is durable",
		setup: func(t *testing.T, m *MemFS) {
			must(t, create(t, m, "f", "x").Sync())
			must(t, m.SyncDir(testDir))
			must(t, m.Remove(path("f")))
			must(t, m.SyncDir(testDir))
		},
		want: map[string]string{},
	}, {
		name: "rename without SyncDir is undone",
		setup: func(t *testing.T, m *MemFS) {
			must(t, create(t, m, "old", "v").Sync())
			must(t, m.SyncDir(testDir))
			must(t, m.Rename(path("old"), path("new")))
		},
		want: map[string]string{"old": "v"},
	}, {
		name: "rename over a file with SyncDir is durable",
		setup: func(t *testing.T, m *MemFS) {
			must(t, create(t, m, "tmp", "new").Sync())
			must(t, create(t, m, "cur", "old").Sync())
			must(t, m.SyncDir(testDir))
			must(t, m.Rename(path("tmp"), path("cur")))
			must(t, m.SyncDir(testDir))
		},
		want: map[string]string{"cur": "new"},
	}, {
		name: "unsynced truncate is undone",
		setup: func(t *testing.T, m *MemFS) {
			f := create(t, m, "f", "0123456789")
			must(t, f.Sync())
			must(t, m.SyncDir(testDir))
			must(t, f.Truncate(3))
			writeAll(t, f, []byte("abc"))
		},
		want: map[string]string{"f": "0123456789"},
	}, {
		name: "synced truncate is kept",
		setup: func(t *testing.T, m *MemFS) {
			f := create(t, m, "f", "0123456789")
			must(t, f.Sync())
			must(t, m.SyncDir(testDir))
			must(t, f.Truncate(3))
			writeAll(t, f, []byte("abc"))
			must(t, f.Sync())
		},
		want: map[string]string{"f": "012abc"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMem(t)
			tc.setup(t, m)
			before := contents(t, m)
			crashed := m.Crash(CrashOptions{})
			if got := contents(t, crashed); !maps.Equal(got, tc.want) {
				t.Fatalf("after crash: %q, want %q", got, tc.want)
			}
			// The original is untouched and still usable.
			if got := contents(t, m); !maps.Equal(got, before) {
				t.Fatalf("original changed: %q, want %q", got, before)
			}
			// A crash of a crash changes nothing: everything is durable.
			if got := contents(t, crashed.Crash(CrashOptions{TornTail: true})); !maps.Equal(got, tc.want) {
				t.Fatalf("second crash: %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMemTornTail checks that a torn tail keeps the synced prefix intact and
// at most the unsynced bytes, and that over many seeds it produces every
// shape: nothing kept, everything kept intact, and damaged bytes.
func TestMemTornTail(t *testing.T) {
	synced := bytes.Repeat([]byte("S"), 100)
	unsynced := bytes.Repeat([]byte("u"), 1000)
	var none, intact, partial, damaged int
	for seed := range uint64(500) {
		m := newTestMem(t)
		f := create(t, m, "f", string(synced))
		must(t, f.Sync())
		must(t, m.SyncDir(testDir))
		writeAll(t, f, unsynced)
		got := readAll(t, m.Crash(CrashOptions{TornTail: true, Rand: rand.New(rand.NewPCG(seed, 7))}), path("f"))
		if !bytes.HasPrefix(got, synced) || len(got) > len(synced)+len(unsynced) {
			t.Fatalf("seed %d: torn file of %d bytes does not start with the synced bytes", seed, len(got))
		}
		tail := got[len(synced):]
		switch {
		case len(tail) == 0:
			none++
		case !bytes.Equal(tail, unsynced[:len(tail)]):
			damaged++
		case len(tail) == len(unsynced):
			intact++
		default:
			partial++
		}
	}
	t.Logf("none=%d intact=%d partial=%d damaged=%d", none, intact, partial, damaged)
	if none == 0 || intact == 0 || partial == 0 || damaged == 0 {
		t.Fatalf("torn tails do not cover every shape: none=%d intact=%d partial=%d damaged=%d", none, intact, partial, damaged)
	}
}

func TestMemCrashDeterministic(t *testing.T) {
	build := func() *MemFS {
		m := newTestMem(t)
		for i := range 5 {
			f := create(t, m, fmt.Sprint(i), "synced")
			must(t, f.Sync())
			writeAll(t, f, bytes.Repeat([]byte{byte(i)}, 500))
		}
		must(t, m.SyncDir(testDir))
		return m
	}
	a := build().Crash(CrashOptions{TornTail: true, Rand: rand.New(rand.NewPCG(1, 2))})
	b := build().Crash(CrashOptions{TornTail: true, Rand: rand.New(rand.NewPCG(1, 2))})
	if !maps.Equal(contents(t, a), contents(t, b)) {
		t.Fatal("the same seed gave different crashes")
	}
}

var errInjected = errors.New("injected")

func TestMemInjectError(t *testing.T) {
	m := newTestMem(t)
	var syncs atomic.Int32
	m.InjectError(func(op Op, name string) error {
		if op == OpSync && syncs.Add(1) == 3 {
			return errInjected
		}
		return nil
	})
	f := create(t, m, "f", "")
	must(t, m.SyncDir(testDir))
	for i := 1; i <= 4; i++ {
		writeAll(t, f, []byte{byte('0' + i)})
		err := f.Sync()
		if (i == 3) != (err != nil) {
			t.Fatalf("sync %d: %v", i, err)
		}
		if i == 3 {
			if !errors.Is(err, errInjected) {
				t.Fatalf("sync 3: %v does not wrap the injected error", err)
			}
			// The failed sync made nothing durable.
			if got := readAll(t, m.Crash(CrashOptions{}), path("f")); string(got) != "12" {
				t.Fatalf("after the failed sync the durable content is %q, want %q", got, "12")
			}
		}
	}

	// Every operation consults the injector, with the path it concerns.
	seen := map[Op]string{}
	var mu sync.Mutex
	m.InjectError(func(op Op, name string) error {
		mu.Lock()
		defer mu.Unlock()
		seen[op] = name
		if op == OpCreate && filepath.Base(name) == "refused" {
			return errInjected
		}
		return nil
	})
	if _, err := m.Create(path("refused")); !errors.Is(err, errInjected) {
		t.Fatalf("Create: %v", err)
	}
	if _, err := m.Stat(path("refused")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused Create created the file: %v", err)
	}
	g := create(t, m, "g", "x")
	must(t, g.Sync())
	must(t, g.Preallocate(10))
	must(t, g.Truncate(1))
	_, _ = g.ReadAt(make([]byte, 1), 0)
	_, _ = g.Stat()
	must(t, g.Close())
	r, err := m.Open(path("g"))
	must(t, err)
	must(t, r.Close())
	must(t, m.Rename(path("g"), path("h")))
	must(t, m.Remove(path("h")))
	must(t, m.SyncDir(testDir))
	_, _ = m.List(testDir)
	_, _ = m.Stat(testDir)
	_, _ = m.DiskUsage(testDir)
	must(t, m.MkdirAll(path("sub")))
	for op := OpCreate; op <= OpDiskUsage; op++ {
		if _, ok := seen[op]; !ok {
			t.Errorf("the injector never saw %v", op)
		}
	}
	if seen[OpWrite] != path("g") || seen[OpRename] != path("g") {
		t.Errorf("names: write %q, rename %q", seen[OpWrite], seen[OpRename])
	}

	m.InjectError(nil)
	if _, err := m.Create(path("refused")); err != nil {
		t.Fatalf("Create after removing the injector: %v", err)
	}
}

func TestMemCapacity(t *testing.T) {
	m := newTestMem(t)
	m.SetCapacity(100)
	free := func() uint64 {
		du, err := m.DiskUsage(testDir)
		must(t, err)
		if du.TotalBytes != 100 {
			t.Fatalf("TotalBytes = %d", du.TotalBytes)
		}
		return du.FreeBytes
	}
	a := create(t, m, "a", "")
	must(t, a.Preallocate(50))
	if got := free(); got != 50 {
		t.Fatalf("free after Preallocate(50) = %d", got)
	}
	writeAll(t, a, make([]byte, 30)) // inside the reservation
	if got := free(); got != 50 {
		t.Fatalf("free after writing into the reservation = %d", got)
	}
	if err := a.Preallocate(200); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Preallocate beyond capacity: %v", err)
	}
	b := create(t, m, "b", "")
	n, err := b.Write(make([]byte, 60))
	if n != 50 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write beyond capacity = %d, %v; want 50, ENOSPC", n, err)
	}
	if got := free(); got != 0 {
		t.Fatalf("free when full = %d", got)
	}
	if n, err := a.Write(make([]byte, 30)); n != 20 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write past the reservation when full = %d, %v; want 20, ENOSPC", n, err)
	}
	must(t, m.Remove(path("b")))
	if got := free(); got != 50 {
		t.Fatalf("free after Remove = %d", got)
	}
	must(t, a.Truncate(10))
	if got := free(); got != 90 {
		t.Fatalf("free after Truncate(10) = %d", got)
	}
	// A crash keeps the capacity.
	must(t, a.Sync())
	must(t, m.SyncDir(testDir))
	du, err := m.Crash(CrashOptions{}).DiskUsage(testDir)
	must(t, err)
	if du.TotalBytes != 100 || du.FreeBytes != 90 {
		t.Fatalf("DiskUsage after crash = %+v", du)
	}
}

// TestMemConcurrent exercises every operation from several goroutines while
// another crashes the file system repeatedly; run with -race.
func TestMemConcurrent(t *testing.T) {
	m := newTestMem(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := path(fmt.Sprint("file", g))
			f, err := m.Create(name)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			r, err := m.Open(name)
			if err != nil {
				t.Error(err)
				return
			}
			defer r.Close()
			buf := make([]byte, 64)
			for i := range 200 {
				if _, err := f.Write(buf); err != nil {
					t.Error(err)
					return
				}
				if i%10 == 0 {
					if err := f.Sync(); err != nil {
						t.Error(err)
					}
					if err := m.SyncDir(testDir); err != nil {
						t.Error(err)
					}
				}
				if _, err := r.ReadAt(buf[:8], int64(i)*8); err != nil {
					t.Error(err)
				}
				if _, err := m.List(testDir); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	crashes := make(chan int)
	go func() {
		for n := 0; ; n++ {
			c := m.Crash(CrashOptions{TornTail: true, Rand: rand.New(rand.NewPCG(uint64(n), 0))})
			if _, err := c.List(testDir); err != nil {
				t.Error(err)
			}
			select {
			case <-stop:
				crashes <- n
				return
			default:
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-crashes
}

// TestMemCrashFromInjector cuts the file system at an exact operation: the
// injector runs without locks held, so it may call Crash.
func TestMemCrashFromInjector(t *testing.T) {
	m := newTestMem(t)
	var crashed *MemFS
	m.InjectError(func(op Op, name string) error {
		if op == OpSync && crashed == nil {
			crashed = m.Crash(CrashOptions{})
			return errInjected
		}
		return nil
	})
	f := create(t, m, "f", "abc")
	must(t, m.SyncDir(testDir))
	if err := f.Sync(); !errors.Is(err, errInjected) {
		t.Fatalf("Sync: %v", err)
	}
	if got := contents(t, crashed); !maps.Equal(got, map[string]string{"f": ""}) {
		t.Fatalf("crash before the first sync: %q", got)
	}
}
