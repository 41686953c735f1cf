package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// The dev cluster's object store. MinIO is an external binary run as one
// more node (no MinIO code is linked: its licence is AGPL).
const (
	// RoleMinIO is the role, and MinIOName the name, of the MinIO node.
	RoleMinIO = "minio"
	MinIOName = "minio"
	// MinIOBucket is the bucket the brokers tier to, under the key prefix
	// minIOPrefix (so the bucket can hold other things too).
	MinIOBucket = "strata"
	minIOPrefix = "dev"
	// The root credentials: fixed, since the server only listens on
	// loopback and holds throw-away data. They travel in the environment of
	// MinIO and of the brokers, so they are recorded only in the state file
	// (Node.Env), never in arguments (visible to every user in ps) or in the
	// user's profile.
	minIOUser     = "strata-dev"
	minIOPassword = "strata-dev-secret"
)

// Environment variables MinIO and the brokers' S3 client read.
const (
	envMinIOUser     = "MINIO_ROOT_USER"
	envMinIOPassword = "MINIO_ROOT_PASSWORD"
)

// FindMinIO returns the absolute path of the minio binary to run, or "" if
// there is none: first in binDir (beside the role binaries, where a
// release bundle would put it), then on $PATH, then in $GOPATH/bin (each
// entry of GOPATH; $HOME/go when GOPATH is unset), where `make minio`
// installs it. getenv is os.Getenv in production; tests pass their own.
func FindMinIO(binDir string, getenv func(string) string) string {
	dirs := []string{binDir}
	for _, dir := range filepath.SplitList(getenv("PATH")) {
		// Relative PATH entries depend on the working directory; Go's
		// exec.LookPath refuses them too (exec.ErrDot).
		if filepath.IsAbs(dir) {
			dirs = append(dirs, dir)
		}
	}
	if gopath := getenv("GOPATH"); gopath != "" {
		for _, dir := range filepath.SplitList(gopath) {
			dirs = append(dirs, filepath.Join(dir, "bin"))
		}
	} else if home := getenv("HOME"); home != "" {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "minio")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			if abs, err := filepath.Abs(p); err == nil {
				return abs
			}
			return p
		}
	}
	return ""
}

// TierStore returns the --tier-store URL the brokers get: the MinIO
// bucket when o.MinIO names a binary, else the directory DIR/tier (made
// absolute, as file URLs must be).
func TierStore(o Options) (string, error) {
	if o.runsMinIO() {
		return fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true", MinIOBucket, minIOPrefix, o.addr(MinIOName, o.minIOPort())), nil
	}
	dir, err := filepath.Abs(filepath.Join(o.Dir, "tier"))
	if err != nil {
		return "", fmt.Errorf("devcluster: %w", err)
	}
	return (&url.URL{Scheme: "file", Path: dir}).String(), nil
}

// runsMinIO reports whether the cluster has a MinIO node: only when there
// is a binary and brokers to use it.
func (o Options) runsMinIO() bool { return o.MinIO != "" && o.Brokers > 0 }

// planMinIO plans the MinIO node: S3 on minIOPort (MinIOPort, or derived
// from KafkaPort), console on +1 (fixed, since MinIO otherwise picks a
// random console port), data in DIR/minio.
func planMinIO(o Options) Node {
	port := o.minIOPort()
	n := serverNode(o, RoleMinIO, MinIOName, "", port, port+1)
	n.Bin = o.MinIO
	// --quiet: no start-up banner, which would print the credentials into
	// the log file.
	n.Args = []string{"server", n.DataDir, "--address", n.Listen, "--console-address", n.Admin, "--quiet"}
	n.Env = []string{envMinIOUser + "=" + minIOUser, envMinIOPassword + "=" + minIOPassword, "MINIO_UPDATE=off"}
	return n
}

// brokerTierEnv is what a broker needs to reach the MinIO bucket. An empty
// session token overrides one the user may have for a real cloud account,
// which MinIO would reject.
func brokerTierEnv() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + minIOUser, "AWS_SECRET_ACCESS_KEY=" + minIOPassword, "AWS_SESSION_TOKEN="}
}

// MinIOClient returns a client for the MinIO node n with the root
// credentials recorded in n.Env (path-style; no idle connections, so
// short-lived uses leave nothing behind).
func MinIOClient(n Node) (*minio.Client, error) {
	var user, password string
	for _, kv := range n.Env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case envMinIOUser:
			user = v
		case envMinIOPassword:
			password = v
		}
	}
	c, err := minio.New(n.Listen, &minio.Options{
		Creds:        credentials.NewStaticV4(user, password, ""),
		Transport:    &http.Transport{DisableKeepAlives: true},
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		return nil, fmt.Errorf("devcluster: minio client: %w", err)
	}
	return c, nil
}

// minIOProbe returns a readiness probe for the MinIO node n: ready once
// /minio/health/live answers 200 and the bucket exists. The probe creates
// the bucket on first start; on later starts it finds it (data survives).
func minIOProbe(n Node) (func(context.Context) error, error) {
	client, err := MinIOClient(n)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := httpOK(ctx, "http://"+n.Listen+"/minio/health/live"); err != nil {
			return err
		}
		// Live comes before the object layer is up: S3 calls may fail with
		// "server not initialized" for a moment, and the caller retries.
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		exists, err := client.BucketExists(ctx, MinIOBucket)
		if err != nil || exists {
			return err
		}
		err = client.MakeBucket(ctx, MinIOBucket, minio.MakeBucketOptions{})
		if minio.ToErrorResponse(err).Code == "BucketAlreadyOwnedByYou" {
			return nil
		}
		return err
	}, nil
}

// probeClient keeps no idle connections: probes are rare and short-lived.
var probeClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// httpOK GETs url and wants 200; the error says what came back instead.
func httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return errors.New(strings.TrimSpace(fmt.Sprintf("%d %s", resp.StatusCode, body)))
	}
	return nil
}
