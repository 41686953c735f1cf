package s3

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/strata-log/strata/tiering/objstore"
)

func TestClassify(t *testing.T) {
	resp := func(status int, code string) error { return minio.ErrorResponse{StatusCode: status, Code: code} }
	for _, tc := range []struct {
		op   objstore.Op
		err  error
		want error
	}{
		{objstore.OpGetRange, resp(404, "NoSuchKey"), objstore.ErrNotFound},
		{objstore.OpStat, resp(404, "404 Not Found"), objstore.ErrNotFound},
		{objstore.OpGetRange, resp(404, "NoSuchBucket"), objstore.ErrPermanent},
		{objstore.OpAbortIncompleteUpload, resp(404, "NoSuchUpload"), objstore.ErrNotFound},
		{objstore.OpPut, resp(404, "NoSuchUpload"), objstore.ErrTransient},
		{objstore.OpPut, resp(412, "PreconditionFailed"), objstore.ErrPreconditionFailed},
		{objstore.OpGetRange, resp(416, "InvalidRange"), objstore.ErrInvalidRange},
		{objstore.OpGetRange, resp(503, "SlowDown"), objstore.ErrTransient},
		{objstore.OpPut, resp(500, "InternalError"), objstore.ErrTransient},
		{objstore.OpStat, resp(503, "503 Service Unavailable"), objstore.ErrTransient},
		{objstore.OpGetRange, resp(429, "TooManyRequests"), objstore.ErrTransient},
		{objstore.OpGetRange, resp(400, "RequestTimeout"), objstore.ErrTransient},
		{objstore.OpGetRange, resp(403, "AccessDenied"), objstore.ErrPermanent},
		{objstore.OpList, resp(403, "SignatureDoesNotMatch"), objstore.ErrPermanent},
		{objstore.OpPut, resp(400, "BadDigest"), objstore.ErrPermanent},
		{objstore.OpPut, resp(501, "SomethingNew"), objstore.ErrPermanent},
		{objstore.OpPut, resp(0, "InvalidArgument"), objstore.ErrPermanent},
		{objstore.OpStat, context.DeadlineExceeded, objstore.ErrTransient},
		{objstore.OpStat, fmt.Errorf("get: %w", context.Canceled), objstore.ErrTransient},
		{objstore.OpStat, &url.Error{Op: "Get", URL: "x", Err: syscall.ECONNREFUSED}, objstore.ErrTransient},
		{objstore.OpStat, &net.OpError{Op: "read", Err: syscall.ECONNRESET}, objstore.ErrTransient},
		{objstore.OpGetRange, io.ErrUnexpectedEOF, objstore.ErrTransient},
		{objstore.OpStat, &url.Error{Op: "Get", URL: "x", Err: x509.UnknownAuthorityError{}}, objstore.ErrPermanent},
		{objstore.OpGetRange, fmt.Errorf("%w: bad range", errProtocol), objstore.ErrPermanent},
		{objstore.OpPut, &sourceError{err: errors.New("disk"), short: false}, objstore.ErrTransient},
		{objstore.OpPut, &sourceError{err: errors.New("short"), short: true}, objstore.ErrPermanent},
	} {
		got := classify(tc.op, "k", tc.err)
		if !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("classify(%s, %v) = %v, want %v wrapping the cause", tc.op, tc.err, got, tc.want)
		}
		classes := 0
		for _, c := range []error{objstore.ErrNotFound, objstore.ErrPreconditionFailed, objstore.ErrTransient, objstore.ErrPermanent} {
			if errors.Is(got, c) {
				classes++
			}
		}
		if classes != 1 {
			t.Errorf("classify(%s, %v) = %v matches %d classes, want exactly 1", tc.op, tc.err, got, classes)
		}
	}
	if classify(objstore.OpStat, "k", nil) != nil {
		t.Error("classify(nil) is not nil")
	}
}

func TestExpectedLength(t *testing.T) {
	for _, tc := range []struct {
		contentRange  string
		contentLength int64
		off, n        int64
		want          int64
		wantErr       bool
	}{
		{"bytes 0-999/1000", 1000, 0, -1, 1000, false},
		{"bytes 10-14/1000", 5, 10, 5, 5, false},
		{"bytes 990-999/1000", 10, 990, 100, 10, false},
		{"bytes 500-999/1000", 500, 500, -1, 500, false},
		{"", 0, 0, -1, 0, false},       // a whole (empty) object, no range
		{"", 1000, 0, -1, 1000, false}, // a server that ignores Range at 0
		{"", 1000, 0, 10, 0, true},     // ... but then sends more than asked
		{"", 1000, 10, 5, 0, true},     // the wrong bytes
		{"bytes 0-4/1000", 5, 10, 5, 0, true},
		{"bytes 10-13/1000", 4, 10, 5, 0, true}, // fewer than the range holds
		{"bytes 10-14/12", 5, 10, 5, 0, true},
		{"bytes */1000", 0, 0, 5, 0, true},
		{"garbage", 0, 0, 5, 0, true},
	} {
		got, err := expectedLength(tc.contentRange, tc.contentLength, tc.off, tc.n)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("expectedLength(%q, %d, %d, %d) = %d, %v; want %d, error %v",
				tc.contentRange, tc.contentLength, tc.off, tc.n, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !errors.Is(err, errProtocol) {
			t.Errorf("expectedLength(%q): %v is not a protocol error", tc.contentRange, err)
		}
	}
}
