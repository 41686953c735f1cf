package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/strata-log/strata/tiering/objstore"
	"github.com/strata-log/strata/tiering/objstore/localdir"
	"github.com/strata-log/strata/tiering/objstore/s3"
)

// ErrInvalidURL is returned (wrapped, with the reason) for a URL that names
// no store.
var ErrInvalidURL = errors.New("storeurl: invalid store URL")

// The environment variables holding S3 credentials, as every S3 tool reads
// them.
const (
	EnvAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken    = "AWS_SESSION_TOKEN"
)

// Location is a parsed store URL.
type Location struct {
	Scheme string // "s3" or "file"

	// s3
	Bucket   string
	Prefix   string // without leading or trailing "/"; "" for none
	Endpoint string // HOST[:PORT]
	Region   string // "" for the default
	Insecure bool

	// file
	Dir string // absolute and clean
}

// String returns the canonical URL of l.
func (l Location) String() string {
	if l.Scheme == "file" {
		return (&url.URL{Scheme: "file", Path: l.Dir}).String()
	}
	q := url.Values{"endpoint": {l.Endpoint}}
	if l.Region != "" {
		q.Set("region", l.Region)
	}
	if l.Insecure {
		q.Set("insecure", "true")
	}
	u := url.URL{Scheme: "s3", Host: l.Bucket, RawQuery: q.Encode()}
	if l.Prefix != "" {
		u.Path = "/" + l.Prefix
	}
	return u.String()
}

// usage is appended to every parse error.
const usage = "want s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&region=R][&insecure=true] or file:///ABS/DIR"

// bucketName is S3's rule for bucket names (3-63 characters of lower-case
// letters, digits, "." and "-", starting and ending with a letter or digit).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Parse parses a store URL (see doc.go).
func Parse(raw string) (Location, error) {
	bad := func(format string, args ...any) (Location, error) {
		return Location{}, fmt.Errorf("%w %q: %s; %s", ErrInvalidURL, raw, fmt.Sprintf(format, args...), usage)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%v", err)
	}
	if u.Opaque != "" {
		return bad("no \"//\" after the scheme")
	}
	if u.User != nil {
		return bad("credentials do not belong in the URL (it ends up in logs); set %s and %s", EnvAccessKeyID, EnvSecretAccessKey)
	}
	if u.Fragment != "" {
		return bad("unexpected fragment")
	}
	switch u.Scheme {
	case "s3":
		return parseS3(u, bad)
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return bad("a file URL has no host (three slashes: file:///ABS/DIR)")
		}
		if u.RawQuery != "" {
			return bad("a file URL takes no query")
		}
		if u.Path == "" || !filepath.IsAbs(u.Path) {
			return bad("a file URL needs an absolute directory")
		}
		return Location{Scheme: "file", Dir: filepath.Clean(u.Path)}, nil
	default:
		return bad("unknown scheme %q", u.Scheme)
	}
}

func parseS3(u *url.URL, bad func(string, ...any) (Location, error)) (Location, error) {
	l := Location{Scheme: "s3", Bucket: u.Host}
	if !bucketName.MatchString(l.Bucket) || strings.Contains(l.Bucket, "..") {
		return bad("bucket %q is not a valid S3 bucket name", l.Bucket)
	}
	l.Prefix = strings.Trim(u.Path, "/")
	if l.Prefix != "" {
		if err := objstore.ValidateKey(l.Prefix); err != nil {
			return bad("prefix: %v", err)
		}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return bad("query parameter %q given %d times", k, len(vs))
		}
		switch v := vs[0]; k {
		case "endpoint":
			l.Endpoint = v
		case "region":
			l.Region = v
		case "insecure":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("insecure=%q is not a boolean", v)
			}
			l.Insecure = b
		default:
			return bad("unknown query parameter %q", k)
		}
	}
	if l.Endpoint == "" {
		return bad("endpoint is required")
	}
	if strings.Contains(l.Endpoint, "/") {
		return bad("endpoint %q: HOST:PORT without scheme or path", l.Endpoint)
	}
	if host, port, err := net.SplitHostPort(l.Endpoint); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
			return bad("endpoint %q: bad host or port", l.Endpoint)
		}
	}
	return l, nil
}

// Options are the settings a URL does not carry.
type Options struct {
	// AccessKeyID, SecretAccessKey and SessionToken override the
	// environment variables EnvAccessKeyID, EnvSecretAccessKey and
	// EnvSessionToken.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// PartSize, PartConcurrency, MaxAttempts and Transport are passed to
	// s3.Config (zero: its defaults).
	PartSize        uint64
	PartConcurrency uint
	MaxAttempts     int
	Transport       http.RoundTripper
}

// Open returns the store rawURL names. It contacts no server (a wrong
// bucket or credential shows in the first call), but creates a file
// store's directory.
func Open(ctx context.Context, rawURL string, opts Options) (objstore.Store, error) {
	l, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l.Scheme == "file" {
		return localdir.New(l.Dir)
	}
	cfg := s3.Config{
		Endpoint: l.Endpoint, Bucket: l.Bucket, Region: l.Region, Insecure: l.Insecure,
		AccessKeyID:     firstNonEmpty(opts.AccessKeyID, os.Getenv(EnvAccessKeyID)),
		SecretAccessKey: firstNonEmpty(opts.SecretAccessKey, os.Getenv(EnvSecretAccessKey)),
		SessionToken:    firstNonEmpty(opts.SessionToken, os.Getenv(EnvSessionToken)),
		PartSize:        opts.PartSize, PartConcurrency: opts.PartConcurrency,
		MaxAttempts: opts.MaxAttempts, Transport: opts.Transport,
	}
	if cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
		return nil, fmt.Errorf("storeurl: %s: no credentials: set %s and %s", l, EnvAccessKeyID, EnvSecretAccessKey)
	}
	st, err := s3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("storeurl: %s: %w", l, err)
	}
	return objstore.WithPrefix(st, l.Prefix)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
