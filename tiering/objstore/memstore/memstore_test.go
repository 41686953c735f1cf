package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
	"github.com/strata-log/strata/tiering/objstore/objstoretest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Config{
		New: func(*testing.T) objstore.Store { return memstore.New(memstore.Options{}) },
	})
}

func TestConformanceWithPrefix(t *testing.T) {
	objstoretest.Run(t, objstoretest.Config{
		New: func(t *testing.T) objstore.Store {
			s, err := objstore.WithPrefix(memstore.New(memstore.Options{}), "tenant/one")
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

func TestHookFailsOneCallUnclassifiedIsTransient(t *testing.T) {
	s := memstore.New(memstore.Options{})
	var calls atomic.Int32
	s.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpPut && calls.Add(1) == 1 {
			return memstore.Fault{Err: errors.New("boom")}
		}
		return memstore.Fault{}
	})
	_, err := s.Put(t.Context(), "k", bytes.NewReader([]byte("x")), 1, nil)
	if !errors.Is(err, objstore.ErrTransient) {
		t.Fatalf("first Put: %v, want ErrTransient", err)
	}
	if _, err := s.Stat(t.Context(), "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a failed Put had an effect: Stat = %v", err)
	}
	if _, err := s.Put(t.Context(), "k", bytes.NewReader([]byte("x")), 1, nil); err != nil {
		t.Fatalf("second Put: %v", err)
	}
}

func TestHookKeepsClassAndFailsOneDeleteKey(t *testing.T) {
	s := memstore.New(memstore.Options{})
	for _, k := range []string{"a", "b"} {
		if err := s.PutIfAbsent(t.Context(), k, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.SetHook(func(c memstore.Call) memstore.Fault {
		if c.Op == objstore.OpDelete && c.Key == "b" {
			return memstore.Fault{Err: objstore.ErrPermanent}
		}
		return memstore.Fault{}
	})
	failed, err := s.Delete(t.Context(), []string{"a", "b"})
	if err != nil || len(failed) != 1 || failed[0].Key != "b" || !errors.Is(failed[0].Err, objstore.ErrPermanent) {
		t.Fatalf("Delete = %+v, %v; want only b failed, permanently", failed, err)
	}
	if _, err := s.Stat(t.Context(), "b"); err != nil {
		t.Fatalf("b was deleted despite the fault: %v", err)
	}
}

func TestBlockedCallEndsAtDeadline(t *testing.T) {
	s := memstore.New(memstore.Options{})
	if err := s.PutIfAbsent(t.Context(), "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	s.SetHook(func(memstore.Call) memstore.Fault { return memstore.Fault{Block: release} })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := s.GetRange(ctx, "k", 0, -1)
	if !errors.Is(err, objstore.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked GetRange: %v, want transient deadline", err)
	}
}

func TestBodyFaults(t *testing.T) {
	s := memstore.New(memstore.Options{})
	data := []byte("0123456789")
	if err := s.PutIfAbsent(t.Context(), "k", data); err != nil {
		t.Fatal(err)
	}
	s.SetHook(func(c memstore.Call) memstore.Fault {
		switch {
		case c.Op == objstore.OpGetRange && c.Off == 0:
			return memstore.Fault{Body: func(b []byte) []byte { return b[:4] }}
		case c.Op == objstore.OpGetRange:
			return memstore.Fault{Body: func(b []byte) []byte { b[0] ^= 0xff; return b }}
		}
		return memstore.Fault{}
	})
	rc, err := s.GetRange(t.Context(), "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, objstore.ErrTransient) || string(got) != "0123" {
		t.Fatalf("truncated read = %q, %v", got, err)
	}
	rc, err = s.GetRange(t.Context(), "k", 5, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(rc)
	if err != nil || bytes.Equal(got, data[5:]) || len(got) != 5 {
		t.Fatalf("corrupted read = %q, %v; want 5 changed bytes, no error", got, err)
	}
	s.SetHook(nil)
	rc, _ = s.GetRange(t.Context(), "k", 0, -1)
	if got, _ := io.ReadAll(rc); !bytes.Equal(got, data) {
		t.Fatal("the stored object was changed by a Body fault")
	}
}

func TestWipeAndIncompleteUploads(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := memstore.New(memstore.Options{Now: func() time.Time { return now }})
	if err := s.PutIfAbsent(t.Context(), "t/1/a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat(t.Context(), "t/1/a")
	if err != nil || !info.LastModified.Equal(now) {
		t.Fatalf("Stat = %+v, %v; want the injected time", info, err)
	}
	old := now.Add(-7 * time.Hour)
	id := s.AddIncompleteUpload("t/1/b", old)
	var ups []objstore.UploadInfo
	err = s.ListIncompleteUploads(t.Context(), "t/", func(u objstore.UploadInfo) bool { ups = append(ups, u); return true })
	if err != nil || len(ups) != 1 || ups[0] != (objstore.UploadInfo{Key: "t/1/b", UploadID: id, Initiated: old}) {
		t.Fatalf("ListIncompleteUploads = %+v, %v", ups, err)
	}
	s.Wipe()
	if _, err := s.Stat(t.Context(), "t/1/a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("after Wipe, Stat = %v", err)
	}
}
