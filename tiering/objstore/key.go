package objstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of keys and user metadata. They are S3's (1024-byte keys, 2 KiB of
// user metadata), so every implementation accepts exactly what S3 does for
// the keys Strata writes.
const (
	MaxKeyBytes      = 1024
	MaxMetadataBytes = 2048
)

// ValidateKey checks the key rules every implementation enforces: 1 to
// MaxKeyBytes bytes of UTF-8 without control characters or backslashes,
// "/"-separated segments that are neither empty nor "." nor "..", so no
// leading, trailing or doubled "/". The rules keep a key a safe relative
// path for localdir and the same key valid in every store. The error wraps
// ErrInvalidKey.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: length %d not in 1..%d", ErrInvalidKey, len(key), MaxKeyBytes)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: %q is not UTF-8", ErrInvalidKey, key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("%w: %q holds %q", ErrInvalidKey, key, r)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q has an empty, \".\" or \"..\" segment", ErrInvalidKey, key)
		}
	}
	return nil
}

// ValidateMetadata checks user metadata: keys of lower-case ASCII letters,
// digits and "-" (S3 sends metadata as HTTP headers, whose names lose their
// case), values of printable ASCII, at most MaxMetadataBytes in all. The
// error wraps ErrPermanent.
func ValidateMetadata(meta map[string]string) error {
	total := 0
	for k, v := range meta {
		if k == "" {
			return fmt.Errorf("%w: empty metadata key", ErrPermanent)
		}
		for _, c := range []byte(k) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%w: metadata key %q: only a-z, 0-9 and -", ErrPermanent, k)
			}
		}
		for _, c := range []byte(v) {
			if c < 0x20 || c > 0x7e {
				return fmt.Errorf("%w: metadata %q: value must be printable ASCII", ErrPermanent, k)
			}
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return fmt.Errorf("%w: %d bytes of metadata, at most %d", ErrPermanent, total, MaxMetadataBytes)
	}
	return nil
}

// ValidateRange checks GetRange's arguments against an object of the given
// size (see Store.GetRange). The error wraps ErrInvalidRange.
func ValidateRange(off, n, size int64) error {
	if err := ValidateRangeArgs(off, n); err != nil {
		return err
	}
	if off != 0 && off >= size {
		return fmt.Errorf("%w: offset %d of a %d-byte object", ErrInvalidRange, off, size)
	}
	return nil
}

// ValidateRangeArgs checks what can be checked without the object's size.
func ValidateRangeArgs(off, n int64) error {
	if off < 0 || n == 0 {
		return fmt.Errorf("%w: offset %d, length %d", ErrInvalidRange, off, n)
	}
	return nil
}

// RangeEnd returns the end (exclusive) of the range [off, off+n) cut at
// size, n < 0 meaning to the end.
func RangeEnd(off, n, size int64) int64 {
	if n < 0 || n > size-off {
		return size
	}
	return off + n
}
