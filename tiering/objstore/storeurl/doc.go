// Package storeurl turns the store URL of a flag (the broker's tier store)
// into an objstore.Store. Two forms are accepted:
//
//	s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&region=R][&insecure=true]
//	file:///ABS/DIR
//
// s3: BUCKET must be a valid S3 bucket name and exist. PREFIX (leading and
// trailing "/" ignored) must be a valid key; every key of the store is put
// under PREFIX + "/" (objstore.WithPrefix), so several clusters or tests
// can share a bucket. endpoint is required (no default provider is
// assumed); region defaults to us-east-1 and insecure (plain HTTP) to
// false. Requests use path-style addressing. Unknown or repeated query
// parameters are errors, so a typo does not silently fall back to a
// default. Credentials never appear in the URL: they come from
// Options, else AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// (optionally) AWS_SESSION_TOKEN.
//
// file: a localdir store rooted at the absolute directory (created if
// missing), for a single machine and `strata dev`.
//
// Parse errors wrap ErrInvalidURL and say which form is expected.
package storeurl
