package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"

	"github.com/minio/minio-go/v7"
	"github.com/strata-log/strata/tiering/objstore"
)

// S3 error codes classify knows by name; the HTTP status decides the rest.
var (
	notFoundCodes = map[string]bool{"NoSuchKey": true, "NoSuchUpload": true}
	// Codes that no retry fixes: the bucket, the credentials or the request
	// is wrong. An operator must act (tiering stalls and alerts).
	permanentCodes = map[string]bool{
		"NoSuchBucket": true, "AccessDenied": true, "AllAccessDisabled": true,
		"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "ExpiredToken": true,
		"InvalidBucketName": true, "XMinioInvalidObjectName": true, "InvalidArgument": true,
		"InvalidRequest": true, "MalformedXML": true, "EntityTooLarge": true, "EntityTooSmall": true,
		"InvalidPart": true, "InvalidPartOrder": true, "NotImplemented": true, "MethodNotAllowed": true,
		"AuthorizationHeaderMalformed": true, "InvalidRegion": true,
	}
	// Codes that say "later": throttling and server trouble.
	transientCodes = map[string]bool{
		"SlowDown": true, "SlowDownRead": true, "SlowDownWrite": true, "InternalError": true,
		"ServiceUnavailable": true, "RequestTimeout": true, "Throttling": true,
		"ThrottlingException": true, "RequestLimitExceeded": true, "RequestThrottled": true,
		"XMinioServerNotInitialized": true, "OperationAborted": true,
	}
)

// classify is the one place the s3 store turns an error into a classified
// objstore error (doc.go lists the rules).
func classify(op objstore.Op, key string, err error) error {
	if err == nil {
		return nil
	}
	var (
		oe   *objstore.Error
		se   *sourceError
		er   minio.ErrorResponse
		uae  x509.UnknownAuthorityError
		cie  x509.CertificateInvalidError
		he   x509.HostnameError
		rhe  tls.RecordHeaderError
		kind error
	)
	switch {
	case errors.As(err, &oe):
		return err
	case errors.Is(err, objstore.ErrInvalidKey):
		kind = objstore.ErrInvalidKey
	case errors.Is(err, objstore.ErrInvalidRange):
		kind = objstore.ErrInvalidRange
	case errors.Is(err, objstore.ErrPermanent):
		kind = objstore.ErrPermanent
	case errors.As(err, &se) && se.short:
		kind = objstore.ErrPermanent // the caller announced a wrong size
	case errors.As(err, &se):
		kind = objstore.ErrTransient // a fresh source may do better
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		kind = objstore.ErrTransient
	case errors.As(err, &er) && er.Code != "":
		kind = classifyResponse(op, er)
	case errors.As(err, &er) && er.StatusCode != 0:
		kind = classifyResponse(op, er)
	case errors.Is(err, errProtocol):
		kind = objstore.ErrPermanent
	case errors.As(err, &uae), errors.As(err, &cie), errors.As(err, &he), errors.As(err, &rhe):
		kind = objstore.ErrPermanent // TLS will not start working by itself
	default:
		// Connection refused or reset, timeouts, a body cut short: the
		// network, which recovers.
		kind = objstore.ErrTransient
	}
	return objstore.NewError(op, key, kind, err)
}

// classifyResponse classifies an S3 error answer by code, then status.
func classifyResponse(op objstore.Op, er minio.ErrorResponse) error {
	code, status := er.Code, er.StatusCode
	switch {
	case code == "NoSuchUpload" && op == objstore.OpPut:
		// The upload was aborted under a running Put (a sweeper): a new
		// Put makes a new upload.
		return objstore.ErrTransient
	case notFoundCodes[code]:
		return objstore.ErrNotFound
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return objstore.ErrPreconditionFailed
	case code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable:
		return objstore.ErrInvalidRange
	case permanentCodes[code]:
		return objstore.ErrPermanent
	case transientCodes[code]:
		return objstore.ErrTransient
	case status == http.StatusNotFound:
		return objstore.ErrNotFound // HEAD answers carry no code
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status == 499:
		return objstore.ErrTransient
	case status == http.StatusNotImplemented:
		return objstore.ErrPermanent
	case status >= 500:
		return objstore.ErrTransient
	case status >= 400:
		return objstore.ErrPermanent
	}
	return objstore.ErrTransient
}
