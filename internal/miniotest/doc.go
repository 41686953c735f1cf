// Package miniotest runs a real MinIO server as a child process for tests
// of the S3 object store and of everything tiered on it. MinIO is only an
// external test binary: no MinIO server code is linked (its licence is
// AGPL).
//
// # Finding the binary
//
// $STRATA_MINIO_BIN, else $(go env GOPATH)/bin/minio, else minio on PATH.
// `make minio` installs it (a pinned version, built from source, about
// five minutes the first time). Without it a test that needs MinIO is
// skipped under -short and fails otherwise, so CI cannot pass without
// running it.
//
// # Servers
//
// A server listens on 127.0.0.1 at a port from 10000-31999 (below Linux's
// ephemeral range; see proctest.FreeAddr), with its console on a second
// such port, root user RootUser / RootPassword, a temporary data directory
// and the bucket Bucket. Start is "ready" only once /minio/health/live
// answers 200 and the bucket exists (polled with a deadline, never a bare
// sleep); if the process exits meanwhile the start fails with its log.
//
//   - Shared gives the tests of a package one server, started on first use
//     and stopped by Main (call it from TestMain); each test keys its
//     objects under Prefix(t).
//   - Start gives one test its own server, stopped by the test's cleanup:
//     for outage tests, which Stop, Kill, Pause, Resume and Restart it.
//     Restart reuses the data directory and port, so objects survive and
//     clients reconnect to the same address.
//
// Child processes run in their own process group and receive SIGKILL if
// the test binary dies, so a panicking test leaves no server behind.
package miniotest
