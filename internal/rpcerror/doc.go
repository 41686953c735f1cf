// Package rpcerror is the one place where Strata's servers turn errors into
// gRPC statuses and where clients read them back.
//
// Every non-OK status a Strata server returns carries a
// strata.common.v1.ErrorInfo detail: a stable reason word, whether the
// request may be retried unchanged, and, for requests that reached the wrong
// node, the address to retry at. Codes are the standard gRPC ones; Strata
// never invents its own.
//
// Retryable means "the request was definitely not applied, or applying it
// again is harmless". An error whose outcome is unknown (a write that timed
// out after it was proposed) is never marked retryable.
package rpcerror
