package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/memstore"
)

func TestValidateKey(t *testing.T) {
	for _, key := range []string{"a", "a/b", "strata/c1/t/x/0/00000000000000000000-00000000000000000009-g0-0123456789abcdef.seg",
		"a.b", "...", "a/.b", "ü", strings.Repeat("k", objstore.MaxKeyBytes)} {
		if err := objstore.ValidateKey(key); err != nil {
			t.Errorf("ValidateKey(%q): %v", key, err)
		}
	}
	for _, key := range []string{"", "/a", "a/", "a//b", ".", "..", "a/./b", "a/..", `a\b`, "a\tb", "a\x7fb", "\xc3",
		strings.Repeat("k", objstore.MaxKeyBytes+1)} {
		if err := objstore.ValidateKey(key); !errors.Is(err, objstore.ErrInvalidKey) || !errors.Is(err, objstore.ErrPermanent) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey (a permanent error)", key, err)
		}
	}
}

func TestErrorMatchesKindAndCause(t *testing.T) {
	err := objstore.NewError(objstore.OpGetRange, "a/b", objstore.ErrTransient, context.DeadlineExceeded)
	if !errors.Is(err, objstore.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("%v: want transient and deadline exceeded only", err)
	}
	if got, want := err.Error(), "objstore: get-range a/b: transient error: context deadline exceeded"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	// A cause that names its kind is not prefixed with it twice.
	cause := fmt.Errorf("%w: %q has an empty segment", objstore.ErrInvalidKey, "a//b")
	err = objstore.NewError(objstore.OpPut, "a//b", objstore.ErrInvalidKey, cause)
	if got, want := err.Error(), `objstore: put a//b: invalid key: "a//b" has an empty segment`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !objstore.Classified(err) || objstore.Classified(errors.New("x")) {
		t.Fatal("Classified is wrong")
	}
}

func TestWithPrefixIsolates(t *testing.T) {
	inner := memstore.New(memstore.Options{})
	if _, err := objstore.WithPrefix(inner, "bad//prefix"); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("WithPrefix(bad//prefix): %v", err)
	}
	if s, err := objstore.WithPrefix(inner, ""); err != nil || s != objstore.Store(inner) {
		t.Fatalf("WithPrefix(\"\") = %v, %v; want the store itself", s, err)
	}
	a, _ := objstore.WithPrefix(inner, "tenant/a")
	b, _ := objstore.WithPrefix(inner, "tenant/ab")
	ctx := t.Context()
	if err := a.PutIfAbsent(ctx, "k", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.PutIfAbsent(ctx, "k", []byte("b")); err != nil {
		t.Fatalf("same key under another prefix: %v", err)
	}
	// "tenant/a" must not see "tenant/ab/k" although it starts with it.
	var keys []string
	if err := a.List(ctx, "", "", func(o objstore.ObjectInfo) bool { keys = append(keys, o.Key); return true }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "k" {
		t.Fatalf("List under tenant/a = %q", keys)
	}
	if _, err := inner.Stat(ctx, "tenant/a/k"); err != nil {
		t.Fatalf("the key is not stored under the prefix: %v", err)
	}
	// A key cannot climb out of its prefix.
	_, err := a.Put(ctx, "../ab/k", bytes.NewReader(nil), 0, nil)
	if !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("Put(../ab/k): %v, want ErrInvalidKey", err)
	}
	failed, err := a.Delete(ctx, []string{"k", "missing"})
	if err != nil || len(failed) != 0 {
		t.Fatalf("Delete = %v, %v", failed, err)
	}
	if _, err := b.Stat(ctx, "k"); err != nil {
		t.Fatalf("deleting under tenant/a touched tenant/ab: %v", err)
	}
}
