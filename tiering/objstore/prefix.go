package objstore

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// WithPrefix returns a Store that keeps every key of s under prefix + "/":
// callers see and pass keys without it. It is how a store URL's path
// (s3://bucket/some/prefix) applies to every key, and how tests sharing one
// bucket stay apart. prefix must itself be a valid key; "" returns s. The
// result is an io.Closer that closes s if s is one.
func WithPrefix(s Store, prefix string) (Store, error) {
	if prefix == "" {
		return s, nil
	}
	if err := ValidateKey(prefix); err != nil {
		return nil, fmt.Errorf("objstore: prefix: %w", err)
	}
	return &prefixed{inner: s, prefix: prefix + "/"}, nil
}

type prefixed struct {
	inner  Store
	prefix string // ends in "/"
}

// Close closes the inner store if it is an io.Closer.
func (p *prefixed) Close() error {
	if c, ok := p.inner.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (p *prefixed) full(key string) string { return p.prefix + key }

// check validates the caller's key before it is joined to the prefix, so a
// key like "../x" or "" is refused, not turned into a valid full key.
func (p *prefixed) check(op Op, key string) error {
	if err := ValidateKey(key); err != nil {
		return NewError(op, p.full(key), ErrInvalidKey, err)
	}
	return nil
}

func (p *prefixed) Put(ctx context.Context, key string, r io.Reader, size int64, meta map[string]string) (PutInfo, error) {
	if err := p.check(OpPut, key); err != nil {
		return PutInfo{}, err
	}
	return p.inner.Put(ctx, p.full(key), r, size, meta)
}

func (p *prefixed) PutIfAbsent(ctx context.Context, key string, b []byte) error {
	if err := p.check(OpPutIfAbsent, key); err != nil {
		return err
	}
	return p.inner.PutIfAbsent(ctx, p.full(key), b)
}

func (p *prefixed) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := p.check(OpGetRange, key); err != nil {
		return nil, err
	}
	return p.inner.GetRange(ctx, p.full(key), off, n)
}

func (p *prefixed) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := p.check(OpStat, key); err != nil {
		return ObjectInfo{}, err
	}
	info, err := p.inner.Stat(ctx, p.full(key))
	info.Key = strings.TrimPrefix(info.Key, p.prefix)
	return info, err
}

func (p *prefixed) List(ctx context.Context, prefix, startAfter string, fn func(ObjectInfo) bool) error {
	if startAfter != "" {
		startAfter = p.full(startAfter)
	}
	return p.inner.List(ctx, p.full(prefix), startAfter, func(info ObjectInfo) bool {
		info.Key = strings.TrimPrefix(info.Key, p.prefix)
		return fn(info)
	})
}

func (p *prefixed) Delete(ctx context.Context, keys []string) ([]DeleteError, error) {
	full := make([]string, len(keys))
	for i, k := range keys {
		if err := p.check(OpDelete, k); err != nil {
			return nil, err
		}
		full[i] = p.full(k)
	}
	failed, err := p.inner.Delete(ctx, full)
	for i := range failed {
		failed[i].Key = strings.TrimPrefix(failed[i].Key, p.prefix)
	}
	return failed, err
}

func (p *prefixed) ListIncompleteUploads(ctx context.Context, prefix string, fn func(UploadInfo) bool) error {
	return p.inner.ListIncompleteUploads(ctx, p.full(prefix), func(u UploadInfo) bool {
		u.Key = strings.TrimPrefix(u.Key, p.prefix)
		return fn(u)
	})
}

func (p *prefixed) AbortIncompleteUpload(ctx context.Context, key, uploadID string) error {
	if err := p.check(OpAbortIncompleteUpload, key); err != nil {
		return err
	}
	return p.inner.AbortIncompleteUpload(ctx, p.full(key), uploadID)
}
