// Package objfault is a fault-injecting HTTP proxy for tests of S3
// clients: an httputil.ReverseProxy on a loopback port (10000-31999) in
// front of a real S3 server (MinIO from miniotest), which a test programs
// with rules to make the server slow, failing, hung, truncating or down.
//
// A Rule matches requests by method, a substring of the object key (the
// path after the bucket; clients must use path-style requests) and query
// parameters ("uploadId", "partNumber=2"), optionally only its first Times
// matches. A request gets the first matching rule, which can, in order:
// delay it (Latency); hold it until Release, Close or the client's
// deadline (Hang); answer with an S3 XML error such as 503 SlowDown or 500
// InternalError instead of forwarding (Status, Code); or forward it and cut
// the response body after a number of bytes, by breaking the connection or
// by ending the body early and cleanly (TruncateBody, CleanTruncate). A
// rule with no action only counts (Handle.Hits). Every request is logged
// (Requests, Total).
//
// SetDown(true) is "the server is down": the listener closes, so new
// connections are refused, and open connections are cut; SetDown(false)
// listens again on the same port. (To hang the server instead, pause the
// MinIO process: miniotest.Server.Pause.)
//
// The proxy preserves the Host header, so request signatures made for the
// proxy's address stay valid at the server. Close releases held requests
// and waits for every goroutine the proxy started.
package objfault
