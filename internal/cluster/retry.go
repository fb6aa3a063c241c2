package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// Retriable reports Kubernetes API errors that a retry may cure: conflicts,
// throttling, server timeouts and 5xx, lost connections, requests that
// timed out on their own, and 401 (the
// cached token source resets its token on a 401, so the retry carries a
// fresh one). Everything else (403, 404, validation) is final.
func Retriable(err error) bool {
	if err == nil {
		return false
	}
	// a request that timed out on its own (the client's per-request
	// timeout) is retried like a lost connection; callers stop when their
	// own context has ended
	var urlErr *url.Error
	if errors.As(err, &urlErr) && urlErr.Timeout() {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
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

// Backoff is the pause between retries of a Kubernetes call: exponential
// from 100 ms, capped at 5 s, with jitter so that many invocations retrying
// at once do not come back in step. A wait.Backoff only computes the steps
// (Step); it never sleeps: the callers wait on their clock.
func Backoff() wait.Backoff {
	return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 1 << 30, Cap: 5 * time.Second}
}

// Pause is how long to wait before retrying after err: the backoff's next
// step, or the server's Retry-After when it asks for longer.
func Pause(b *wait.Backoff, err error) time.Duration {
	d := b.Step()
	if s, ok := apierrors.SuggestsClientDelay(err); ok && time.Duration(s)*time.Second > d {
		d = time.Duration(s) * time.Second
	}
	return d
}

// Retry runs fn again while it fails with a Retriable error, with Backoff
// (and Retry-After), until it succeeds, fails for good, or ctx ends: the
// caller's deadline, not a count, bounds it; the pauses are on ctx's clock
// (see WithClock). Each retry is logged with its
// cause (see WithLogger). It returns fn's last error.
func Retry(ctx context.Context, fn func() error) error {
	return RetryIf(ctx, Retriable, fn)
}

// RetryPinned is Retry for a write whose preconditions pin what was read (a
// UID, a resourceVersion). A conflict there says the object changed or was
// replaced since: the same call would meet it again, so it is returned at
// once for the caller to read again and decide. (Retry itself retries a
// conflict: its callers read inside fn.)
func RetryPinned(ctx context.Context, fn func() error) error {
	return RetryIf(ctx, RetriablePinned, fn)
}

// RetriablePinned is Retriable for such a pinned write: not a conflict.
func RetriablePinned(err error) bool { return Retriable(err) && !apierrors.IsConflict(err) }

// RetryIf is Retry for the errors retriable says may be cured.
// A conflict (fn reads again inside) is retried at client-go's
// retry.DefaultRetry pace first, as RetryOnConflict does: it says only that
// another writer came between the read and the write (on a Node, the
// controllers' own updates), not that the server needs relief; past those
// steps, Backoff.
func RetryIf(ctx context.Context, retriable func(error) bool, fn func() error) error {
	b, conflicts := Backoff(), retry.DefaultRetry
	clk := Clock(ctx)
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !retriable(err) || ctx.Err() != nil {
			return err
		}
		var pause time.Duration
		if apierrors.IsConflict(err) && conflicts.Steps > 0 {
			pause = conflicts.Step()
		} else {
			pause = Pause(&b, err)
		}
		if d, ok := ctx.Deadline(); ok && d.Sub(clk.Now()) < pause {
			return err // no time left for another try
		}
		ObserveRetry(ctx, err)
		loggerFrom(ctx).WarnContext(ctx, "retrying Kubernetes call", "cause", Cause(err), "error", err, "attempt", attempt, "pause", pause.String())
		if !Sleep(ctx, clk, pause) {
			return err
		}
	}
}

// Cause names the kind of a Kubernetes API error for logs and metrics:
// unauthorized, forbidden, not-found, conflict, throttled, timeout,
// unavailable, server-error, connection or other.
func Cause(err error) string {
	switch {
	case err == nil:
		return ""
	case apierrors.IsUnauthorized(err):
		return "unauthorized"
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsNotFound(err):
		return "not-found"
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsTooManyRequests(err):
		return "throttled"
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case apierrors.IsServiceUnavailable(err):
		return "unavailable"
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code >= 500 {
		return "server-error"
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "connection"
	}
	return "other"
}

type loggerKey struct{}

type observerKey struct{}

// ObserveRetry reports a retry of a Kubernetes call that failed with err to
// the observer WithRetryObserver put in ctx (if any): for retry loops of
// their own (the eviction loop, the drain step).
func ObserveRetry(ctx context.Context, err error) {
	if observe, ok := ctx.Value(observerKey{}).(func(string)); ok && observe != nil {
		observe(Cause(err))
	}
}

// WithRetryObserver returns a context whose Kubernetes retries (Retry,
// RetryIf) are also reported to observe, with their Cause: counted for
// metrics without another call.
func WithRetryObserver(ctx context.Context, observe func(cause string)) context.Context {
	return context.WithValue(ctx, observerKey{}, observe)
}

// WithLogger returns a context whose Kubernetes retries are logged to log.
func WithLogger(ctx context.Context, log *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, log)
}

// Logger is the logger WithLogger put in ctx (one that discards, if none).
func Logger(ctx context.Context) *slog.Logger { return loggerFrom(ctx) }

func loggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
