package s3

import (
	"fmt"
	"net/http"
	"strings"
)

// Defaults of Config.
const (
	DefaultRegion          = "us-east-1"
	DefaultPartSize        = 16 << 20
	DefaultPartConcurrency = 2
	DefaultMaxAttempts     = 3
	// MinPartSize is S3's smallest part (but the last).
	MinPartSize = 5 << 20
)

// Config configures a Store. Zero fields take the defaults above.
type Config struct {
	// Endpoint is the server's HOST:PORT (no scheme).
	Endpoint string
	// Bucket must exist; the store never creates it.
	Bucket string
	// Region signs requests. MinIO accepts any; AWS needs the bucket's.
	Region string
	// AccessKeyID, SecretAccessKey and SessionToken (optional) are the
	// static credentials requests are signed with.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Insecure uses plain HTTP (loopback MinIO in tests and dev).
	Insecure bool
	// PartSize is the size of each part of a streamed (size -1) or large
	// Put; a streamed Put buffers PartConcurrency parts in memory.
	PartSize uint64
	// PartConcurrency is how many parts of one Put are sent at once.
	PartConcurrency uint
	// MaxAttempts bounds the requests minio-go makes for one call (the
	// first plus retries; minio-go's own default is 10, with backoff, which
	// would hide an outage inside a call). Retrying beyond that is the
	// caller's decision, with its own backoff and deadline.
	MaxAttempts int
	// Transport replaces the default HTTP transport (tests, proxies).
	Transport http.RoundTripper
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.PartSize == 0 {
		c.PartSize = DefaultPartSize
	}
	if c.PartConcurrency == 0 {
		c.PartConcurrency = DefaultPartConcurrency
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	return c
}

// Validate reports the first invalid field (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Endpoint == "" || strings.Contains(c.Endpoint, "/"):
		return fmt.Errorf("s3: endpoint %q: want HOST:PORT without scheme or path", c.Endpoint)
	case c.Bucket == "":
		return fmt.Errorf("s3: no bucket")
	case c.AccessKeyID == "" || c.SecretAccessKey == "":
		return fmt.Errorf("s3: no credentials (access key id and secret access key)")
	case c.PartSize < MinPartSize:
		return fmt.Errorf("s3: part size %d is below S3's minimum of %d", c.PartSize, MinPartSize)
	case c.MaxAttempts < 1:
		return fmt.Errorf("s3: max attempts %d, want at least 1", c.MaxAttempts)
	}
	return nil
}

// String describes c without its secrets, for logs.
func (c Config) String() string {
	c = c.withDefaults()
	scheme := "https"
	if c.Insecure {
		scheme = "http"
	}
	return fmt.Sprintf("s3{endpoint=%s://%s bucket=%s region=%s access-key-id=%s part-size=%d part-concurrency=%d max-attempts=%d}",
		scheme, c.Endpoint, c.Bucket, c.Region, c.AccessKeyID, c.PartSize, c.PartConcurrency, c.MaxAttempts)
}
