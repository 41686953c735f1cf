// Package rpctest holds helpers for tests of gRPC servers.
//
// Received is a stats handler (grpc.StatsHandler) counting the request
// messages a server received: gRPC reports a message once it has read
// and decoded it, so a test can tell a call refused before its body was
// read (none) from one refused after (one per message). It counts every
// call of the server it is installed on; it is safe for concurrent use.
package rpctest
