package cluster

import (
	"context"
	"errors"
	"io"
	"net"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
)

// Retriable reports Kubernetes API errors that a retry may cure: conflicts,
// throttling, server timeouts and 5xx, lost connections, and 401 (the
// cached token source resets its token on a 401, so the retry carries a
// fresh one). Everything else (403, 404, validation) is final.
func Retriable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if apierrors.IsConflict(err) || apierrors.IsUnauthorized(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsInternalError(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err) {
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code >= 500
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Retry runs fn again while it fails with a Retriable error, with client-go's
// default backoff (about 1.5 s in all), and returns the last error.
func Retry(fn func() error) error {
	return retry.OnError(retry.DefaultBackoff, Retriable, fn)
}
