package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var pods = schema.GroupResource{Resource: "pods"}

// The retries below pause on Retry's default clock, the real one: in a
// synctest bubble it is the bubble's, so the pauses take no wall time and
// their lengths are exact on a loaded machine.

func TestRetryUntilSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		err := Retry(t.Context(), func() error {
			calls++
			if calls < 4 {
				return apierrors.NewServiceUnavailable("blip")
			}
			return nil
		})
		if err != nil || calls != 4 {
			t.Fatalf("err %v after %d calls, want success on the 4th", err, calls)
		}
	})
}

func TestRetryStopsOnFinalErrors(t *testing.T) {
	for _, final := range []error{
		apierrors.NewForbidden(pods, "p", errors.New("no")),
		apierrors.NewNotFound(pods, "p"),
		apierrors.NewBadRequest("bad"),
	} {
		calls := 0
		err := Retry(context.Background(), func() error { calls++; return final })
		if calls != 1 || !errors.Is(err, final) {
			t.Errorf("%v: %d calls, err %v: want one call and the error", final, calls, err)
		}
	}
}

// A pinned write (preconditions on what was read) gets its conflict back at
// once, for the caller to read again; its other failures are retried as
// Retry's are. Retry itself retries a conflict (its callers read inside fn).
func TestRetryPinnedReturnsConflicts(t *testing.T) {
	conflict := apierrors.NewConflict(pods, "p", errors.New("precondition failed"))
	calls := 0
	err := RetryPinned(context.Background(), func() error {
		calls++
		if calls == 1 {
			return apierrors.NewServiceUnavailable("blip")
		}
		return conflict
	})
	if calls != 2 || !apierrors.IsConflict(err) {
		t.Errorf("RetryPinned: %d calls, err %v; want the 503 retried, then the conflict returned", calls, err)
	}
	calls = 0
	err = Retry(context.Background(), func() error {
		if calls++; calls < 3 {
			return conflict
		}
		return nil
	})
	if calls != 3 || err != nil {
		t.Errorf("Retry: %d calls, err %v; want conflicts retried", calls, err)
	}
}

// The caller's deadline, not a count, bounds the retries: an apiserver down
// for longer than the old 1.5 s of retries is waited out.
// (In real time its 100 ms of slack over the deadline was missed on a
// loaded machine; in the bubble the deadline itself is the bound.)
func TestRetryBoundedByDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const deadline = 1500 * time.Millisecond
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		calls, began := 0, time.Now()
		err := Retry(ctx, func() error { calls++; return io.ErrUnexpectedEOF })
		took := time.Since(began)
		if !errors.Is(err, io.ErrUnexpectedEOF) || calls < 4 || took > deadline {
			t.Fatalf("err %v after %d calls in %s: want the last error, several calls, within the deadline", err, calls, took)
		}
	})
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls, began := 0, time.Now()
		err := Retry(t.Context(), func() error {
			calls++
			if calls == 1 {
				return apierrors.NewTooManyRequests("slow down", 1)
			}
			return nil
		})
		if err != nil || time.Since(began) < time.Second {
			t.Fatalf("err %v, retried after %s: want at least the 1 s Retry-After", err, time.Since(began))
		}
	})
}

func TestCause(t *testing.T) {
	for want, err := range map[string]error{
		"unauthorized": apierrors.NewUnauthorized("x"),
		"forbidden":    apierrors.NewForbidden(pods, "p", errors.New("no")),
		"not-found":    apierrors.NewNotFound(pods, "p"),
		"conflict":     apierrors.NewConflict(pods, "p", errors.New("rv")),
		"throttled":    apierrors.NewTooManyRequests("x", 1),
		"timeout":      apierrors.NewTimeoutError("x", 1),
		"unavailable":  apierrors.NewServiceUnavailable("x"),
		"server-error": apierrors.NewInternalError(errors.New("x")),
		"connection":   io.EOF,
		"other":        errors.New("x"),
	} {
		if got := Cause(err); got != want {
			t.Errorf("Cause(%v) = %s, want %s", err, got, want)
		}
	}
}

func TestRetryObserver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var causes []string
		ctx := WithRetryObserver(t.Context(), func(c string) { causes = append(causes, c) })
		calls := 0
		err := Retry(ctx, func() error {
			calls++
			if calls < 3 {
				return apierrors.NewTooManyRequests("slow down", 0)
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Fatalf("Retry = %v after %d calls", err, calls)
		}
		if len(causes) != 2 || causes[0] != "throttled" || causes[1] != "throttled" {
			t.Errorf("observed %v, want two throttled retries", causes)
		}
		ObserveRetry(context.Background(), apierrors.NewTooManyRequests("x", 0)) // no observer: no panic
	})
}

// A request that timed out on its own (the client's per-request timeout)
// is retried; the caller's context ending is not.
func TestRetriableRequestTimeout(t *testing.T) {
	// as net/http reports it: a timeout error that is also DeadlineExceeded
	own := &url.Error{Op: "Post", URL: "https://api/eviction", Err: clientTimeout{}}
	if !Retriable(own) {
		t.Errorf("a request's own timeout is not retriable: %v", own)
	}
	if Retriable(context.DeadlineExceeded) || Retriable(fmt.Errorf("listing: %w", context.Canceled)) {
		t.Errorf("the caller's context ending is retriable")
	}
}

type clientTimeout struct{}

func (clientTimeout) Error() string {
	return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
}
func (clientTimeout) Timeout() bool        { return true }
func (clientTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// A conflict is retried at client-go's RetryOnConflict pace (10 ms), not
// at the throttling backoff's (100 ms, doubling): three conflicts in a row
// on a Node the controllers update cost about 30 ms of the bubble's time,
// not 700. A 503 is still backed off.
func TestRetryConflictSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			err      error
			min, max time.Duration
		}{
			{"conflict", apierrors.NewConflict(pods, "p", errors.New("rv")), 25 * time.Millisecond, 40 * time.Millisecond},
			{"unavailable", apierrors.NewServiceUnavailable("busy"), 300 * time.Millisecond, 2 * time.Second},
		} {
			calls := 0
			begin := time.Now()
			err := Retry(t.Context(), func() error {
				if calls++; calls <= 3 {
					return tc.err
				}
				return nil
			})
			if took := time.Since(begin); err != nil || took < tc.min || took > tc.max {
				t.Errorf("%s three times: took %s (err %v), want %s to %s", tc.name, took, err, tc.min, tc.max)
			}
		}
	})
}
